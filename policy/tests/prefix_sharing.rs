//! Sampling from shared prefixes computes the same function as reading every prompt whole: the same greedy
//! tokens, the same log-probs (which must also match the training forward), turn after turn.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_policy::tiny::tiny_policy;
use agentrt_policy::{Arch, Completion, LoraConfig, Policy, PrefixCache, SamplingParams, Target};
use rand::SeedableRng;

fn with_adapters(arch: Arch) -> Policy {
    let mut p = tiny_policy(arch, 11).unwrap();
    p.init_adapters(LoraConfig { rank: 4, alpha: 8.0, targets: Target::ALL.to_vec(), dual: false }, 0).unwrap();
    p.adapters.as_ref().unwrap().randomize_b(0.1, 1).unwrap();
    p
}

/// A step's first turn: a shared "system prompt", two questions, three rollouts each.
fn first_turn() -> Vec<Vec<u32>> {
    let system: Vec<u32> = (0..40).map(|i| 40 + (i * 7) % 200).collect();
    let mut out = Vec::new();
    for q in [&[10u32, 11, 12][..], &[20, 21, 22, 23, 24, 25, 26]] {
        for _ in 0..3 {
            out.push(system.iter().chain(q).copied().collect());
        }
    }
    out
}

/// The next turn: each conversation goes on with its reply and a "tool output" of its own length.
fn next_turn(prompts: &[Vec<u32>], replies: &[Completion]) -> Vec<Vec<u32>> {
    replies
        .iter()
        .enumerate()
        .map(|(i, c)| prompts[c.prompt_index].iter().chain(&c.token_ids).chain(&vec![30 + i as u32; 2 + 3 * i]).copied().collect())
        .collect()
}

fn three_turns(p: &Policy, params: &SamplingParams, mut cache: Option<&mut PrefixCache>) -> Vec<(Vec<Vec<u32>>, Vec<Completion>)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut prompts = first_turn();
    let mut turns = Vec::new();
    for _ in 0..3 {
        let out = match cache.as_deref_mut() {
            Some(c) => p.sample_with_prefixes(&prompts, params, &mut rng, c).unwrap(),
            None => p.sample(&prompts, params, &mut rng).unwrap(),
        };
        let next = next_turn(&prompts, &out);
        turns.push((prompts, out));
        prompts = next;
    }
    turns
}

#[test]
fn greedy_tokens_and_logprobs_are_the_same_with_and_without_shared_prefixes() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let p = with_adapters(arch);
        let params = SamplingParams { temperature: 0.0, max_tokens: 6, ..Default::default() };
        let plain = three_turns(&p, &params, None);
        let mut cache = PrefixCache::new(1 << 30);
        let shared = three_turns(&p, &params, Some(&mut cache));
        for (t, ((pa, a), (pb, b))) in plain.iter().zip(&shared).enumerate() {
            assert_eq!(pa, pb, "{arch:?} turn {t}: prompts");
            for (x, y) in a.iter().zip(b) {
                assert_eq!(x.token_ids, y.token_ids, "{arch:?} turn {t}");
                for (u, v) in x.logprobs.iter().zip(&y.logprobs) {
                    assert!((u - v).abs() < 1e-4, "{arch:?} turn {t}: log-prob {u} read whole, {v} from shared prefixes");
                }
            }
        }
        let counts = cache.counts();
        let prompt_tokens: usize = shared.iter().flat_map(|(ps, _)| ps.iter().map(Vec::len)).sum();
        let sampled: usize = shared.iter().flat_map(|(_, cs)| cs.iter().map(|c| c.token_ids.len())).sum();
        assert_eq!(counts.prefilled + counts.reused, prompt_tokens, "{arch:?}: {counts:?}");
        assert_eq!(counts.sampled, sampled);
        assert!(counts.reused * 2 > prompt_tokens, "{arch:?}: most prompt tokens are shared here, yet {counts:?}");
    }
}

#[test]
fn sampled_logprobs_from_shared_prefixes_match_the_training_forward() {
    let p = with_adapters(Arch::Qwen2);
    let params = SamplingParams { temperature: 1.0, max_tokens: 8, ..Default::default() };
    let mut cache = PrefixCache::new(1 << 30);
    for (t, (prompts, outs)) in three_turns(&p, &params, Some(&mut cache)).iter().enumerate() {
        for c in outs {
            let full: Vec<u32> = prompts[c.prompt_index].iter().chain(&c.token_ids).copied().collect();
            let lp = p.token_logprobs(&[full], &[]).unwrap().squeeze(0).unwrap().to_vec1::<f32>().unwrap();
            let start = prompts[c.prompt_index].len() - 1;
            for (k, &x) in c.logprobs.iter().enumerate() {
                assert!((lp[start + k] - x).abs() < 1e-4, "turn {t} token {k}: sampled {x}, recomputed {}", lp[start + k]);
            }
        }
    }
}

#[test]
fn the_first_turn_reads_the_shared_prompt_once_and_each_question_once() {
    let p = with_adapters(Arch::Llama);
    let params = SamplingParams { temperature: 1.0, max_tokens: 3, ..Default::default() };
    let prompts = first_turn();
    let mut cache = PrefixCache::new(1 << 30);
    p.sample_with_prefixes(&prompts, &params, &mut rand::rngs::StdRng::seed_from_u64(0), &mut cache).unwrap();
    let c = cache.counts();
    // 40 shared tokens, then each question's own 3 and 7 once.
    let total: usize = prompts.iter().map(Vec::len).sum();
    assert_eq!(c.prefilled, 40 + 3 + 7, "{c:?}");
    assert_eq!(c.reused, total - 50);
    assert!(c.sampled > 0 && c.sampled <= 18);
}
