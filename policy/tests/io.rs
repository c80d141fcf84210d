//! Loading (GGUF, safetensors), adapters in PEFT's format, merge-and-export, and clear errors on bad input.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_policy::model::weights::ModelWeights;
use agentrt_policy::tiny::{tiny_config, tiny_policy, SPECIALS};
use agentrt_policy::{Arch, LoraConfig, ModelSource, Policy, PolicyError, PolicyTokenizer, Target, Tensor};
use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use std::path::Path;

fn max_abs(a: &Tensor, b: &Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

/// llama.cpp's HF -> GGUF permutation of q/k rows.
fn permute(w: &Tensor, n_head: usize) -> Tensor {
    let (out, inp) = w.dims2().unwrap();
    w.reshape((n_head, 2, out / n_head / 2, inp)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap().reshape((out, inp)).unwrap()
}

/// Writes a tiny GGUF the way llama.cpp's converter would, tokenizer metadata included.
fn write_gguf(path: &Path, arch_name: &str, arch: Arch, w: &ModelWeights) {
    let cfg = tiny_config(arch);
    let tok = PolicyTokenizer::bytes_only(SPECIALS).unwrap();
    let mut tokens: Vec<(u32, String)> = tok.inner.get_vocab(true).into_iter().map(|(k, v)| (v, k)).collect();
    tokens.sort();
    let types: Vec<Value> = tokens.iter().map(|(i, _)| Value::I32(if *i >= 256 { 3 } else { 1 })).collect();
    let s = |x: &str| Value::String(x.to_string());
    let u = |x: usize| Value::U32(x as u32);
    let k = |x: &str| format!("{arch_name}.{x}");
    let meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), s(arch_name)),
        (k("embedding_length"), u(cfg.hidden_size)),
        (k("feed_forward_length"), u(cfg.intermediate_size)),
        (k("block_count"), u(cfg.num_layers)),
        (k("attention.head_count"), u(cfg.num_heads)),
        (k("attention.head_count_kv"), u(cfg.num_kv_heads)),
        (k("attention.key_length"), u(cfg.head_dim)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(cfg.rms_norm_eps as f32)),
        (k("rope.freq_base"), Value::F32(cfg.rope_theta as f32)),
        (k("context_length"), u(cfg.max_position_embeddings)),
        ("tokenizer.ggml.model".into(), s("gpt2")),
        ("tokenizer.ggml.pre".into(), s("smollm")),
        ("tokenizer.ggml.tokens".into(), Value::Array(tokens.iter().map(|(_, t)| s(t)).collect())),
        ("tokenizer.ggml.merges".into(), Value::Array(vec![])),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(257)),
        ("tokenizer.chat_template".into(), s(agentrt_policy::chat_template::CHATML)),
    ];
    let mut tensors: Vec<(String, Tensor)> = vec![("token_embd.weight".into(), w.embed.clone()), ("output_norm.weight".into(), w.norm.clone())];
    for (i, l) in w.layers.iter().enumerate() {
        let n = |x: &str| format!("blk.{i}.{x}");
        let (q, kk) = if arch == Arch::Llama { (permute(&l.q, cfg.num_heads), permute(&l.k, cfg.num_kv_heads)) } else { (l.q.clone(), l.k.clone()) };
        for (name, t) in [
            ("attn_norm.weight", &l.attn_norm),
            ("attn_q.weight", &q),
            ("attn_k.weight", &kk),
            ("attn_v.weight", &l.v),
            ("attn_output.weight", &l.o),
            ("ffn_norm.weight", &l.ffn_norm),
            ("ffn_gate.weight", &l.gate),
            ("ffn_up.weight", &l.up),
            ("ffn_down.weight", &l.down),
        ] {
            tensors.push((n(name), t.clone()));
        }
        for (name, t) in [
            ("attn_q.bias", &l.q_bias),
            ("attn_k.bias", &l.k_bias),
            ("attn_v.bias", &l.v_bias),
            ("attn_q_norm.weight", &l.q_norm),
            ("attn_k_norm.weight", &l.k_norm),
        ] {
            if let Some(t) = t {
                tensors.push((n(name), t.clone()));
            }
        }
    }
    let q: Vec<(String, QTensor)> = tensors.iter().map(|(n, t)| (n.clone(), QTensor::quantize(t, GgmlDType::F32).unwrap())).collect();
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let q_refs: Vec<(&str, &QTensor)> = q.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    candle_core::quantized::gguf_file::write(&mut f, &meta_refs, &q_refs).unwrap();
}

fn logits(p: &Policy) -> Tensor {
    let toks = Tensor::new(&[[256u32, 5, 9, 200, 3, 77]], p.device()).unwrap();
    p.decoder.forward_fused_all(&toks, p.adapters.as_ref()).unwrap()
}

#[test]
fn gguf_loads_to_the_same_model_with_qk_unpermuted_and_its_own_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    for (name, arch) in [("llama", Arch::Llama), ("qwen2", Arch::Qwen2), ("qwen3", Arch::Qwen3)] {
        let reference = tiny_policy(arch, 11).unwrap();
        let path = dir.path().join(format!("{name}.gguf"));
        write_gguf(&path, name, arch, &reference.decoder.weights);
        let loaded = Policy::load(&ModelSource::Path(path), &candle_core::Device::Cpu).unwrap();
        assert_eq!(loaded.config().arch, arch);
        let d = max_abs(&logits(&reference), &logits(&loaded));
        assert!(d < 1e-5, "{name}: {d}");
        let ids = loaded.chat_prompt(&[agentrt_policy::Message::user("hi")]).unwrap();
        assert_eq!(ids[0], 256, "<|im_start|> must be one token");
        assert_eq!(loaded.tokenizer.decode(&ids).unwrap(), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        assert!(loaded.tokenizer.eos_ids.contains(&257));
    }
}

