//! Adapters on disk in PEFT's format, so they open in PEFT and vLLM, and merge-and-export to a full model.
//!
//! One adapter is a directory with `adapter_config.json` and `adapter_model.safetensors`, tensors named
//! `base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight` (`(r, in)`) and `...lora_B.weight`
//! (`(out, r)`). Dual adapters are two such directories, `retain/` and `forget/`, as PEFT lays out extra
//! named adapters; `agentrt_adapters.json` beside them keeps the inference scales.

use crate::error::{io_err, PolicyError, Result};
use crate::lora::{Adapter, AdapterSet, LoraConfig, LoraPair, Target};
use crate::model::{ModelConfig, ModelWeights};
use candle_core::{Device, Tensor, Var};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

const CONFIG: &str = "adapter_config.json";
const WEIGHTS: &str = "adapter_model.safetensors";
const DUAL: &str = "agentrt_adapters.json";

fn bad(path: &Path, what: impl Into<String>) -> PolicyError {
    PolicyError::Adapter { path: path.to_path_buf(), what: what.into() }
}

fn peft_key(layer: usize, t: Target, ab: &str) -> String {
    format!("base_model.model.model.layers.{layer}.{}.lora_{ab}.weight", t.hf_path())
}

/// Writes one adapter in PEFT's layout.
pub fn save_adapter(dir: &Path, adapter: &Adapter, config: &LoraConfig, base_model: &str) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let targets: Vec<&str> = config.targets.iter().map(|t| t.peft_name()).collect();
    let cfg = serde_json::json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": config.rank,
        "lora_alpha": config.alpha,
        "target_modules": targets,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "use_rslora": false,
        "use_dora": false,
        "modules_to_save": null,
        "layers_to_transform": null,
        "base_model_name_or_path": base_model,
    });
    let p = dir.join(CONFIG);
    // A JSON value always serialises; an atomic write leaves the old file or the whole new one.
    agentrt_assets::write_atomic(&p, serde_json::to_string_pretty(&cfg).expect("a JSON value serialises").as_bytes()).map_err(io_err(&p))?;
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for (&(layer, t), pair) in &adapter.pairs {
        tensors.insert(peft_key(layer, t, "A"), pair.a.as_tensor().clone());
        tensors.insert(peft_key(layer, t, "B"), pair.b.as_tensor().clone());
    }
    let p = dir.join(WEIGHTS);
    candle_core::safetensors::save(&tensors, &p).map_err(|e| bad(&p, e.to_string()))?;
    Ok(())
}

/// Reads one PEFT LoRA adapter, checking its shapes against `model`.
pub fn load_adapter(dir: &Path, model: &ModelConfig, device: &Device) -> Result<(Adapter, LoraConfig)> {
    let p = dir.join(CONFIG);
    let text = std::fs::read_to_string(&p).map_err(io_err(&p))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(&p, e.to_string()))?;
    if v["peft_type"].as_str() != Some("LORA") {
        return Err(bad(&p, format!("peft_type is {}, expected \"LORA\"", v["peft_type"])));
    }
    let rank = v["r"].as_u64().ok_or_else(|| bad(&p, "missing `r`"))? as usize;
    let alpha = v["lora_alpha"].as_f64().ok_or_else(|| bad(&p, "missing `lora_alpha`"))?;
    let targets: Vec<Target> = match &v["target_modules"] {
        serde_json::Value::Array(a) => a
            .iter()
            .map(|x| {
                let s = x.as_str().unwrap_or_default();
                Target::from_peft(s).ok_or_else(|| bad(&p, format!("unsupported target module `{s}`")))
            })
            .collect::<Result<_>>()?,
        other => return Err(bad(&p, format!("target_modules must be a list, found {other}"))),
    };
    let wp = dir.join(WEIGHTS);
    let tensors = candle_core::safetensors::load(&wp, device).map_err(|e| bad(&wp, e.to_string()))?;
    let mut pairs = BTreeMap::new();
    for layer in 0..model.num_layers {
        for &t in &targets {
            let (i, o) = t.dims(model);
            let get = |ab: &str, shape: (usize, usize)| -> Result<Var> {
                let k = peft_key(layer, t, ab);
                let x = tensors.get(&k).ok_or_else(|| bad(&wp, format!("missing tensor `{k}`")))?;
                if x.dims() != [shape.0, shape.1] {
                    return Err(bad(&wp, format!("`{k}` has shape {:?}, the model needs {:?}", x.dims(), [shape.0, shape.1])));
                }
                Ok(Var::from_tensor(&x.to_dtype(candle_core::DType::F32)?)?)
            };
            pairs.insert((layer, t), LoraPair { a: get("A", (rank, i))?, b: get("B", (o, rank))? });
        }
    }
    Ok((Adapter { pairs }, LoraConfig { rank, alpha, targets, dual: false }))
}

