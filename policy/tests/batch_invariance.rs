//! Batch-invariant decoding (`Batching::Invariant`, the default): a sequence's tokens and log-probs are the
//! same bits whether it is sampled alone, beside other sequences, with its prompt read a few tokens a step,
//! or after a cached prefix that another prompt left, greedy and seeded alike.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_policy::sampling::{Draws, Heard};
use agentrt_policy::tiny::tiny_policy;
use agentrt_policy::{Arch, Completion, ContinuousBatch, LoraConfig, ModelSource, Policy, PrefixCache, SamplingParams, Target};
use rand::SeedableRng;

/// How the target sequence is sampled.
#[derive(Debug, Clone, Copy)]
enum Setting {
    Alone,
    /// Beside `n` other sequences, admitted in the same step (its prompt's rows share steps with theirs).
    Beside(usize),
    /// Alone, its prompt read `n` tokens a step.
    Chunked(usize),
    /// Alone, after another prompt that starts like it was sampled and cached.
    AfterCachedPrefix,
    /// Alone, after the same prompt was sampled and cached (with its reply).
    AfterItself,
}

/// Another prompt: the target's first `shared` tokens, then its own.
fn other(target: &[u32], shared: usize, i: usize) -> Vec<u32> {
    target[..shared].iter().copied().chain((0..5 + 3 * i as u32).map(|j| 50 + (j * 13 + i as u32 * 7) % 180)).collect()
}

/// The target's completion under `setting`: every row draws from its own stream seeded by its place among
/// the prompts (the target's is seed 99 wherever it sits), as a server's requests do.
fn sample_target(p: &Policy, target: &[u32], params: &SamplingParams, setting: Setting) -> Completion {
    let mut cache = PrefixCache::new(1 << 30);
    let mut prompts = vec![target.to_vec()];
    let mut step_tokens = None;
    match setting {
        Setting::Alone => {}
        Setting::Beside(n) => prompts.extend((0..n).map(|i| other(target, if i % 2 == 0 { 0 } else { target.len() / 2 }, i))),
        Setting::Chunked(n) => step_tokens = Some(n),
        Setting::AfterCachedPrefix => {
            let first = other(target, target.len() * 3 / 4, 0);
            run(p, &[first], params, None, Some(&mut cache));
            assert!(cache.counts().prefilled > 0);
        }
        Setting::AfterItself => {
            run(p, &prompts, params, None, Some(&mut cache));
        }
    }
    let cached = matches!(setting, Setting::AfterCachedPrefix | Setting::AfterItself);
    let out = run(p, &prompts, params, step_tokens, cached.then_some(&mut cache));
    if matches!(setting, Setting::AfterCachedPrefix) {
        assert!(cache.counts().reused >= target.len() * 3 / 4 - 1, "the target read its prefix from the cache: {:?}", cache.counts());
    }
    out.into_iter().find(|c| c.prompt_index == 0).unwrap()
}

/// Samples `prompts` to their ends in one continuous batch; row `i` draws from `StdRng(99 + i)`.
fn run(p: &Policy, prompts: &[Vec<u32>], params: &SamplingParams, step_tokens: Option<usize>, mut cache: Option<&mut PrefixCache>) -> Vec<Completion> {
    let mut batch = ContinuousBatch::new(&p.decoder, &p.tokenizer, p.adapters.as_ref());
    if let Some(n) = step_tokens {
        batch = batch.with_step_tokens(n);
    }
    for (i, prompt) in prompts.iter().enumerate() {
        batch.admit(i, prompt.clone(), params.clone()).unwrap();
    }
    let mut rngs: Vec<rand::rngs::StdRng> = (0..prompts.len()).map(|i| rand::rngs::StdRng::seed_from_u64(99 + i as u64)).collect();
    let mut out = Vec::new();
    while !batch.is_empty() {
        out.extend(batch.step(&mut Draws::PerRow(&mut rngs), &mut |_, _, _| Heard::Continue, cache.as_deref_mut()).unwrap());
    }
    out
}

/// Every setting gives the target the tokens and log-probs (bit for bit) it gets alone, at temperature 0
/// and (in `seeded_settings`) at temperature 1 with its own seeded stream.
fn assert_invariant(p: &Policy, what: &str, target: &[u32], max_tokens: usize, settings: &[Setting], seeded_settings: &[Setting]) {
    let greedy = SamplingParams { temperature: 0.0, max_tokens, ..Default::default() };
    let seeded = SamplingParams { temperature: 1.0, max_tokens, ..Default::default() };
    for (params, settings) in [(greedy, settings), (seeded, seeded_settings)] {
        let alone = sample_target(p, target, &params, Setting::Alone);
        assert!(!alone.token_ids.is_empty());
        for &setting in settings {
            let got = sample_target(p, target, &params, setting);
            assert_eq!(got.token_ids, alone.token_ids, "{what}, temperature {}, {setting:?}: other tokens", params.temperature);
            let bits = |c: &Completion| c.logprobs.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
            assert_eq!(
                bits(&got),
                bits(&alone),
                "{what}, temperature {}, {setting:?}: other log-probs {:?} vs {:?}",
                params.temperature,
                got.logprobs,
                alone.logprobs
            );
        }
    }
}

/// Every setting, once.
const ALL: [Setting; 5] = [Setting::Beside(3), Setting::Beside(20), Setting::Chunked(7), Setting::AfterCachedPrefix, Setting::AfterItself];

#[test]
fn tiny_models_decode_alike_alone_beside_others_in_chunks_and_after_a_cached_prefix() {
    let target: Vec<u32> = (0..45).map(|i| 40 + (i * 11) % 190).collect();
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let mut p = tiny_policy(arch, 3).unwrap();
        assert_invariant(&p, &format!("{arch:?}"), &target, 10, &ALL, &ALL);
        p.init_adapters(LoraConfig { rank: 4, alpha: 8.0, targets: Target::ALL.to_vec(), dual: false }, 0).unwrap();
        p.adapters.as_ref().unwrap().randomize_b(0.2, 1).unwrap();
        assert_invariant(&p, &format!("{arch:?} with an adapter"), &target, 10, &ALL, &ALL);
    }
}

/// The default model as sampling loads it for training (GGUF blocks and the f32 copy, f32 activations) and
/// as a server loads it (blocks only, 8-bit activations), on a real chat prompt (the settings the tiny
/// models do not reach: blocks, and 8-bit activations; a few, to keep the test short).
#[test]
fn the_default_model_decodes_alike_alone_beside_others_in_chunks_and_after_a_cached_prefix() {
    let dev = candle_core::Device::Cpu;
    let for_training = Policy::load(&ModelSource::Default, &dev).unwrap();
    let mut for_serving = Policy::load_for_inference(&ModelSource::Default, &dev).unwrap();
    for_serving.decoder.decode_activations = agentrt_policy::DecodeActivations::Int8;
    let target = for_training.chat_prompt(&[agentrt_policy::Message::user("Name three colours please.")]).unwrap();
    assert!(target.len() > 20, "a prompt of several runs of rows: {} tokens", target.len());
    let serving = [Setting::Beside(17), Setting::Chunked(7), Setting::AfterCachedPrefix, Setting::AfterItself];
    assert_invariant(&for_serving, "SmolLM2 (blocks only, 8-bit activations)", &target, 6, &serving, &[Setting::Beside(3)]);
    assert_invariant(&for_training, "SmolLM2 (blocks and f32 copy)", &target, 6, &[Setting::Beside(17), Setting::AfterItself], &[]);
}
