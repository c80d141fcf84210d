//! Writes the fuzz targets' seeds (`fuzz/seeds/<target>/`) from real inputs, small enough for libFuzzer:
//! request bodies as clients send them, replies the models wrote (bench/), the shipped configs, GGUF files
//! with the default model's real metadata (its vocabulary and merges cut down) over a one-layer model of
//! each block format, safetensors model and adapter directories as this project writes them (and the
//! shipped adapter's `adapter_config.json`), and the example plug-in components. Run once, by hand:
//!
//! ```sh
//! cargo test -p agentrt-fuzz-bodies --test seeds -- --ignored
//! ```
//!
//! It needs the default model in the asset cache (`agentrt` fetches it on first use) and the guest
//! components the runtime's build makes.

// A seed that cannot be written is a failure to report, which a panic is.
#![allow(clippy::unwrap_used)]

use agentrt_fuzz_bodies::join_parts;
use agentrt_fuzz_bodies::model::micro_config;
use agentrt_policy::model::ModelConfig;
use agentrt_policy::{AdapterSet, Arch, Device, LoraConfig, ModelWeights, Target, Tensor};
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::DType;
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn put(target: &str, name: &str, bytes: &[u8]) {
    let dir = repo().join("fuzz/seeds").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn serve_request() {
    let bodies = [
        json!({"model": "smollm2-135m", "messages": [{"role": "user", "content": "What is the capital of France?"}]}),
        json!({"model": "smollm2-135m", "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}],
               "temperature": 0.7, "top_p": 0.9, "top_k": 40, "max_tokens": 64, "n": 2, "seed": 42, "stop": ["\n\n", "</answer>"]}),
        json!({"model": "wiki-read", "messages": [{"role": "user", "content": [{"type": "text", "text": "Search for "}, {"type": "text", "text": "Denver"}]}],
               "stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 0, "return_tokens_as_token_ids": true}),
        json!({"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null}, {"role": "tool", "content": "[]"}],
               "max_completion_tokens": 5, "stop": "###", "include_stop_str_in_output": true, "response_format": {"type": "text"}, "logit_bias": {}, "tools": [], "user": "u1"}),
        json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}),
        json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3, "n": 17, "top_p": 0}),
        json!({"lora_name": "step-40", "lora_path": "runs/x/checkpoint-40", "load_inplace": true}),
        json!({"lora_name": "step-40"}),
    ];
    for (i, b) in bodies.iter().enumerate() {
        put("serve_request", &format!("body-{i}.json"), serde_json::to_string(b).unwrap().as_bytes());
    }
    put("serve_request", "not-json.txt", b"model=smollm2&messages=hi");
}

fn model_reply() {
    let mut n = 0;
    let mut take = |file: &str, every: usize, count: usize| {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        for line in text.lines().step_by(every).take(count) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            put("model_reply", &format!("reply-{n}.txt"), v["reply"].as_str().unwrap().as_bytes());
            n += 1;
        }
    };
    take("bench/humaneval/qwen2.5-coder-0.5b/samples.jsonl", 97, 12);
    take("bench/learning/extraction/smollm2-replies.jsonl", 37, 6);
    take("bench/learning/extraction/qwen-replies.jsonl", 37, 6);
    for (i, r) in [
        "<tool>search_pages(\"Denver Broncos\")</tool>",
        "Let me look.\n```python\nhits = search_pages(\"Super Bowl 50\", k=3)\nfor h in hits:\n    print(h)\n```",
        "```json\n{}\n```\n```py\nprint(read_section(\"a:b\"))\n```\n<answer>Denver</answer>",
        "<answer> Santa Clara </answer> <tool>read_section(\"x:y\")</tool>",
        "so the answer is <answer>1966",
    ]
    .iter()
    .enumerate()
    {
        put("model_reply", &format!("form-{i}.txt"), r.as_bytes());
    }
}