#[test]
fn peft_adapters_round_trip_and_merge_export_reloads_as_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = tiny_policy(Arch::Qwen2, 5).unwrap();
    p.init_adapters(LoraConfig { rank: 4, alpha: 16.0, targets: Target::ALL.to_vec(), dual: true }, 0).unwrap();
    p.adapters.as_ref().unwrap().randomize_b(0.2, 1).unwrap();
    p.set_adapter_scales(1.0, 0.5);
    let with = logits(&p);
    let ad_dir = dir.path().join("adapters");
    p.save_adapters(&ad_dir).unwrap();
    // PEFT's layout and names.
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(ad_dir.join("retain/adapter_config.json")).unwrap()).unwrap();
    assert_eq!(cfg["peft_type"], "LORA");
    assert_eq!(cfg["task_type"], "CAUSAL_LM");
    assert_eq!(cfg["r"], 4);
    let t = candle_core::safetensors::load(ad_dir.join("forget/adapter_model.safetensors"), &candle_core::Device::Cpu).unwrap();
    assert_eq!(t["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].dims(), &[4, 32]);
    assert_eq!(t["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"].dims(), &[32, 4]);

    let mut q = tiny_policy(Arch::Qwen2, 5).unwrap();
    q.load_adapters(&ad_dir).unwrap();
    assert_eq!(q.adapters.as_ref().unwrap().scales, (1.0, 0.5));
    assert!(max_abs(&with, &logits(&q)) < 1e-6);

    let out = dir.path().join("merged");
    p.merge_and_export(&out).unwrap();
    let merged = Policy::load(&ModelSource::Path(out), &candle_core::Device::Cpu).unwrap();
    let d = max_abs(&with, &logits(&merged));
    assert!(d < 1e-4, "merged model differs by {d}");
}

#[test]
fn unsupported_architecture_names_found_and_supported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write_gguf(&path, "gpt2", Arch::Llama, &tiny_policy(Arch::Llama, 1).unwrap().decoder.weights);
    let err = Policy::load(&ModelSource::Path(path), &candle_core::Device::Cpu).err().unwrap();
    assert!(matches!(err, PolicyError::UnsupportedArchitecture { .. }));
    let msg = err.to_string();
    assert!(msg.contains("`gpt2`") && msg.contains("llama, qwen2, qwen3"), "{msg}");
}

#[test]
fn truncated_gguf_names_the_path_and_the_missing_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write_gguf(&path, "llama", Arch::Llama, &tiny_policy(Arch::Llama, 1).unwrap().decoder.weights);
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 100).unwrap();
    let msg = Policy::load(&ModelSource::Path(path.clone()), &candle_core::Device::Cpu).err().unwrap().to_string();
    assert!(msg.contains("truncated") && msg.contains("m.gguf") && msg.contains("bytes"), "{msg}");
    // Cut inside the header too.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(40).unwrap();
    let msg = Policy::load(&ModelSource::Path(path), &candle_core::Device::Cpu).err().unwrap().to_string();
    assert!(msg.contains("truncated") && msg.contains("m.gguf"), "{msg}");
}

#[test]
fn wrong_checksum_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.bin");
    std::fs::write(&path, b"not the model").unwrap();
    let err: PolicyError = agentrt_assets::verify_sha256(&path, &"0".repeat(64)).unwrap_err().into();
    let msg = err.to_string();
    assert!(msg.contains("checksum mismatch") && msg.contains("w.bin"), "{msg}");
}

#[test]
fn tokenizer_larger_than_the_model_vocabulary_is_refused_with_both_sizes() {
    let cfg = agentrt_policy::ModelConfig { vocab_size: 100, ..tiny_config(Arch::Llama) };
    let w = ModelWeights::random(&cfg, 0, &candle_core::Device::Cpu).unwrap();
    let tok = PolicyTokenizer::bytes_only(SPECIALS).unwrap();
    let tmpl = agentrt_policy::ChatTemplate::new(agentrt_policy::chat_template::CHATML, None, None).unwrap();
    let msg = Policy::from_parts(cfg, w, tok, tmpl, "x".into(), &candle_core::Device::Cpu).err().unwrap().to_string();
    assert!(msg.contains("259") && msg.contains("100"), "{msg}");
}

#[test]
fn a_missing_adapter_directory_is_named_as_missing() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = tiny_policy(Arch::Llama, 5).unwrap();
    let nope = dir.path().join("models/nope");
    let msg = p.load_adapters(&nope).err().unwrap().to_string();
    assert_eq!(msg, format!("adapter directory {} does not exist", nope.display()));
    // A directory that is there but holds no adapter still says what is missing in it.
    let msg = p.load_adapters(dir.path()).err().unwrap().to_string();
    assert!(msg.contains("neither adapter_config.json nor retain/adapter_config.json found"), "{msg}");
}
