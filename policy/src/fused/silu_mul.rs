//! The SwiGLU gate, `silu(g) ⊙ u`, as one op with its backward (composed: silu, mul and their backward
//! passes, each a single-threaded pass and an allocation over `(tokens, intermediate)`).

use super::contiguous_f32;
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

struct SiluMul;

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

/// Elements per parallel task: large enough that a task outweighs its scheduling.
const CHUNK: usize = 1 << 14;

impl CustomOp2 for SiluMul {
    fn name(&self) -> &'static str {
        "silu-mul"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        if l1.shape() != l2.shape() {
            candle_core::bail!("silu-mul: gate {:?} and up {:?} differ in shape", l1.shape(), l2.shape());
        }
        let (g, u) = (contiguous_f32(s1, l1, "silu-mul")?, contiguous_f32(s2, l2, "silu-mul")?);
        let mut y = vec![0f32; g.len()];
        y.par_chunks_mut(CHUNK).zip(g.par_chunks(CHUNK)).zip(u.par_chunks(CHUNK)).for_each(|((yc, gc), uc)| {
            for ((o, &a), &b) in yc.iter_mut().zip(gc).zip(uc) {
                *o = a * sigmoid(a) * b;
            }
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(&self, g: &Tensor, u: &Tensor, _y: &Tensor, grad: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let gs = g.flatten_all()?.to_vec1::<f32>()?;
        let us = u.flatten_all()?.to_vec1::<f32>()?;
        let dy = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dg = vec![0f32; gs.len()];
        let mut du = vec![0f32; gs.len()];
        dg.par_chunks_mut(CHUNK).zip(du.par_chunks_mut(CHUNK)).zip(gs.par_chunks(CHUNK)).zip(us.par_chunks(CHUNK)).zip(dy.par_chunks(CHUNK)).for_each(
            |((((dgc, duc), gc), uc), dyc)| {
                for ((((dg, du), &a), &b), &d) in dgc.iter_mut().zip(duc.iter_mut()).zip(gc).zip(uc).zip(dyc) {
                    let s = sigmoid(a);
                    *du = d * a * s;
                    *dg = d * b * s * (1.0 + a * (1.0 - s));
                }
            },
        );
        Ok((Some(Tensor::from_vec(dg, g.shape(), g.device())?), Some(Tensor::from_vec(du, u.shape(), u.device())?)))
    }
}

/// `silu(gate) ⊙ up`, both differentiable. Off the CPU it is composed from candle ops.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> candle_core::Result<Tensor> {
    if !gate.device().is_cpu() || gate.dtype() != DType::F32 {
        return gate.silu()? * up;
    }
    gate.contiguous()?.apply_op2_arc(&up.contiguous()?, Arc::new(Box::new(SiluMul)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn values_and_gradients_match_the_composed_ops() {
        let dev = Device::Cpu;
        let g = Var::randn(0f32, 2.0, (3, 40000), &dev).unwrap();
        let u = Var::randn(0f32, 1.0, (3, 40000), &dev).unwrap();
        let probe = Tensor::randn(0f32, 1.0, (3, 40000), &dev).unwrap();
        let y = silu_mul(g.as_tensor(), u.as_tensor()).unwrap();
        let y_ref = (g.as_tensor().silu().unwrap() * u.as_tensor()).unwrap();
        let diff = (&y - &y_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 1e-5, "values differ by {diff}");
        let gr = (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let gr_ref = (y_ref * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        for v in [&g, &u] {
            let d = (gr.get(v.as_tensor()).unwrap() - gr_ref.get(v.as_tensor()).unwrap()).unwrap();
            let d = d.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-4, "gradients differ by {d}");
        }
    }
}
