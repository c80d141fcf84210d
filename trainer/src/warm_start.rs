//! The adapters a run starts from: fresh ones (`Policy::init_adapters`) or a saved adapter
//! (`model.init_adapter`, e.g. what `agentrt sft` wrote), shared by `agentrt train` and `agentrt sft`.

use crate::error::TrainError;
use crate::model_section::ModelSection;
use agentrt_environments::EnvSection;
use agentrt_policy::{AdapterSet, LoraConfig, Policy};
use std::path::Path;

pub use agentrt_policy::adapter_io::adapters_dir;

/// Resolves `model.init_adapter = "shipped"` ([`agentrt_environments::SHIPPED`]): the adapter this
/// project ships for `model.name` in the played environment, or, where none is shipped, fresh adapters
/// (an empty `init_adapter`), which the log says.
pub fn resolve_shipped(model: &mut ModelSection, env: &EnvSection) {
    if model.init_adapter != agentrt_environments::SHIPPED {
        return;
    }
    match agentrt_environments::shipped_adapter(&env.name, &model.name) {
        Some(dir) => model.init_adapter = dir.display().to_string(),
        None => {
            tracing::info!(
                "model.init_adapter = \"shipped\": no adapter is shipped for {} in the {} environment, so the run starts from fresh adapters",
                model.name,
                env.name
            );
            model.init_adapter.clear();
        }
    }
}

/// How `model.init_adapter` was trained to play (its `agent.json`), as a config layer: the base model,
/// the wiki's system prompt and demonstration, and the episode's turns, reply length, observation size and
/// sandbox bounds. Sampling (temperature, top-p, top-k) is left out: it is the training's choice, not the
/// adapter's. `None` without an initial adapter or without an `agent.json` (a PEFT folder from elsewhere).
pub fn played_as_trained(model: &ModelSection) -> Result<Option<toml::Table>, TrainError> {
    if model.init_adapter.is_empty() {
        return Ok(None);
    }
    let dir = checked_adapter_dir(Path::new(&model.init_adapter), "model.init_adapter")?;
    let Some(agent) = agentrt_environments::AgentSettings::read(&dir)? else { return Ok(None) };
    let mut rollout = toml::Table::try_from(&agent.spec).map_err(|e| TrainError::Config(format!("{}: agent.json: {e}", dir.display())))?;
    for sampling in ["temperature", "temperature_after_tool", "top_p", "top_k"] {
        rollout.remove(sampling);
    }
    let wiki = toml::Table::try_from(agentrt_environments::WikiSection {
        system_prompt: agent.system_prompt,
        demonstration: agent.demonstration,
        ..Default::default()
    })
    .map_err(|e| TrainError::Config(format!("{}: agent.json: {e}", dir.display())))?;
    let prompt: toml::Table = wiki.into_iter().filter(|(k, _)| k == "system_prompt" || k == "demonstration").collect();
    let mut layer = toml::Table::new();
    layer.insert("model".into(), toml::Value::Table([("name".to_string(), toml::Value::String(agent.model))].into_iter().collect()));
    layer.insert("rollout".into(), toml::Value::Table(rollout));
    layer.insert("env".into(), toml::Value::Table([("wiki".to_string(), toml::Value::Table(prompt))].into_iter().collect()));
    Ok(Some(layer))
}

/// `dir` as an adapter folder (a checkpoint, a PEFT folder, a shipped adapter), or an error that says
/// what to give instead when it is a run directory (`runs/NAME`: its checkpoints are the adapters) or
/// does not exist; `what` names the flag or key in the error.
pub fn checked_adapter_dir(dir: &Path, what: &str) -> Result<std::path::PathBuf, TrainError> {
    let found = agentrt_assets::data_file(dir, what).map_err(|e| TrainError::Config(format!("{what} {}: {e}", dir.display())))?;
    if !found.exists() {
        return Err(TrainError::Config(format!("{what} {}: no such folder", dir.display())));
    }
    let is_run = found.join(crate::run_dir::CONFIG).is_file() && !found.join("adapters").exists() && !found.join("adapter_config.json").exists();
    if is_run {
        let newest = crate::run_dir::RunDir { path: found.clone() }.checkpoints()?.pop();
        let hint = match newest {
            Some((_, c)) => format!("give one of its checkpoints, e.g. the newest: {}", c.display()),
            None => "it has no checkpoint yet (one is written every run.save_steps steps)".into(),
        };
        return Err(TrainError::Config(format!("{what} {}: a run directory, not an adapter: {hint}", dir.display())));
    }
    Ok(found)
}

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
    let dir = adapters_dir(&checked_adapter_dir(Path::new(&model.init_adapter), "model.init_adapter")?);
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
