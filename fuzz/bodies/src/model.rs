//! The model and adapter readers: a GGUF file (`--model FILE.gguf`, and the default models, which are
//! downloaded), a Hugging Face safetensors directory (`--model DIR`), and a PEFT LoRA adapter directory
//! (`--adapter`, `--init-adapter`, `/v1/load_lora_adapter`). Model and adapter files come from the internet.

use crate::{parts, violated, write};
use agentrt_policy::adapter_io::adapters_dir;
use agentrt_policy::model::ModelConfig;
use agentrt_policy::{AdapterSet, Arch, Device, Message, ModelSource, Policy};
use std::path::Path;
use std::sync::OnceLock;

/// The model the safetensors and adapter seeds are shaped for: a Llama of one layer, 8 wide, whose
/// vocabulary is bytes plus the tiny models' three special tokens (`agentrt_policy::tiny`).
pub fn micro_config() -> ModelConfig {
    ModelConfig {
        hidden_size: 8,
        intermediate_size: 16,
        num_layers: 1,
        num_heads: 2,
        num_kv_heads: 1,
        head_dim: 4,
        max_position_embeddings: 64,
        ..agentrt_policy::tiny::tiny_config(Arch::Llama)
    }
}

/// A loaded model must be usable: a short prompt renders and a forward pass over it ends, with log-probs
/// or an error, never a panic. A refusal has a message.
fn check_load(loaded: agentrt_policy::Result<Policy>, data: &[u8]) {
    match loaded {
        Ok(policy) => {
            crate::note(|| format!("loaded: {:?}", policy.config()));
            let Ok(prompt) = policy.chat_prompt(&[Message::new("user", "hi")]) else { return };
            let prompt: Vec<u32> = prompt.into_iter().take(8).collect();
            if prompt.is_empty() {
                return;
            }
            let _ = policy.token_logprobs(&[prompt], &[false]);
        }
        Err(e) => {
            crate::note(|| format!("refused: {e}"));
            if e.to_string().trim().is_empty() {
                violated("a refusal without a message", data);
            }
        }
    }
}

/// The bytes as a `.gguf` file, loaded as `agentrt` loads a model for training (`Policy::load`: header,
/// metadata, config, tokenizer, chat template, every tensor kept as blocks and dequantised).
pub fn gguf(data: &[u8]) {
    let path = crate::scratch("model.gguf");
    write(&path, data);
    check_load(Policy::load(&ModelSource::Path(path), &Device::Cpu), data);
}

/// The tokenizer of the safetensors target's model directory (bytes and three specials), written once.
fn tokenizer_json() -> &'static [u8] {
    static TOKENIZER: OnceLock<Vec<u8>> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let out = agentrt_policy::tiny::tiny_model_dir(dir.path()).expect("the tiny model exports");
        std::fs::read(out.join("tokenizer.json")).expect("the tiny model's tokenizer.json")
    })
}

/// The input's parts as a Hugging Face model directory: `config.json`, `tokenizer_config.json` (its chat
/// template), then each part a `model-0000N.safetensors`; `tokenizer.json` is the tiny models' (the
/// `tokenizers` crate's reader is not ours). Loaded with `Policy::load`.
pub fn safetensors_model(data: &[u8]) {
    let dir = crate::scratch("model");
    let p = parts(data);
    write(&dir.join("config.json"), p[0]);
    write(&dir.join("tokenizer.json"), tokenizer_json());
    if let Some(tc) = p.get(1) {
        write(&dir.join("tokenizer_config.json"), tc);
    }
    for (i, weights) in p.iter().skip(2).enumerate() {
        write(&dir.join(format!("model-{:05}.safetensors", i + 1)), weights);
    }
    check_load(Policy::load(&ModelSource::Path(dir), &Device::Cpu), data);
}

/// The input's parts as a PEFT adapter directory, read by `AdapterSet::load_peft` for [`micro_config`]'s
/// model: two parts are `adapter_config.json` and `adapter_model.safetensors`; four or more, a dual
/// adapter's `retain/` and `forget/` (two each) and `agentrt_adapters.json`. An adapter read has a rank of
/// at least 1, finite scales, and a pair of factors of the model's shapes for each layer and target.
pub fn adapter(data: &[u8]) {
    let dir = crate::scratch("adapter");
    let p = parts(data);
    let put = |sub: &str, config: &[u8], weights: Option<&&[u8]>| {
        let at = if sub.is_empty() { dir.clone() } else { dir.join(sub) };
        write(&at.join("adapter_config.json"), config);
        if let Some(w) = weights {
            write(&at.join("adapter_model.safetensors"), w);
        }
    };
    if p.len() >= 4 {
        put("retain", p[0], p.get(1));
        put("forget", p[2], p.get(3));
        if let Some(meta) = p.get(4) {
            write(&dir.join("agentrt_adapters.json"), meta);
        }
    } else {
        put("", p[0], p.get(1));
    }
    check_adapter(&dir, data);
}

fn check_adapter(dir: &Path, data: &[u8]) {
    let model = micro_config();
    match AdapterSet::load_peft(&adapters_dir(dir), &model, &Device::Cpu) {
        Ok(set) => {
            crate::note(|| format!("adapter read: {:?}", set.config));
            let c = &set.config;
            if c.rank == 0 || !c.alpha.is_finite() || !set.scales.0.is_finite() || !set.scales.1.is_finite() {
                violated(&format!("an adapter read with rank {}, alpha {}, scales {:?}", c.rank, c.alpha, set.scales), data);
            }
            for adapter in std::iter::once(&set.retain).chain(set.forget.as_ref()) {
                let targets: std::collections::BTreeSet<_> = c.targets.iter().collect();
                if adapter.pairs.len() != model.num_layers * targets.len() {
                    violated(&format!("an adapter read with {} pairs for {} layers and {:?}", adapter.pairs.len(), model.num_layers, c.targets), data);
                }
                for (&(_, t), pair) in &adapter.pairs {
                    let (i, o) = t.dims(&model);
                    if pair.a.as_tensor().dims() != [c.rank, i] || pair.b.as_tensor().dims() != [o, c.rank] {
                        violated(&format!("an adapter read with factors of the wrong shape at {t:?}"), data);
                    }
                }
            }
        }
        Err(e) => {
            crate::note(|| format!("adapter refused: {e}"));
            if e.to_string().trim().is_empty() {
                violated("a refusal without a message", data);
            }
        }
    }
}
