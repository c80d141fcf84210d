//! Loading a Hugging Face model directory: `config.json`, `*.safetensors`.

use super::config::ModelConfig;
use super::weights::ModelWeights;
use crate::error::{io_err, PolicyError, Result};
use candle_core::Device;
use std::collections::HashMap;
use std::path::Path;

/// Reads `config.json` of a model directory.
pub fn read_config(dir: &Path) -> Result<ModelConfig> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| PolicyError::BadModel { path: path.clone(), what: e.to_string() })?;
    let cfg = ModelConfig::from_hf_json(&v).map_err(|found| PolicyError::UnsupportedArchitecture { path: path.clone(), found })?;
    cfg.check().map_err(|what| PolicyError::BadModel { path, what })?;
    Ok(cfg)
}

/// Loads every `*.safetensors` file in `dir` as f32 weights.
pub fn read_weights(dir: &Path, cfg: &ModelConfig, device: &Device) -> Result<ModelWeights> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(PolicyError::Missing { path: dir.to_path_buf(), what: "*.safetensors weights".into() });
    }
    let mut all = HashMap::new();
    for f in &files {
        let t = candle_core::safetensors::load(f, device)
            .map_err(|e| PolicyError::Truncated { path: f.clone(), what: format!("cannot read safetensors ({e})") })?;
        all.extend(t);
    }
    ModelWeights::from_hf_tensors(cfg, all, dir)
}
