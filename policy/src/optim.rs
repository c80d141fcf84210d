//! AdamW over the adapters' `Var`s, skipping parameters that received no gradient.
//!
//! A zero gradient still moves a parameter under AdamW (the moments decay, weight decay applies), so a
//! parameter that a routed batch must not touch has to be *absent* from the gradients, not zero: the LoRA
//! routing arranges that, and this optimizer leaves such parameters, and their moments, exactly as they were.

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use std::collections::HashMap;
use std::path::Path;

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first-moment (mean) estimate.
    pub beta1: f64,
    /// Decay of the second-moment (squared gradient) estimate.
    pub beta2: f64,
    /// Added to the root of the second moment, for numerical stability.
    pub eps: f64,
    /// Decoupled weight decay, applied per step as `lr · weight_decay · θ`.
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
    /// The hyper-parameters; may be changed between steps (e.g. a learning-rate schedule).
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
        self.step_with(|var| grads.get(var.as_tensor()).cloned())
    }

    /// One step with gradients looked up per parameter (`None`: the parameter is skipped entirely).
    pub fn step_with(&mut self, grad_of: impl Fn(&Var) -> Option<Tensor>) -> candle_core::Result<()> {
        let c = self.config;
        for s in &mut self.slots {
            let Some(g) = grad_of(&s.var) else { continue };
            let g = &g;
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

    /// Writes the moments and step counts (safetensors; `i.m`, `i.v` per parameter in order, and `steps`), so
    /// a resumed run continues exactly. The caller writes it to a temporary path and renames.
    pub fn save_state(&self, path: &Path) -> candle_core::Result<()> {
        let mut map = HashMap::new();
        for (i, s) in self.slots.iter().enumerate() {
            map.insert(format!("{i}.m"), s.m.to_device(&candle_core::Device::Cpu)?);
            map.insert(format!("{i}.v"), s.v.to_device(&candle_core::Device::Cpu)?);
        }
        let steps: Vec<f32> = self.slots.iter().map(|s| s.t as f32).collect();
        let n = steps.len();
        map.insert("steps".into(), Tensor::from_vec(steps, n, &candle_core::Device::Cpu)?);
        candle_core::safetensors::save(&map, path)
    }

    /// Restores what [`AdamW::save_state`] wrote, checking that it belongs to parameters of the same shapes.
    pub fn load_state(&mut self, path: &Path) -> candle_core::Result<()> {
        let mut map = candle_core::safetensors::load(path, &candle_core::Device::Cpu)?;
        let steps = map.remove("steps").ok_or_else(|| candle_core::Error::Msg(format!("{}: no `steps` tensor", path.display())))?.to_vec1::<f32>()?;
        if steps.len() != self.slots.len() {
            return Err(candle_core::Error::Msg(format!(
                "{}: optimizer state for {} parameters, this run has {}",
                path.display(),
                steps.len(),
                self.slots.len()
            )));
        }
        for (i, s) in self.slots.iter_mut().enumerate() {
            let mut take = |k: &str| -> candle_core::Result<Tensor> {
                let t = map.remove(&format!("{i}.{k}")).ok_or_else(|| candle_core::Error::Msg(format!("{}: no tensor `{i}.{k}`", path.display())))?;
                if t.dims() != s.var.dims() {
                    return Err(candle_core::Error::Msg(format!("{}: `{i}.{k}` has shape {:?}, the parameter {:?}", path.display(), t.dims(), s.var.dims())));
                }
                t.to_device(s.var.device())
            };
            s.m = take("m")?;
            s.v = take("v")?;
            s.t = steps[i] as i32;
        }
        Ok(())
    }
}

#[cfg(test)]
mod state_tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn state_round_trips() {
        let var = Var::from_tensor(&Tensor::ones((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap()).unwrap();
        let mut opt = AdamW::new(vec![var.clone()], AdamWConfig::default()).unwrap();
        let loss = (var.as_tensor() * 3.0).unwrap().sum_all().unwrap();
        opt.step(&loss.backward().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("opt.safetensors");
        opt.save_state(&p).unwrap();
        let mut other = AdamW::new(vec![var.clone()], AdamWConfig::default()).unwrap();
        other.load_state(&p).unwrap();
        assert_eq!(other.slots[0].t, 1);
        assert_eq!(other.slots[0].m.to_vec2::<f32>().unwrap(), opt.slots[0].m.to_vec2::<f32>().unwrap());
        let wrong = AdamW::new(vec![Var::zeros((3, 3), candle_core::DType::F32, &Device::Cpu).unwrap()], AdamWConfig::default());
        assert!(wrong.unwrap().load_state(&p).unwrap_err().to_string().contains("shape"));
    }
}
