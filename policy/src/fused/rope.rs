//! Rotate-half rotary position embedding as one op with its backward (candle's fused `rope` has none;
//! composed, it is two narrows, a negation, two concatenations, two products and a sum, and their backward
//! passes, on every q and k of every layer).
//!
//! For `x: (.., T, hd)` laid out with positions along the second-to-last axis, pairs `(i, i + hd/2)` rotate
//! by the angle of their position: `y₁ = x₁·cos − x₂·sin`, `y₂ = x₂·cos + x₁·sin`. The backward is the
//! rotation by the opposite angle.

use super::contiguous_f32;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor, D};
use rayon::prelude::*;
use std::sync::Arc;

struct Rope {
    /// `(T, hd/2)` each.
    cos: Vec<f32>,
    sin: Vec<f32>,
    t: usize,
    /// Heads per position: 1 for `(.., T, hd)`, `heads` for token-major `(B·T, heads, hd)`.
    heads: usize,
}

impl Rope {
    /// Rotates every `(T, hd)` block of `x` into `y` by `sign` times each position's angle.
    fn rotate(&self, x: &[f32], y: &mut [f32], hd: usize, sign: f32) {
        let half = hd / 2;
        let block = self.t * self.heads * hd;
        y.par_chunks_mut(block).zip(x.par_chunks(block)).for_each(|(yb, xb)| {
            for (row, (yr, xr)) in yb.chunks_mut(hd).zip(xb.chunks(hd)).enumerate() {
                let p = row / self.heads;
                let (c, s) = (&self.cos[p * half..(p + 1) * half], &self.sin[p * half..(p + 1) * half]);
                let (x1, x2) = xr.split_at(half);
                let (y1, y2) = yr.split_at_mut(half);
                for i in 0..half {
                    let si = sign * s[i];
                    y1[i] = x1[i] * c[i] - x2[i] * si;
                    y2[i] = x2[i] * c[i] + x1[i] * si;
                }
            }
        });
    }
}

impl CustomOp1 for Rope {
    fn name(&self) -> &'static str {
        "rope"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let hd = *l.shape().dims().last().unwrap_or(&0);
        let block = self.t * self.heads * hd;
        if !hd.is_multiple_of(2) || block == 0 || !l.shape().elem_count().is_multiple_of(block) || self.cos.len() != self.t * hd / 2 {
            candle_core::bail!("rope: input {:?} does not fit tables of {} positions x {}", l.shape(), self.t, self.cos.len() / self.t.max(1));
        }
        let x = contiguous_f32(s, l, "rope")?;
        let mut y = vec![0f32; x.len()];
        self.rotate(x, &mut y, hd, 1.0);
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _y: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let hd = x.dim(D::Minus1)?;
        let g = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dx = vec![0f32; g.len()];
        self.rotate(&g, &mut dx, hd, -1.0);
        Ok(Some(Tensor::from_vec(dx, x.shape(), x.device())?))
    }
}

/// RoPE of `x: (.., T, hd)` with `cos`, `sin`: `(T, hd/2)`; differentiable in `x`. Off the CPU it is
/// composed from candle ops.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        return composed_rope(x, cos, sin);
    }
    if x.dim(D::Minus2)? != cos.dim(0)? {
        candle_core::bail!("rope: input {:?} does not have {} positions on its second-to-last axis", x.shape(), cos.dim(0)?);
    }
    let op = Rope { cos: cos.flatten_all()?.to_vec1()?, sin: sin.flatten_all()?.to_vec1()?, t: cos.dim(0)?, heads: 1 };
    x.contiguous()?.apply_op1_arc(Arc::new(Box::new(op)))
}

/// RoPE of token-major `x: (B·T, heads, hd)` (position `row mod T`), as the projections lay heads out.
pub fn rope_token_major(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let (rows, heads, hd) = x.dims3()?;
    let t = cos.dim(0)?;
    if t == 0 || rows % t != 0 {
        candle_core::bail!("rope: {rows} rows are not whole sequences of {t} positions");
    }
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        let y = composed_rope(&x.reshape((rows / t, t, heads, hd))?.transpose(1, 2)?, cos, sin)?;
        return y.transpose(1, 2)?.reshape((rows, heads, hd));
    }
    let op = Rope { cos: cos.flatten_all()?.to_vec1()?, sin: sin.flatten_all()?.to_vec1()?, t, heads };
    x.contiguous()?.apply_op1_arc(Arc::new(Box::new(op)))
}

/// The same function from candle ops.
pub fn composed_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    let hd = x.dim(D::Minus1)?;
    let cos = Tensor::cat(&[cos, cos], D::Minus1)?;
    let sin = Tensor::cat(&[sin, sin], D::Minus1)?;
    let x1 = x.narrow(D::Minus1, 0, hd / 2)?;
    let x2 = x.narrow(D::Minus1, hd / 2, hd / 2)?;
    let rot = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
    x.broadcast_mul(&cos)?.broadcast_add(&rot.broadcast_mul(&sin)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn values_and_input_gradient_match_the_composed_ops_and_candles_rope() {
        let dev = Device::Cpu;
        let (t, hd) = (5, 8);
        let x = Var::randn(0f32, 1.0, (2, 3, t, hd), &dev).unwrap();
        let angles = Tensor::randn(0f32, 2.0, (t, hd / 2), &dev).unwrap();
        let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
        let probe = Tensor::randn(0f32, 1.0, (2, 3, t, hd), &dev).unwrap();
        let y = rope(x.as_tensor(), &cos, &sin).unwrap();
        let y_ref = composed_rope(x.as_tensor(), &cos, &sin).unwrap();
        let y_candle = candle_nn::rotary_emb::rope(x.as_tensor(), &cos, &sin).unwrap();
        for other in [&y_ref, &y_candle] {
            let d = (&y - other).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-5, "values differ by {d}");
        }
        let g = (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let g_ref = (&y_ref * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let d = (g.get(x.as_tensor()).unwrap() - g_ref.get(x.as_tensor()).unwrap()).unwrap();
        assert!(d.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap() < 1e-5);
        // Token-major: the same heads as (B·T, heads, hd).
        let tm = x.as_tensor().transpose(1, 2).unwrap().contiguous().unwrap().reshape((2 * t, 3, hd)).unwrap();
        let y_tm = rope_token_major(&tm, &cos, &sin).unwrap();
        let back = y_tm.reshape((2, t, 3, hd)).unwrap().transpose(1, 2).unwrap();
        let d = (back - &y_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(d < 1e-5, "token-major values differ by {d}");
    }
}
