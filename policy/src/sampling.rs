//! Batched sampling with a KV cache, keeping the exact token ids and their log-probs.
//!
//! Every completion reports the ids the model wrote and, for each, its log-probability under the model at
//! temperature 1 without top-p/top-k truncation: the same quantity [`crate::Policy::token_logprobs`]
//! computes for training, so no turn is ever re-tokenised and the importance ratio starts at 1.
//!
//! Prompts of different lengths are padded where their rows need it (at the start, or between a cached prefix
//! and the new tokens); the decoder masks padding and gives every token its position in its own sequence.
//! Rows that finish leave the batch (their cache rows are dropped, after [`PrefixCache`] has kept a copy).

use crate::error::Result;
use crate::lora::AdapterSet;
use crate::model::{Decoder, KvCache};
use crate::prefix_cache::{common_prefix, PrefixCache, PrefixMatch, TokenCounts};
use crate::tokenizer::PolicyTokenizer;
use candle_core::Tensor;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::ops::Range;

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
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams { n: 1, temperature: 1.0, top_p: 1.0, top_k: 0, max_tokens: 256, stop: vec![], max_batch: 64 }
    }
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
    /// Dropped by its observer before it ended (a server's client went away): see [`sample_rows`].
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

fn logsumexp(logits: &[f32]) -> f32 {
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
    if p.top_k > 0 || p.top_p < 1.0 {
        idx.sort_unstable_by(|&a, &b| logits[b].partial_cmp(&logits[a]).unwrap_or(std::cmp::Ordering::Equal));
    }
    if p.top_k > 0 {
        idx.truncate(p.top_k);
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

/// One sequence of a [`sample_rows`] batch: its templated prompt and its own settings (`n` and `max_batch`
/// are ignored: a row is one completion).
#[derive(Debug, Clone, Copy)]
pub struct RowSpec<'a> {
    /// The templated prompt's token ids.
    pub prompt: &'a [u32],
    /// The row's own temperature, top-p/top-k, length and stop strings.
    pub params: &'a SamplingParams,
}

/// Where the rows of a batch draw their random numbers.
pub enum Draws<'r> {
    /// One stream; at each step the live rows draw in order. [`sample`] uses it, so a seeded run repeats.
    Shared(&'r mut dyn rand::RngCore),
    /// A stream per row: a row samples the same tokens whatever it is batched with (a server's requests,
    /// each with its own seed).
    PerRow(&'r mut [rand::rngs::StdRng]),
}

/// What an observer of [`sample_rows`] says after hearing a row's new token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// Go on sampling the row.
    Continue,
    /// Drop the row now (its reader has gone): it ends as [`FinishReason::Cancelled`] and frees its slot.
    Cancel,
}

struct Row {
    prompt_index: usize,
    ids: Vec<u32>,
    logprobs: Vec<f32>,
    done: Option<FinishReason>,
}

/// Samples `params.n` completions for each prompt (ids already templated). Completions come back grouped by
/// prompt, in order. With `prefixes`, prompts start from the longest prefix computed before (see
/// [`PrefixCache`]) and the rows leave their keys and values there for the next turn.
pub fn sample(
    decoder: &Decoder,
    tokenizer: &PolicyTokenizer,
    adapters: Option<&AdapterSet>,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
    rng: &mut impl rand::RngCore,
    mut prefixes: Option<&mut PrefixCache>,
) -> Result<Vec<Completion>> {
    let jobs: Vec<usize> = (0..prompts.len()).flat_map(|i| std::iter::repeat_n(i, params.n.max(1))).collect();
    let mut out = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(params.max_batch.max(1)) {
        let rows: Vec<RowSpec> = chunk.iter().map(|&j| RowSpec { prompt: &prompts[j], params }).collect();
        let done = sample_rows(decoder, tokenizer, adapters, &rows, Draws::Shared(&mut *rng), &mut |_, _, _| Heard::Continue, prefixes.as_deref_mut())?;
        out.extend(done.into_iter().map(|c| Completion { prompt_index: chunk[c.prompt_index], ..c }));
    }
    Ok(out)
}

/// The batch's cache after its prompts were read: row `r`'s slots `holes[r]` are padding.
struct Prefilled {
    logits: Tensor,
    cache: KvCache,
    holes: Vec<Range<usize>>,
}

/// Reads `prompts` into a fresh cache, one row each, and returns the logits of each prompt's last token.
/// A prompt with a cached prefix (`from[u]`) starts from its keys and values: its row is the cached slots,
/// a hole, then its own new tokens, which end together with every other row's. Counts what it prefilled.
fn prefill(
    decoder: &Decoder,
    adapters: Option<&AdapterSet>,
    prompts: &[&[u32]],
    from: &[Option<PrefixMatch>],
    prefixes: Option<&PrefixCache>,
    pad_id: u32,
) -> Result<(Prefilled, usize)> {
    let dev = decoder.device();
    let cached: Vec<usize> = from.iter().map(|m| m.map_or(0, |m| m.len)).collect();
    let fresh: Vec<usize> = prompts.iter().zip(&cached).map(|(p, &c)| p.len() - c).collect();
    if fresh.contains(&0) {
        return Err(crate::PolicyError::Invalid("a prompt's last token must be read to sample after it".into()));
    }
    let (c_max, n_max) = (cached.iter().copied().max().unwrap_or(0), fresh.iter().copied().max().unwrap_or(0));
    let mut cache = KvCache::default();
    if c_max > 0 {
        let prefixes = prefixes.ok_or_else(|| crate::PolicyError::Invalid("a cached prefix without its cache".into()))?;
        let layers = (0..decoder.cfg.num_layers)
            .map(|li| {
                let (mut ks, mut vs) = (Vec::with_capacity(prompts.len()), Vec::with_capacity(prompts.len()));
                for (m, &c) in from.iter().zip(&cached) {
                    let (kv, hd) = (decoder.cfg.num_kv_heads, decoder.cfg.head_dim);
                    let zeros = |n: usize| Tensor::zeros((1, kv, n, hd), decoder.weights.embed.dtype(), dev);
                    let (k, v) = match m {
                        Some(m) if c == c_max => prefixes.layer(*m, li)?,
                        Some(m) => {
                            let (k, v) = prefixes.layer(*m, li)?;
                            (Tensor::cat(&[&k, &zeros(c_max - c)?], 2)?, Tensor::cat(&[&v, &zeros(c_max - c)?], 2)?)
                        }
                        None => (zeros(c_max)?, zeros(c_max)?),
                    };
                    ks.push(k);
                    vs.push(v);
                }
                Ok((Tensor::cat(&ks, 0)?, Tensor::cat(&vs, 0)?))
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        cache = KvCache::from_layers(layers)?;
    }
    let mut flat = Vec::with_capacity(prompts.len() * n_max);
    let mut holes = Vec::with_capacity(prompts.len());
    for ((p, &c), &n) in prompts.iter().zip(&cached).zip(&fresh) {
        flat.extend(std::iter::repeat_n(pad_id, n_max - n));
        flat.extend(&p[c..]);
        holes.push(c..c_max + n_max - n);
    }
    let input = Tensor::from_vec(flat, (prompts.len(), n_max), dev)?;
    let logits = decoder.forward_cached(&input, &holes, &mut cache, adapters)?;
    Ok((Prefilled { logits, cache, holes }, fresh.iter().sum()))
}

/// Row `row`'s keys and values without its hole, `(1, kv_heads, T, head_dim)` per layer, in storage of their
/// own (a view would keep the whole batch's cache alive).
fn row_keys_values(cache: &KvCache, row: usize, hole: &Range<usize>) -> candle_core::Result<Vec<(Tensor, Tensor)>> {
    let own = |t: &Tensor| -> candle_core::Result<Tensor> {
        let t = t.narrow(0, row, 1)?;
        let len = t.dim(2)?;
        let parts: Vec<Tensor> = [(0, hole.start), (hole.end, len - hole.end)]
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|&(s, n)| t.narrow(2, s, n))
            .collect::<candle_core::Result<_>>()?;
        match parts.as_slice() {
            [one] => one.force_contiguous(),
            _ => Tensor::cat(&parts, 2),
        }
    };
    (0..cache.num_layers())
        .map(|li| match cache.layer(li)? {
            Some((k, v)) => Ok((own(&k)?, own(&v)?)),
            None => candle_core::bail!("block {li} of a used cache is empty"),
        })
        .collect()
}

/// Samples one completion per row, all rows in one batch (a finished row leaves it), each row under its own
/// settings. `on_token(row, id, logprob)` hears every sampled token as soon as it is picked (a server streams
/// them) and may cancel the row. A completion's `prompt_index` is its row's index.
///
/// Rows with the same prompt read it once; with `prefixes`, what the prompts share with each other (when
/// several distinct ones share a prefix) or with an earlier pass is read once too, and each row that ends
/// leaves its keys and values there. The tokens are the same function of the prompt either way: a row's
/// tokens keep their positions whatever its layout, and padding is masked.
pub fn sample_rows(
    decoder: &Decoder,
    tokenizer: &PolicyTokenizer,
    adapters: Option<&AdapterSet>,
    specs: &[RowSpec],
    mut draws: Draws,
    on_token: &mut dyn FnMut(usize, u32, f32) -> Heard,
    mut prefixes: Option<&mut PrefixCache>,
) -> Result<Vec<Completion>> {
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    if let Draws::PerRow(r) = &draws {
        if r.len() != specs.len() {
            return Err(crate::PolicyError::Invalid(format!("{} random streams for {} rows", r.len(), specs.len())));
        }
    }
    let dev = decoder.device().clone();
    let max_len = specs.iter().map(|s| s.prompt.len()).max().unwrap_or(0);
    if specs.iter().any(|s| s.prompt.is_empty()) {
        return Err(crate::PolicyError::Invalid("empty prompt".into()));
    }
    let max_tokens = specs.iter().map(|s| s.params.max_tokens).max().unwrap_or(0);
    if max_len + max_tokens > decoder.cfg.max_position_embeddings {
        return Err(crate::PolicyError::Invalid(format!(
            "prompt ({max_len} tokens) plus max_tokens ({max_tokens}) exceeds the model's context ({})",
            decoder.cfg.max_position_embeddings
        )));
    }
    let pad_id = tokenizer.eos_ids.first().copied().unwrap_or(0);
    let mut rows: Vec<Row> = specs
        .iter()
        .enumerate()
        .map(|(j, s)| Row { prompt_index: j, ids: vec![], logprobs: vec![], done: (s.params.max_tokens == 0).then_some(FinishReason::Length) })
        .collect();
    // A row asked for no tokens at all is done before the first forward.
    let mut active: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].done.is_none()).collect();
    if active.is_empty() {
        return finish(rows, tokenizer);
    }
    // Each distinct prompt is read once; `unique_of[k]` is active row k's.
    let mut uniques: Vec<&[u32]> = Vec::new();
    let mut unique_of = Vec::with_capacity(active.len());
    for &i in &active {
        let p = specs[i].prompt;
        let u = uniques.iter().position(|&q| q == p).unwrap_or_else(|| {
            uniques.push(p);
            uniques.len() - 1
        });
        unique_of.push(u);
    }
    let mut counts = TokenCounts { reused: active.iter().map(|&i| specs[i].prompt.len()).sum(), ..TokenCounts::default() };
    let mut from: Vec<Option<PrefixMatch>> = vec![None; uniques.len()];
    if let Some(pc) = prefixes.as_deref_mut() {
        let matches = |pc: &mut PrefixCache| uniques.iter().map(|p| pc.longest(p, p.len() - 1)).collect::<Vec<_>>();
        from = matches(pc);
        // What several distinct prompts share and no entry holds yet (the system prompt and demonstration on
        // a first pass) is read once, on its own, and then served from the cache like any other prefix.
        let shared = uniques.iter().map(|p| common_prefix(p, uniques[0])).min().unwrap_or(0).min(uniques.iter().map(|p| p.len() - 1).min().unwrap_or(0));
        if uniques.len() > 1 && from.iter().filter(|m| m.map_or(0, |m| m.len) < shared).count() > 1 {
            let head = &uniques[0][..shared];
            let head_from = [pc.longest(head, shared - 1)];
            let (p, read) = prefill(decoder, adapters, &[head], &head_from, Some(pc), pad_id)?;
            counts.prefilled += read;
            let kv = row_keys_values(&p.cache, 0, &p.holes[0])?;
            pc.insert(head.to_vec(), kv)?;
            from = matches(pc);
        }
    }
    let (p, read) = prefill(decoder, adapters, &uniques, &from, prefixes.as_deref(), pad_id)?;
    counts.prefilled += read;
    debug_assert!(counts.prefilled <= counts.reused, "read more prompt tokens than the rows have");
    counts.reused = counts.reused.saturating_sub(counts.prefilled);
    let Prefilled { logits, mut cache, holes: unique_holes } = p;
    let expand = Tensor::new(unique_of.iter().map(|&u| u as u32).collect::<Vec<_>>().as_slice(), &dev)?;
    let mut logits = if uniques.len() < active.len() { logits.index_select(&expand, 0)? } else { logits };
    if uniques.len() < active.len() {
        cache.select_rows(&expand)?;
    }
    let mut holes: Vec<Range<usize>> = unique_of.iter().map(|&u| unique_holes[u].clone()).collect();
    loop {
        let rows_logits: Vec<Vec<f32>> = logits.to_dtype(candle_core::DType::F32)?.to_vec2()?;
        let mut next = Vec::with_capacity(active.len());
        for (k, &i) in active.iter().enumerate() {
            let params = specs[i].params;
            let id = match &mut draws {
                Draws::Shared(rng) => pick(&rows_logits[k], params, rng),
                Draws::PerRow(rngs) => pick(&rows_logits[k], params, &mut rngs[i]),
            };
            let lp = rows_logits[k][id as usize] - logsumexp(&rows_logits[k]);
            let row = &mut rows[i];
            row.ids.push(id);
            row.logprobs.push(lp);
            counts.sampled += 1;
            next.push(id);
            if tokenizer.eos_ids.contains(&id) {
                row.done = Some(FinishReason::Eos);
            } else if !params.stop.is_empty() {
                let text = tokenizer.decode(&row.ids)?;
                if let Some(s) = params.stop.iter().find(|s| text.contains(s.as_str())) {
                    row.done = Some(FinishReason::Stop(s.clone()));
                }
            }
            if row.done.is_none() && row.ids.len() >= params.max_tokens {
                row.done = Some(FinishReason::Length);
            }
            if on_token(i, id, lp) == Heard::Cancel && row.done.is_none() {
                row.done = Some(FinishReason::Cancelled);
            }
        }
        // A row that ends leaves what it read (its prompt and every token but the last) for the next turn.
        if let Some(pc) = prefixes.as_deref_mut() {
            for (k, &i) in active.iter().enumerate() {
                if rows[i].done.is_some() {
                    let r = &rows[i];
                    let read: Vec<u32> = specs[i].prompt.iter().chain(&r.ids[..r.ids.len() - 1]).copied().collect();
                    let kv = row_keys_values(&cache, k, &holes[k])?;
                    pc.insert(read, kv)?;
                }
            }
        }
        let keep: Vec<u32> = (0..active.len()).filter(|&k| rows[active[k]].done.is_none()).map(|k| k as u32).collect();
        if keep.is_empty() {
            break;
        }
        if keep.len() < active.len() {
            let sel = Tensor::new(keep.as_slice(), &dev)?;
            cache.select_rows(&sel)?;
            active = keep.iter().map(|&k| active[k as usize]).collect();
            next = keep.iter().map(|&k| next[k as usize]).collect();
            holes = keep.iter().map(|&k| holes[k as usize].clone()).collect();
        }
        let input = Tensor::from_vec(next, (active.len(), 1), &dev)?;
        logits = decoder.forward_cached(&input, &holes, &mut cache, adapters)?;
    }
    if let Some(pc) = prefixes {
        pc.count(counts);
    }
    finish(rows, tokenizer)
}

fn finish(rows: Vec<Row>, tokenizer: &PolicyTokenizer) -> Result<Vec<Completion>> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let reason = r.done.unwrap_or(FinishReason::Length);
        let text_ids = if reason == FinishReason::Eos { &r.ids[..r.ids.len() - 1] } else { &r.ids[..] };
        out.push(Completion { prompt_index: r.prompt_index, text: tokenizer.decode(text_ids)?, token_ids: r.ids, logprobs: r.logprobs, finish_reason: reason });
    }
    Ok(out)
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
    fn top_p_keeps_only_the_nucleus() {
        let l = [5.0, 4.9, -10.0, -10.0];
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let p = SamplingParams { temperature: 1.0, top_p: 0.9, ..Default::default() };
        for _ in 0..200 {
            assert!(pick(&l, &p, &mut rng) < 2);
        }
    }
}