fn train_config() {
    let default = std::fs::read(repo().join("trainer/default.toml")).unwrap();
    put("train_config", "default.toml", &default);
    put("train_config", "sft.toml", &std::fs::read(repo().join("trainer/sft.toml")).unwrap());
    put("train_config", "partial.toml", b"[algorithm]\nlr = 1e-5\nadvantage = \"rloo\"\n\n[rollout]\ngroup_size = 8\n");
    put("train_config", "typo.toml", b"[algorithm]\nlearning_rate = 1e-5\n[rolout]\ngroup_size = 8\n");
    put("train_config", "wrong-type.toml", b"[run]\nmax_steps = \"ten\"\n");
    put("train_config", "top-level.toml", b"lr = 1\n[sft]\nepochs = 0\n");
}

/// GGUF's names of the HF tensors (llama.cpp's converter).
fn gguf_name(hf: &str) -> String {
    let map = [("model.embed_tokens.weight", "token_embd.weight"), ("model.norm.weight", "output_norm.weight"), ("lm_head.weight", "output.weight")];
    if let Some((_, g)) = map.iter().find(|(h, _)| *h == hf) {
        return g.to_string();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap();
    let (i, rest) = rest.split_once('.').unwrap();
    let parts = [
        ("input_layernorm.weight", "attn_norm.weight"),
        ("post_attention_layernorm.weight", "ffn_norm.weight"),
        ("self_attn.q_proj.weight", "attn_q.weight"),
        ("self_attn.k_proj.weight", "attn_k.weight"),
        ("self_attn.v_proj.weight", "attn_v.weight"),
        ("self_attn.o_proj.weight", "attn_output.weight"),
        ("self_attn.q_proj.bias", "attn_q.bias"),
        ("self_attn.k_proj.bias", "attn_k.bias"),
        ("self_attn.v_proj.bias", "attn_v.bias"),
        ("self_attn.q_norm.weight", "attn_q_norm.weight"),
        ("self_attn.k_norm.weight", "attn_k_norm.weight"),
        ("mlp.gate_proj.weight", "ffn_gate.weight"),
        ("mlp.up_proj.weight", "ffn_up.weight"),
        ("mlp.down_proj.weight", "ffn_down.weight"),
    ];
    let (_, g) = parts.iter().find(|(h, _)| *h == rest).unwrap_or_else(|| panic!("no GGUF name for {hf}"));
    format!("blk.{i}.{g}")
}

/// A one-layer model 32 wide (one block of every format per row) under the real default model's
/// metadata, its numbers replaced and its vocabulary and merges cut to the model's 259 tokens.
fn gguf() {
    let assets = dirs_cache().join("assets/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut file = std::fs::File::open(&assets).expect("the default model in the asset cache");
    let real = gguf_file::Content::read(&mut file).unwrap();
    // The real header, cut inside the vocabulary: a truncated download.
    let mut head = vec![0u8; 24 << 10];
    std::io::Read::read_exact(&mut std::fs::File::open(&assets).unwrap(), &mut head).unwrap();
    put("gguf", "smollm2-truncated.gguf", &head);

    let vocab = 259;
    let tokens: Vec<String> = real.metadata["tokenizer.ggml.tokens"].to_vec().unwrap()[..vocab].iter().map(|t| t.to_string().unwrap().clone()).collect();
    let known: std::collections::HashSet<&str> = tokens.iter().map(String::as_str).collect();
    let merges: Vec<Value> = real.metadata["tokenizer.ggml.merges"]
        .to_vec()
        .unwrap()
        .iter()
        .map(|m| m.to_string().unwrap().clone())
        .filter(|m| m.split_once(' ').is_some_and(|(a, b)| known.contains(a) && known.contains(b) && known.contains(format!("{a}{b}").as_str())))
        .take(64)
        .map(Value::String)
        .collect();
    for (arch, dtype, name) in [
        (Arch::Llama, GgmlDType::Q8_0, "llama-q8_0.gguf"),
        (Arch::Llama, GgmlDType::Q4_1, "llama-q4_1.gguf"),
        (Arch::Llama, GgmlDType::F32, "llama-f32.gguf"),
        (Arch::Qwen2, GgmlDType::Q4_0, "qwen2-q4_0.gguf"),
        (Arch::Qwen3, GgmlDType::F16, "qwen3-f16.gguf"),
    ] {
        let cfg = ModelConfig {
            vocab_size: vocab,
            hidden_size: 32,
            intermediate_size: 32,
            num_layers: 1,
            num_heads: 2,
            num_kv_heads: 1,
            head_dim: 16,
            max_position_embeddings: 128,
            tie_word_embeddings: arch != Arch::Qwen2,
            ..ModelConfig::tiny(arch)
        };
        let a = match arch {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        };
        let mut meta: Vec<(String, Value)> = Vec::new();
        for (k, v) in &real.metadata {
            if k.starts_with("tokenizer.ggml.tokens") || k.starts_with("tokenizer.ggml.merges") || k.starts_with("tokenizer.ggml.token_type") {
                continue;
            }
            let k = k.replacen("llama.", &format!("{a}."), 1);
            let v = match v {
                Value::String(s) if k == "general.architecture" => Value::String(a.into()),
                other => clone_value(other),
            };
            meta.push((k, v));
        }
        let numbers = [
            ("embedding_length", cfg.hidden_size),
            ("feed_forward_length", cfg.intermediate_size),
            ("block_count", cfg.num_layers),
            ("attention.head_count", cfg.num_heads),
            ("attention.head_count_kv", cfg.num_kv_heads),
            ("context_length", cfg.max_position_embeddings),
        ];
        meta.retain(|(k, _)| !numbers.iter().any(|(n, _)| *k == format!("{a}.{n}")));
        for (n, v) in numbers {
            meta.push((format!("{a}.{n}"), Value::U32(v as u32)));
        }
        meta.push(("tokenizer.ggml.tokens".into(), Value::Array(tokens.iter().cloned().map(Value::String).collect())));
        meta.push(("tokenizer.ggml.merges".into(), Value::Array(merges.clone())));
        let types: Vec<Value> = (0..vocab).map(|i| Value::I32(if i < 3 { 3 } else { 1 })).collect();
        meta.push(("tokenizer.ggml.token_type".into(), Value::Array(types)));
        meta.sort_by(|x, y| x.0.cmp(&y.0));

        let weights = ModelWeights::random(&cfg, 7, &Device::Cpu).unwrap();
        let mut tensors: Vec<(String, QTensor)> = weights
            .to_hf_tensors()
            .into_iter()
            .map(|(k, t)| {
                let t = t.contiguous().unwrap();
                let q = if t.rank() == 2 { QTensor::quantize(&t, dtype).unwrap() } else { QTensor::quantize(&t, GgmlDType::F32).unwrap() };
                (gguf_name(&k), q)
            })
            .collect();
        tensors.sort_by(|x, y| x.0.cmp(&y.0));
        let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
        let mut out = std::io::Cursor::new(Vec::new());
        gguf_file::write(&mut out, &meta_refs, &tensor_refs).unwrap();
        put("gguf", name, out.get_ref());
    }
}

fn clone_value(v: &Value) -> Value {
    match v {
        Value::U8(x) => Value::U8(*x),
        Value::I8(x) => Value::I8(*x),
        Value::U16(x) => Value::U16(*x),
        Value::I16(x) => Value::I16(*x),
        Value::U32(x) => Value::U32(*x),
        Value::I32(x) => Value::I32(*x),
        Value::U64(x) => Value::U64(*x),
        Value::I64(x) => Value::I64(*x),
        Value::F32(x) => Value::F32(*x),
        Value::F64(x) => Value::F64(*x),
        Value::Bool(x) => Value::Bool(*x),
        Value::String(x) => Value::String(x.clone()),
        Value::Array(x) => Value::Array(x.iter().map(clone_value).collect()),
    }
}

fn dirs_cache() -> PathBuf {
    std::env::var_os("AGENTRT_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/agentrt"))
}

fn safetensors_bytes(tensors: &HashMap<String, Tensor>) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.safetensors");
    candle_core::safetensors::save(tensors, &p).unwrap();
    std::fs::read(p).unwrap()
}

