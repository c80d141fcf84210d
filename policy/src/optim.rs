//! AdamW over the adapters' `Var`s, skipping parameters that received no gradient.
//!
//! A zero gradient still moves a parameter under AdamW (the moments decay, weight decay applies), so a
//! parameter that a routed batch must not touch has to be *absent* from the gradients, not zero: the LoRA
//! routing arranges that, and this optimizer leaves such parameters, and their moments, exactly as they were.

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig { lr: 1e-4, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 }
    }
}

struct Slot {
    var: Var,
    m: Tensor,
    v: Tensor,
    t: i32,
}

/// AdamW with per-parameter step counts.
pub struct AdamW {
    pub config: AdamWConfig,
    slots: Vec<Slot>,
}

impl AdamW {
    /// An optimizer over `vars`.
    pub fn new(vars: Vec<Var>, config: AdamWConfig) -> candle_core::Result<AdamW> {
        let slots = vars
            .into_iter()
            .map(|var| {
                let m = var.zeros_like()?;
                let v = var.zeros_like()?;
                Ok(Slot { var, m, v, t: 0 })
            })
            .collect::<candle_core::Result<_>>()?;
        Ok(AdamW { config, slots })
    }

    /// One step; parameters without a gradient in `grads` are skipped entirely.
    pub fn step(&mut self, grads: &GradStore) -> candle_core::Result<()> {
        let c = self.config;
        for s in &mut self.slots {
            let Some(g) = grads.get(s.var.as_tensor()) else { continue };
            s.t += 1;
            s.m = ((&s.m * c.beta1)? + (g * (1.0 - c.beta1))?)?;
            s.v = ((&s.v * c.beta2)? + (g.sqr()? * (1.0 - c.beta2))?)?;
            let mh = (&s.m / (1.0 - c.beta1.powi(s.t)))?;
            let vh = (&s.v / (1.0 - c.beta2.powi(s.t)))?;
            let upd = (mh / (vh.sqrt()? + c.eps)?)?;
            let decayed = (s.var.as_tensor() * (1.0 - c.lr * c.weight_decay))?;
            s.var.set(&(decayed - (upd * c.lr)?)?)?;
        }
        Ok(())
    }
}