/// The adapters directory of `dir`: a run's `checkpoint-N` (its `adapters/`) or a PEFT adapter directory
/// (one adapter, or a dual `retain/` + `forget/` pair).
pub fn adapters_dir(dir: &Path) -> std::path::PathBuf {
    if dir.join("adapters").is_dir() {
        dir.join("adapters")
    } else {
        dir.to_path_buf()
    }
}

impl AdapterSet {
    /// Saves in PEFT's format: one adapter at `dir`, or `dir/retain` and `dir/forget` when dual.
    pub fn save_peft(&self, dir: &Path, base_model: &str) -> Result<()> {
        match &self.forget {
            None => save_adapter(dir, &self.retain, &self.config, base_model),
            Some(f) => {
                save_adapter(&dir.join("retain"), &self.retain, &self.config, base_model)?;
                save_adapter(&dir.join("forget"), f, &self.config, base_model)?;
                let p = dir.join(DUAL);
                let meta = serde_json::json!({"adapters": ["retain", "forget"], "scales": [self.scales.0, self.scales.1]});
                agentrt_assets::write_atomic(&p, meta.to_string().as_bytes()).map_err(io_err(&p))
            }
        }
    }

    /// Loads what [`AdapterSet::save_peft`] wrote (or any single PEFT LoRA adapter directory).
    pub fn load_peft(dir: &Path, model: &ModelConfig, device: &Device) -> Result<AdapterSet> {
        if !dir.exists() {
            return Err(PolicyError::AdapterMissing { path: dir.to_path_buf() });
        }
        if dir.join(CONFIG).is_file() {
            let (retain, config) = load_adapter(dir, model, device)?;
            return Ok(AdapterSet { config, retain, forget: None, scales: (1.0, 1.0), routing: Default::default() });
        }
        if !dir.join("retain").join(CONFIG).is_file() {
            return Err(bad(dir, format!("neither {CONFIG} nor retain/{CONFIG} found")));
        }
        let (retain, config) = load_adapter(&dir.join("retain"), model, device)?;
        let (forget, fcfg) = load_adapter(&dir.join("forget"), model, device)?;
        if fcfg.rank != config.rank || fcfg.alpha != config.alpha || fcfg.targets != config.targets {
            return Err(bad(dir, "retain and forget adapters differ in rank, alpha or targets"));
        }
        let mut scales = (1.0, 1.0);
        if let Ok(text) = std::fs::read_to_string(dir.join(DUAL)) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                scales = (v["scales"][0].as_f64().unwrap_or(1.0), v["scales"][1].as_f64().unwrap_or(1.0));
            }
        }
        Ok(AdapterSet { config: LoraConfig { dual: true, ..config }, retain, forget: Some(forget), scales, routing: Default::default() })
    }

    /// The base weights with the adapters folded in at their current scales (`W + s·(alpha/r)·B·A`).
    pub fn merge_into(&self, weights: &ModelWeights) -> Result<ModelWeights> {
        let mut w = weights.clone();
        // The block-format copies hold the unmerged weights.
        w.packed = None;
        let c = self.base_scale();
        let adapters = std::iter::once((&self.retain, self.scales.0 * c)).chain(self.forget.iter().map(|f| (f, self.scales.1 * c)));
        for (ad, s) in adapters {
            if s == 0.0 {
                continue;
            }
            for (&(layer, t), p) in &ad.pairs {
                let l = &mut w.layers[layer];
                let slot = match t {
                    Target::Q => &mut l.q,
                    Target::K => &mut l.k,
                    Target::V => &mut l.v,
                    Target::O => &mut l.o,
                    Target::Gate => &mut l.gate,
                    Target::Up => &mut l.up,
                    Target::Down => &mut l.down,
                };
                *slot = (&*slot + (p.b.as_tensor().matmul(p.a.as_tensor())? * s)?)?;
            }
        }
        Ok(w)
    }
}

/// Writes a full Hugging Face model directory (`config.json`, `model.safetensors`).
pub fn export_model(dir: &Path, cfg: &ModelConfig, weights: &ModelWeights) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let p = dir.join("config.json");
    agentrt_assets::write_atomic(&p, serde_json::to_string_pretty(&cfg.to_hf_json()).expect("a JSON value serialises").as_bytes()).map_err(io_err(&p))?;
    let p = dir.join("model.safetensors");
    let tensors: HashMap<String, Tensor> =
        weights.to_hf_tensors().into_iter().map(|(k, v)| v.contiguous().map(|v| (k, v))).collect::<candle_core::Result<_>>()?;
    candle_core::safetensors::save(&tensors, &p).map_err(|e| bad(&p, e.to_string()))?;
    Ok(())
}
