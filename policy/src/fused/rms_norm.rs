//! RMSNorm over the last dimension with a frozen gain, `y = x · rsqrt(mean(x²) + eps) · w`, and its backward
//! (candle's fused `rms_norm` has none; composed, it is six ops forward and a dozen backward per call).

use super::{contiguous_f32, par_rows};
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;
use std::sync::Arc;

struct RmsNorm {
    /// `(H,)`, frozen.
    gain: Vec<f32>,
    eps: f32,
}

fn inverse_rms(row: &[f32], eps: f32) -> f32 {
    let ss: f32 = row.iter().map(|&v| v * v).sum();
    1.0 / (ss / row.len() as f32 + eps).sqrt()
}

impl CustomOp1 for RmsNorm {
    fn name(&self) -> &'static str {
        "rms-norm"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let h = self.gain.len();
        let x = contiguous_f32(s, l, "rms-norm")?;
        if l.shape().dims().last() != Some(&h) {
            candle_core::bail!("rms-norm: input {:?} does not end in the gain's width {h}", l.shape());
        }
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(h * par_rows(h)).zip(x.par_chunks(h * par_rows(h))).for_each(|(yb, xb)| {
            for (yr, xr) in yb.chunks_mut(h).zip(xb.chunks(h)) {
                let r = inverse_rms(xr, self.eps);
                for ((o, &v), &w) in yr.iter_mut().zip(xr).zip(&self.gain) {
                    *o = v * r * w;
                }
            }
        });
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _y: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let h = self.gain.len();
        let xs = x.flatten_all()?.to_vec1::<f32>()?;
        let gs = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dx = vec![0f32; xs.len()];
        // With x̂ = x·r and a = g ⊙ w: dx = r · (a − x̂ · mean(a ⊙ x̂)).
        dx.par_chunks_mut(h * par_rows(h)).zip(xs.par_chunks(h * par_rows(h))).zip(gs.par_chunks(h * par_rows(h))).for_each(|((db, xb), gb)| {
            for ((dr, xr), gr) in db.chunks_mut(h).zip(xb.chunks(h)).zip(gb.chunks(h)) {
                let r = inverse_rms(xr, self.eps);
                let dot: f32 = xr.iter().zip(gr).zip(&self.gain).map(|((&v, &g), &w)| v * g * w).sum();
                let c = dot * r * r / h as f32;
                for (((d, &v), &g), &w) in dr.iter_mut().zip(xr).zip(gr).zip(&self.gain) {
                    *d = r * (g * w - v * c);
                }
            }
        });
        Ok(Some(Tensor::from_vec(dx, x.shape(), x.device())?))
    }
}

/// RMSNorm of `x` over its last dimension with the frozen gain `w`; gradients flow to `x` only. Off the CPU
/// it is composed from candle ops.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        return composed_rms_norm(x, w, eps);
    }
    let op = RmsNorm { gain: w.detach().to_dtype(DType::F32)?.to_vec1()?, eps: eps as f32 };
    x.contiguous()?.apply_op1_arc(Arc::new(Box::new(op)))
}

/// The same function from candle ops.
pub fn composed_rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let var = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(var + eps)?.sqrt()?)?.broadcast_mul(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn values_and_input_gradient_match_the_composed_ops() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 1.0, (2, 5, 12), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, 12, &dev).unwrap();
        let probe = Tensor::randn(0f32, 1.0, (2, 5, 12), &dev).unwrap();
        let y = rms_norm(x.as_tensor(), &w, 1e-5).unwrap();
        let y_ref = composed_rms_norm(x.as_tensor(), &w, 1e-5).unwrap();
        let diff = (&y - &y_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 1e-5, "values differ by {diff}");
        let g = (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = (y_ref * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let d = (g.get(x.as_tensor()).unwrap() - g_ref.get(x.as_tensor()).unwrap()).unwrap();
        let d = d.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(d < 1e-4, "gradients differ by {d}");
    }
}
