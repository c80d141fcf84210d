//! Batched sampling with a KV cache, keeping the exact token ids and their log-probs.
//!
//! Every completion reports the ids the model wrote and, for each, its log-probability under the model at
//! temperature 1 without top-p/top-k truncation: the same quantity [`crate::Policy::token_logprobs`]
//! computes for training, so no turn is ever re-tokenised and the importance ratio starts at 1.
//!
//! This file holds what a completion is and how one token is picked; the decoding loop that calls them is
//! [`crate::continuous_batch`]'s: every sequence has a cache of its own (no padding), rows leave the batch
//! the step they end, and new ones may join between steps.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// How to sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// Completions per prompt.
    pub n: usize,
    /// 0 means greedy.
    pub temperature: f64,
    /// Nucleus mass kept (1.0 keeps all).
    pub top_p: f64,
    /// Keep only the k most likely tokens (0 keeps all).
    pub top_k: usize,
    /// Most tokens sampled per completion; prompt plus completion must fit the model's context.
    pub max_tokens: usize,
    /// Generation stops once the decoded completion contains one of these.
    pub stop: Vec<String>,
    /// Rows decoded together at most (memory bound).
    pub max_batch: usize,
    /// OpenAI's `frequency_penalty` (-2 to 2): each token's logit is lowered by this times the number of
    /// times the completion has written it so far, before picking (0: off).
    #[serde(default)]
    pub frequency_penalty: f32,
    /// OpenAI's `presence_penalty` (-2 to 2): each token the completion has written at least once has its
    /// logit lowered by this, before picking (0: off).
    #[serde(default)]
    pub presence_penalty: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            n: 1,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_tokens: 256,
            stop: vec![],
            max_batch: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
        }
    }
}

impl SamplingParams {
    /// Whether picking depends on what the completion wrote so far (a frequency or presence penalty).
    pub fn penalises(&self) -> bool {
        self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
    }
}

/// `logits` with OpenAI's frequency and presence penalties for a completion that has written `written`:
/// `logit[t] - count(t) * frequency - (count(t) > 0) * presence`, as OpenAI, vLLM and llama.cpp apply them
/// (the prompt's tokens are not counted).
pub fn penalised(logits: &[f32], written: &[u32], p: &SamplingParams) -> Vec<f32> {
    let mut out = logits.to_vec();
    let mut counts = std::collections::HashMap::<u32, u32>::new();
    for &id in written {
        *counts.entry(id).or_default() += 1;
    }
    for (id, n) in counts {
        if let Some(x) = out.get_mut(id as usize) {
            *x -= n as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }
    out
}

/// Why a completion ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinishReason {
    /// The model wrote an end-of-turn token (kept as the last id).
    Eos,
    /// The text reached this stop string (the tokens that made it are kept).
    Stop(String),
    /// `max_tokens` reached.
    Length,
    /// Dropped by its observer before it ended (a server's client went away): see [`crate::continuous_batch::ContinuousBatch::step`].
    Cancelled,
}

/// One sampled completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// Which prompt it continues.
    pub prompt_index: usize,
    /// Exactly the ids sampled, end-of-turn token included when the reason is `Eos`.
    pub token_ids: Vec<u32>,
    /// `log p(token)` at temperature 1, one per id.
    pub logprobs: Vec<f32>,
    /// The decoded text, without a final end-of-turn token.
    pub text: String,
    /// Why sampling stopped.
    pub finish_reason: FinishReason,
}

pub(crate) fn logsumexp(logits: &[f32]) -> f32 {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    m + logits.iter().map(|&x| (x - m).exp()).sum::<f32>().ln()
}

