//! Per-layer recomputation ("gradient checkpointing") to bound training memory.
//!
//! A checkpointed block keeps only its input: the forward runs the block, keeps the output values and drops
//! the graph (and with it every intermediate activation); the backward of the custom op recomputes the block
//! from its input with a fresh graph, back-propagates the incoming gradient through it, returns dL/dx, and
//! deposits the adapter gradients of that block in a side store that
//! [`crate::model::Decoder::forward_train_checkpointed`] callers merge into the main [`GradStore`].

use crate::lora::AdapterSet;
use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor, Var};
use std::sync::{Arc, Mutex};

/// Adapter gradients produced inside recomputed blocks, to be merged after `backward()`.
#[derive(Clone, Default)]
pub struct SideGrads {
    grads: Arc<Mutex<Vec<(Var, Tensor)>>>,
}

impl SideGrads {
    /// Adds the side gradients into `store` (summing with what is there).
    pub fn merge_into(&self, store: &mut GradStore) -> candle_core::Result<()> {
        let mut g = self.grads.lock().map_err(|_| candle_core::Error::Msg("side-grad lock poisoned".into()))?;
        for (v, t) in g.drain(..) {
            let sum = match store.get(v.as_tensor()) {
                Some(prev) => (prev + &t)?,
                None => t,
            };
            store.insert(v.as_tensor(), sum);
        }
        Ok(())
    }
}

/// Runs one block again, with a graph, on its kept input.
pub(crate) type Recompute = Box<dyn Fn(&Tensor) -> candle_core::Result<Tensor> + Send + Sync>;

/// The custom op standing for one checkpointed block: its `recompute`, the adapters whose gradients it
/// deposits, and where it deposits them.
pub(crate) struct BlockCheckpoint {
    pub recompute: Recompute,
    pub adapters: Option<AdapterSet>,
    pub side: SideGrads,
}

impl CustomOp2 for BlockCheckpoint {
    fn name(&self) -> &'static str {
        "block-checkpoint"
    }

    fn cpu_fwd(&self, _s1: &CpuStorage, _l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (start, end) = l2.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("block output must be contiguous".into()))?;
        match s2 {
            CpuStorage::F32(v) => Ok((CpuStorage::F32(v[start..end].to_vec()), l2.shape().clone())),
            _ => candle_core::bail!("block-checkpoint: f32 only"),
        }
    }

    fn bwd(&self, x: &Tensor, _y: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let xv = Var::from_tensor(&x.detach())?;
        let y = (self.recompute)(xv.as_tensor())?;
        let g = (y * grad.detach())?.sum_all()?.backward()?;
        if let Some(ad) = &self.adapters {
            let mut side = self.side.grads.lock().map_err(|_| candle_core::Error::Msg("side-grad lock poisoned".into()))?;
            for v in ad.vars() {
                if let Some(t) = g.get(v.as_tensor()) {
                    side.push((v.clone(), t.clone()));
                }
            }
        }
        Ok((g.get(xv.as_tensor()).cloned(), None))
    }
}
