//! The adapters a run starts from: fresh ones (`Policy::init_adapters`) or a saved adapter
//! (`model.init_adapter`, e.g. what `agentrt sft` wrote), shared by `agentrt train` and `agentrt sft`.

use crate::config::ModelSection;
use crate::error::TrainError;
use agentrt_policy::{AdapterSet, LoraConfig, Policy};
use std::path::Path;

pub use agentrt_policy::adapter_io::adapters_dir;

/// Gives `policy` its starting adapters: loaded from `model.init_adapter` when set (its dual-ness must match
/// `model.dual_lora`), else fresh ones drawn from `seed`.
pub fn start_adapters(policy: &mut Policy, model: &ModelSection, seed: u64) -> Result<(), TrainError> {
    if model.init_adapter.is_empty() {
        policy
            .init_adapters(LoraConfig { rank: model.lora_rank, alpha: model.lora_alpha, targets: model.lora_targets.clone(), dual: model.dual_lora }, seed)?;
        return Ok(());
    }
    policy.adapters = Some(load_init_adapter(policy, model)?);
    Ok(())
}

/// A fresh copy of `model.init_adapter` (its own tensors: the KL reference keeps one, frozen, while the
/// trainable copy learns); `None` when no initial adapter is set.
pub fn reference_adapters(policy: &Policy, model: &ModelSection) -> Result<Option<AdapterSet>, TrainError> {
    if model.init_adapter.is_empty() {
        return Ok(None);
    }
    load_init_adapter(policy, model).map(Some)
}

fn load_init_adapter(policy: &Policy, model: &ModelSection) -> Result<AdapterSet, TrainError> {
    let dir = adapters_dir(Path::new(&model.init_adapter));
    let set =
        AdapterSet::load_peft(&dir, policy.config(), policy.device()).map_err(|e| TrainError::Config(format!("model.init_adapter {}: {e}", dir.display())))?;
    let dual = set.forget.is_some();
    if dual != model.dual_lora {
        return Err(TrainError::Config(format!(
            "model.init_adapter {}: {} adapter, but model.dual_lora = {}",
            dir.display(),
            if dual { "a dual (retain + forget)" } else { "a single" },
            model.dual_lora
        )));
    }
    Ok(set)
}