/// Picks a token from `logits` under `p`; returns the id.
pub fn pick(logits: &[f32], p: &SamplingParams, rng: &mut impl Rng) -> u32 {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    if p.temperature <= 0.0 {
        return best as u32;
    }
    let t = p.temperature as f32;
    let m = logits[best] / t;
    // Tokens more than e^-40 below the best cannot matter in f32; dropping them up front avoids sorting the
    // whole vocabulary at every step.
    let mut idx: Vec<usize> = (0..logits.len()).filter(|&i| logits[i] / t - m > -40.0).collect();
    // Most likely first, ties by id (a total order, so the pick does not depend on how it was reached).
    let order = |&a: &usize, &b: &usize| logits[b].partial_cmp(&logits[a]).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b));
    if p.top_k > 0 && idx.len() > p.top_k {
        // Only the k kept need an order: select them first (a vocabulary's worth of sorting per token was
        // a tenth of a rollout's time).
        idx.select_nth_unstable_by(p.top_k - 1, order);
        idx.truncate(p.top_k);
    }
    if p.top_k > 0 || p.top_p < 1.0 {
        idx.sort_unstable_by(order);
    }
    let mut probs: Vec<f32> = idx.iter().map(|&i| (logits[i] / t - m).exp()).collect();
    if p.top_p < 1.0 {
        let z: f32 = probs.iter().sum();
        let mut acc = 0.0;
        let mut keep = probs.len();
        for (j, &q) in probs.iter().enumerate() {
            acc += q / z;
            if acc >= p.top_p as f32 {
                keep = j + 1;
                break;
            }
        }
        probs.truncate(keep);
        idx.truncate(keep);
    }
    let z: f32 = probs.iter().sum();
    let mut u = rng.random::<f32>() * z;
    for (j, &q) in probs.iter().enumerate() {
        if u < q {
            return idx[j] as u32;
        }
        u -= q;
    }
    idx[probs.len() - 1] as u32
}

/// Where the rows of a batch draw their random numbers.
pub enum Draws<'r> {
    /// One stream; at each step the live rows draw in order. [`crate::continuous_batch::sample`] uses it, so a seeded run repeats.
    Shared(&'r mut dyn rand::RngCore),
    /// A stream per row: a row samples the same tokens whatever it is batched with (a server's requests,
    /// each with its own seed).
    PerRow(&'r mut [rand::rngs::StdRng]),
}

/// What an observer of a [`crate::continuous_batch::ContinuousBatch`] step says after hearing a row's new token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// Go on sampling the row.
    Continue,
    /// Drop the row now (its reader has gone): it ends as [`FinishReason::Cancelled`] and frees its slot.
    Cancel,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn greedy_picks_argmax_and_top_k_one_is_greedy() {
        let l = [0.1, 2.0, -1.0, 1.9];
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let g = SamplingParams { temperature: 0.0, ..Default::default() };
        assert_eq!(pick(&l, &g, &mut rng), 1);
        let k1 = SamplingParams { temperature: 1.0, top_k: 1, ..Default::default() };
        for _ in 0..20 {
            assert_eq!(pick(&l, &k1, &mut rng), 1);
        }
    }

    #[test]
    fn penalties_lower_written_tokens_by_count_and_presence() {
        let l = [1.0, 1.0, 1.0, 1.0];
        let p = SamplingParams { frequency_penalty: 0.5, presence_penalty: 0.25, ..Default::default() };
        assert!(p.penalises() && !SamplingParams::default().penalises());
        // Token 1 written twice, token 3 once, token 0 never: 1 - 2*0.5 - 0.25, 1 - 0.5 - 0.25.
        assert_eq!(penalised(&l, &[1, 3, 1], &p), vec![1.0, -0.25, 1.0, 0.25]);
        // Greedy then avoids the repeated token; a negative penalty favours it.
        let greedy = SamplingParams { temperature: 0.0, frequency_penalty: 2.0, ..Default::default() };
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        assert_eq!(pick(&penalised(&[3.0, 2.0], &[0], &greedy), &greedy, &mut rng), 1);
        let favour = SamplingParams { temperature: 0.0, presence_penalty: -2.0, ..Default::default() };
        assert_eq!(pick(&penalised(&[2.0, 3.0], &[0], &favour), &favour, &mut rng), 0);
        // An id beyond the vocabulary is no row to lower.
        assert_eq!(penalised(&[1.0], &[7], &p), vec![1.0]);
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        let l = [5.0, 4.9, -10.0, -10.0];
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let p = SamplingParams { temperature: 1.0, top_p: 0.9, ..Default::default() };
        for _ in 0..200 {
            assert!(pick(&l, &p, &mut rng) < 2);
        }
    }
}