/// A model directory of [`micro_config`]'s shape (and its Qwen2 and Qwen3 forms), as `merge_and_export`
/// writes one, in f32, bf16 and f16; the template of `tokenizer_config.json` is the default model's.
fn safetensors_model() {
    let assets = dirs_cache().join("assets/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf");
    let real = gguf_file::Content::read(&mut std::fs::File::open(&assets).unwrap()).unwrap();
    let template = real.metadata["tokenizer.chat_template"].to_string().unwrap().clone();
    for (arch, dtype, name) in [(Arch::Llama, DType::F32, "llama-f32"), (Arch::Qwen2, DType::BF16, "qwen2-bf16"), (Arch::Qwen3, DType::F16, "qwen3-f16")] {
        let cfg = ModelConfig { arch, tie_word_embeddings: arch != Arch::Qwen2, ..micro_config() };
        let weights = ModelWeights::random(&cfg, 3, &Device::Cpu).unwrap();
        let tensors: HashMap<String, Tensor> =
            weights.to_hf_tensors().into_iter().map(|(k, t)| (k, t.to_dtype(dtype).unwrap().contiguous().unwrap())).collect();
        let config = serde_json::to_vec_pretty(&cfg.to_hf_json()).unwrap();
        let tc = serde_json::to_vec(&json!({"chat_template": template, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"})).unwrap();
        put("safetensors_model", &format!("{name}.dir"), &join_parts(&[&config, &tc, &safetensors_bytes(&tensors)]));
    }
}

/// Adapters of [`micro_config`]'s model as `save_peft` writes them (one, and a dual pair), and one under the
/// shipped adapter's own `adapter_config.json` (rank 16, every target).
fn adapter() {
    let model = micro_config();
    let all = vec![Target::Q, Target::K, Target::V, Target::O, Target::Gate, Target::Up, Target::Down];
    let dir = tempfile::tempdir().unwrap();
    let read = |p: &Path| std::fs::read(p).unwrap();
    for (name, rank, targets, dual) in
        [("rank2-qv", 2, vec![Target::Q, Target::V], false), ("rank16-all", 16, all.clone(), false), ("dual-rank4", 4, all, true)]
    {
        let config = LoraConfig { rank, alpha: 2.0 * rank as f64, targets, dual };
        let set = AdapterSet::new(config, &model, &Device::Cpu, 5).unwrap();
        set.randomize_b(0.02, 6).unwrap();
        let out = dir.path().join(name);
        set.save_peft(&out, "HuggingFaceTB/SmolLM2-135M-Instruct").unwrap();
        let bytes = if dual {
            join_parts(&[
                &read(&out.join("retain/adapter_config.json")),
                &read(&out.join("retain/adapter_model.safetensors")),
                &read(&out.join("forget/adapter_config.json")),
                &read(&out.join("forget/adapter_model.safetensors")),
                &read(&out.join("agentrt_adapters.json")),
            ])
        } else if rank == 16 {
            let shipped = read(&repo().join("models/smollm2-135m-wiki-read/adapters/adapter_config.json"));
            join_parts(&[&shipped, &read(&out.join("adapter_model.safetensors"))])
        } else {
            join_parts(&[&read(&out.join("adapter_config.json")), &read(&out.join("adapter_model.safetensors"))])
        };
        put("adapter", &format!("{name}.dir"), &bytes);
    }
}

fn components() {
    for (name, path) in [("word-stats.wasm", agentrt_runtime::EXAMPLE_PLUGIN_WASM), ("flaky.wasm", agentrt_runtime::FLAKY_PLUGIN_WASM)] {
        let bytes = std::fs::read(path).unwrap();
        put("component_decode", name, &bytes);
        put("component_load", name, &bytes);
    }
    // The smallest component and module, and a component that is a bare header.
    for (name, bytes) in [("empty-component.wasm", &b"\0asm\x0d\0\x01\0"[..]), ("empty-module.wasm", &b"\0asm\x01\0\0\0"[..])] {
        put("component_decode", name, bytes);
        put("component_load", name, bytes);
    }
}

#[test]
#[ignore = "writes fuzz/seeds/ (run by hand)"]
fn write_seeds() {
    serve_request();
    model_reply();
    train_config();
    gguf();
    safetensors_model();
    adapter();
    components();
}
