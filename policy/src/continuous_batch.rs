//! Continuous batching: sequences join a running batch between any two decoding steps and leave it the step
//! they end, so a batch is never as slow as its longest sequence.
//!
//! Each sequence keeps its own keys and values ([`SequenceKv`]), so joining and leaving touch no other
//! sequence's cache. A step reads, in one forward ([`Decoder::forward_rows`]), the prompts of the sequences
//! that joined since the last step (only what no cached prefix already holds) and the last sampled token of
//! every other, then samples one token for each.
//!
//! Shared work is done once. Sequences admitted together with the same prompt read it once and then fork
//! its cache (copy-on-write: they read the same keys and values and each appends its own). With a
//! [`PrefixCache`], a prompt starts from the longest prefix computed before, read in place (not copied);
//! what several new prompts share and the cache lacks (the system prompt and demonstration of a first
//! step) is read once on its own first; and a sequence that ends leaves its keys and values there, for the
//! next turn of its conversation.
//!
//! A server's batch is more mixed (vLLM's scheduler is the model): a sequence may read its own adapters
//! ([`ContinuousBatch::admit_with_adapters`]; rows of different adapters share one forward, each adding its
//! own LoRA delta; a prefix cache holds the batch's own adapters' keys and values, so such a sequence
//! neither reads nor fills it), and a step may read at most so many tokens ([`ContinuousBatch::with_step_tokens`]), so a
//! long prompt is read in chunks, a step at a time, while the other sequences go on decoding beside it
//! (chunked prefill): no prompt stalls the batch for its whole length. Prompts share a step's tokens
//! shortest rest first, so a short request that comes behind a long prompt is read at once.

use crate::error::{PolicyError, Result};
use crate::lora::AdapterSet;
use crate::model::{Decoder, SequenceKv};
use crate::prefix_cache::{common_prefix, PrefixCache, TokenCounts};
use crate::sampling::{logsumexp, penalised, pick, Completion, Draws, FinishReason, Heard, SamplingParams};
use crate::threads::in_pool;
use crate::tokenizer::PolicyTokenizer;
use std::sync::Arc;

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
    // Chunks of `max_batch` sequences, each sampled to its end before the next starts: a seeded run draws
    // its random numbers in the same order however long each completion is (a rollout's stream refills
    // slots instead: see `ContinuousBatch::with_max_live`).
    let n = params.n.max(1);
    let jobs: Vec<usize> = (0..prompts.len()).flat_map(|i| std::iter::repeat_n(i, n)).collect();
    let mut draws = Draws::Shared(rng);
    let mut out = Vec::with_capacity(jobs.len());
    for (c, chunk) in jobs.chunks(params.max_batch.max(1)).enumerate() {
        let mut batch = ContinuousBatch::new(decoder, tokenizer, adapters);
        for (k, &p) in chunk.iter().enumerate() {
            batch.admit(c * params.max_batch.max(1) + k, prompts[p].clone(), params.clone())?;
        }
        let mut done = Vec::with_capacity(chunk.len());
        while !batch.is_empty() {
            done.extend(batch.step(&mut draws, &mut |_, _, _| Heard::Continue, prefixes.as_deref_mut())?);
        }
        done.sort_by_key(|c| c.prompt_index);
        out.extend(done);
    }
    Ok(out.into_iter().map(|c| Completion { prompt_index: jobs[c.prompt_index], ..c }).collect())
}

/// A sequence admitted and not yet read.
struct Waiting {
    tag: usize,
    prompt: Vec<u32>,
    params: SamplingParams,
    /// Its own adapters, read instead of the batch's.
    own_adapters: Option<Arc<AdapterSet>>,
}

/// A sequence in the batch.
struct Live {
    tag: usize,
    prompt: Vec<u32>,
    params: SamplingParams,
    own_adapters: Option<Arc<AdapterSet>>,
    kv: SequenceKv,
    /// What the next forwards read for it: the part of its prompt no prefix holds (in chunks when a step's
    /// tokens are bounded), then each sampled token.
    feed: Vec<u32>,
    ids: Vec<u32>,
    logprobs: Vec<f32>,
    /// Sequences admitted with the same prompt, which fork this one's cache once it is read.
    followers: Vec<Waiting>,
}

/// A batch that sequences join and leave between decoding steps (see the module's page).
pub struct ContinuousBatch<'m> {
    decoder: &'m Decoder,
    tokenizer: &'m PolicyTokenizer,
    adapters: Option<&'m AdapterSet>,
    waiting: std::collections::VecDeque<Waiting>,
    live: Vec<Live>,
    ended: Vec<Completion>,
    max_live: usize,
    max_step_tokens: usize,
    last_step: StepShape,
}

/// What one step's forward read: for a server's counters and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepShape {
    /// Sequences read in the forward.
    pub sequences: usize,
    /// Tokens read in all.
    pub tokens: usize,
    /// Of those, prompt tokens.
    pub prompt_tokens: usize,
    /// Sequences still reading their prompt after this step (their prompt did not fit the step's tokens).
    pub prompts_unfinished: usize,
    /// Distinct adapters among the sequences read (the base model counts as one).
    pub adapters: usize,
}

impl<'m> ContinuousBatch<'m> {
    /// An empty batch sampling from `decoder` with `adapters`.
    pub fn new(decoder: &'m Decoder, tokenizer: &'m PolicyTokenizer, adapters: Option<&'m AdapterSet>) -> ContinuousBatch<'m> {
        ContinuousBatch {
            decoder,
            tokenizer,
            adapters,
            waiting: Default::default(),
            live: Vec::new(),
            ended: Vec::new(),
            max_live: usize::MAX,
            max_step_tokens: usize::MAX,
            last_step: StepShape::default(),
        }
    }

    /// At most `n` tokens read per step (vLLM's `max_num_batched_tokens`): every decoding sequence reads its
    /// last token, and prompts fill what is left, a chunk a step, the shortest rest first. Without it a step
    /// reads every new prompt whole.
    pub fn with_step_tokens(self, n: usize) -> ContinuousBatch<'m> {
        ContinuousBatch { max_step_tokens: n.max(1), ..self }
    }

    /// What the last step's forward read.
    pub fn last_step(&self) -> &StepShape {
        &self.last_step
    }

    /// Sequences in the batch (reading their prompt or decoding), not counting those waiting for a slot.
    pub fn live(&self) -> usize {
        self.live.len()
    }

    /// At most `n` sequences in the batch at once (a memory bound); the others wait, first come first
    /// served, and each takes the slot of a sequence that ends.
    pub fn with_max_live(self, n: usize) -> ContinuousBatch<'m> {
        ContinuousBatch { max_live: n.max(1), ..self }
    }

    /// Queues a sequence: the templated `prompt`, sampled under `params` (`n` and `max_batch` are ignored:
    /// a sequence is one completion). It joins at the next [`ContinuousBatch::step`]; its completion comes
    /// back with `prompt_index` set to `tag`.
    pub fn admit(&mut self, tag: usize, prompt: Vec<u32>, params: SamplingParams) -> Result<()> {
        self.queue(tag, prompt, params, None)
    }

    /// [`ContinuousBatch::admit`] for a sequence that reads `adapters` instead of the batch's own.
    pub fn admit_with_adapters(&mut self, tag: usize, prompt: Vec<u32>, params: SamplingParams, adapters: Arc<AdapterSet>) -> Result<()> {
        self.queue(tag, prompt, params, Some(adapters))
    }

    fn queue(&mut self, tag: usize, prompt: Vec<u32>, params: SamplingParams, own_adapters: Option<Arc<AdapterSet>>) -> Result<()> {
        if prompt.is_empty() {
            return Err(PolicyError::Invalid(format!("sequence {tag}: empty prompt")));
        }
        let context = self.decoder.cfg.max_position_embeddings;
        if prompt.len() + params.max_tokens > context {
            return Err(PolicyError::Invalid(format!(
                "sequence {tag}: prompt ({} tokens) plus max_tokens ({}) exceeds the model's context ({context})",
                prompt.len(),
                params.max_tokens
            )));
        }
        if params.max_tokens == 0 {
            self.ended.push(Completion { prompt_index: tag, token_ids: vec![], logprobs: vec![], text: String::new(), finish_reason: FinishReason::Length });
        } else {
            self.waiting.push_back(Waiting { tag, prompt, params, own_adapters });
        }
        Ok(())
    }

    /// Whether nothing is left to sample or to hand back.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.live.is_empty() && self.ended.is_empty()
    }

    /// One decoding step: reads the new sequences' prompts and every other sequence's last token, samples a
    /// token for each (drawing in the order of their tags), and returns the sequences that ended.
    /// `on_token(tag, id, logprob)` hears every token as it is picked and may cancel its sequence. With
    /// `prefixes`, prompts start from cached prefixes and ended sequences are cached (see the module's page).
    pub fn step(
        &mut self,
        draws: &mut Draws,
        on_token: &mut dyn FnMut(usize, u32, f32) -> Heard,
        mut prefixes: Option<&mut PrefixCache>,
    ) -> Result<Vec<Completion>> {
        let mut out = std::mem::take(&mut self.ended);
        let mut counts = TokenCounts::default();
        if !self.waiting.is_empty() {
            self.join(&mut counts, prefixes.as_deref_mut())?;
        }
        if self.live.is_empty() {
            return Ok(out);
        }
        // What each sequence reads: a decoding one its last token; prompts what the step's tokens leave,
        // the shortest rest first, so a short prompt is not queued behind a long one's chunks.
        let decoding = self.live.iter().filter(|l| !l.ids.is_empty()).count();
        let mut budget = self.max_step_tokens.saturating_sub(decoding);
        let mut reads: Vec<usize> = self.live.iter().map(|l| if l.ids.is_empty() { 0 } else { l.feed.len() }).collect();
        let mut prompts: Vec<usize> = (0..self.live.len()).filter(|&r| self.live[r].ids.is_empty()).collect();
        prompts.sort_by_key(|&r| self.live[r].feed.len());
        for r in prompts {
            reads[r] = self.live[r].feed.len().min(budget);
            budget -= reads[r];
        }
        let rows: Vec<usize> = (0..self.live.len()).filter(|&r| reads[r] > 0).collect();
        let tokens: Vec<u32> = rows.iter().flat_map(|&r| self.live[r].feed[..reads[r]].iter().copied()).collect();
        let news: Vec<usize> = rows.iter().map(|&r| reads[r]).collect();
        let prompt_tokens: usize = rows.iter().filter(|&&r| self.live[r].ids.is_empty()).map(|&r| reads[r]).sum();
        counts.prefilled += prompt_tokens;
        let mut kvs: Vec<SequenceKv> = rows.iter().map(|&r| std::mem::take(&mut self.live[r].kv)).collect();
        let logits = {
            let adapters: Vec<Option<&AdapterSet>> = rows.iter().map(|&r| self.live[r].own_adapters.as_deref().or(self.adapters)).collect();
            let mut distinct: Vec<Option<*const AdapterSet>> = adapters.iter().map(|a| a.map(std::ptr::from_ref)).collect();
            distinct.sort();
            distinct.dedup();
            self.last_step = StepShape { sequences: rows.len(), tokens: tokens.len(), prompt_tokens, prompts_unfinished: 0, adapters: distinct.len() };
            let clock = std::time::Instant::now();
            let forward = in_pool(|| self.decoder.forward_rows_each(&tokens, &news, &mut kvs, &adapters));
            counts.steps += 1;
            counts.forward_us += clock.elapsed().as_micros() as u64;
            forward
        };
        // A sequence whose prompt is not all read yet gets no token this step.
        let mut row_logits: Vec<Option<Vec<f32>>> = vec![None; self.live.len()];
        let logits = logits.and_then(|l| l.to_dtype(candle_core::DType::F32)?.to_vec2::<f32>());
        let mut logits = match logits {
            Ok(l) => l.into_iter(),
            Err(e) => {
                // The caches taken for the forward are gone with it: the batch cannot go on.
                self.live.clear();
                return Err(e.into());
            }
        };
        for (&r, kv) in rows.iter().zip(kvs) {
            let l = &mut self.live[r];
            l.kv = kv;
            l.feed.drain(..reads[r]);
            let row = logits.next().ok_or_else(|| PolicyError::Invalid("the forward returned fewer rows than sequences".into()))?;
            if l.feed.is_empty() {
                row_logits[r] = Some(row);
            } else {
                self.last_step.prompts_unfinished += 1;
            }
        }
        // Followers fork the cache their leader has just finished reading, and start from the same logits.
        let mut forked = Vec::new();
        for (r, l) in self.live.iter_mut().enumerate() {
            if row_logits[r].is_none() {
                continue;
            }
            for f in std::mem::take(&mut l.followers) {
                let kv = l.kv.fork()?;
                forked.push((
                    Live {
                        tag: f.tag,
                        prompt: f.prompt,
                        params: f.params,
                        own_adapters: f.own_adapters,
                        kv,
                        feed: vec![],
                        ids: vec![],
                        logprobs: vec![],
                        followers: vec![],
                    },
                    r,
                ));
            }
        }
        for (l, r) in forked {
            row_logits.push(row_logits[r].clone());
            self.live.push(l);
        }
        let mut order: Vec<usize> = (0..self.live.len()).collect();
        order.sort_by_key(|&r| self.live[r].tag);
        let mut ended = vec![false; self.live.len()];
        for &r in &order {
            let Some(row) = row_logits[r].as_ref() else { continue };
            let l = &mut self.live[r];
            // Penalties change what is picked; the log-prob kept is still the model's own.
            let adjusted = l.params.penalises().then(|| penalised(row, &l.ids, &l.params));
            let picked_from = adjusted.as_deref().unwrap_or(row);
            let id = match draws {
                Draws::Shared(rng) => pick(picked_from, &l.params, rng),
                Draws::PerRow(rngs) => {
                    let rng = rngs.get_mut(l.tag).ok_or_else(|| PolicyError::Invalid(format!("no random stream for sequence {}", l.tag)))?;
                    pick(picked_from, &l.params, rng)
                }
            };
            let lp = row[id as usize] - logsumexp(row);
            l.ids.push(id);
            l.logprobs.push(lp);
            l.feed = vec![id];
            counts.sampled += 1;
            let mut done = None;
            if self.tokenizer.eos_ids.contains(&id) {
                done = Some(FinishReason::Eos);
            } else if !l.params.stop.is_empty() {
                let text = self.tokenizer.decode(&l.ids)?;
                if let Some(s) = l.params.stop.iter().find(|s| text.contains(s.as_str())) {
                    done = Some(FinishReason::Stop(s.clone()));
                }
            }
            if done.is_none() && l.ids.len() >= l.params.max_tokens {
                done = Some(FinishReason::Length);
            }
            if on_token(l.tag, id, lp) == Heard::Cancel && done.is_none() {
                done = Some(FinishReason::Cancelled);
            }
            let Some(reason) = done else { continue };
            ended[r] = true;
            // What it read (its prompt and every token but the last) serves the conversation's next turn.
            if let Some(pc) = prefixes.as_deref_mut().filter(|_| l.own_adapters.is_none()) {
                let read: Vec<u32> = l.prompt.iter().chain(&l.ids[..l.ids.len() - 1]).copied().collect();
                if l.kv.len() != read.len() {
                    return Err(PolicyError::Invalid(format!("sequence {}: {} cached positions for {} tokens read", l.tag, l.kv.len(), read.len())));
                }
                let len = read.len();
                pc.insert(read, std::mem::take(&mut l.kv).into_segments(len)?)?;
            }
            let text_ids = if reason == FinishReason::Eos { &l.ids[..l.ids.len() - 1] } else { &l.ids[..] };
            out.push(Completion {
                prompt_index: l.tag,
                text: self.tokenizer.decode(text_ids)?,
                token_ids: std::mem::take(&mut l.ids),
                logprobs: std::mem::take(&mut l.logprobs),
                finish_reason: reason,
            });
        }
        let mut r = 0;
        self.live.retain(|_| {
            r += 1;
            !ended[r - 1]
        });
        if let Some(pc) = prefixes {
            pc.count(counts);
        }
        Ok(out)
    }

    /// Moves the waiting sequences into the batch: one live sequence per distinct prompt (the others follow
    /// it), each starting from its longest cached prefix.
    fn join(&mut self, counts: &mut TokenCounts, mut prefixes: Option<&mut PrefixCache>) -> Result<()> {
        let room = self.max_live.saturating_sub(self.live.len());
        let waiting: Vec<Waiting> = self.waiting.drain(..room.min(self.waiting.len())).collect();
        if waiting.is_empty() {
            return Ok(());
        }
        // Every prompt token not read in this step's forwards came from a shared prefix.
        let mut reused = waiting.iter().map(|w| w.prompt.len()).sum::<usize>();
        let mut leaders: Vec<Live> = Vec::new();
        for w in waiting {
            let same_adapters = |l: &Live| match (&l.own_adapters, &w.own_adapters) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            };
            match leaders.iter_mut().find(|l| l.prompt == w.prompt && same_adapters(l)) {
                Some(l) => l.followers.push(w),
                None => leaders.push(Live {
                    tag: w.tag,
                    prompt: w.prompt,
                    params: w.params,
                    own_adapters: w.own_adapters,
                    kv: SequenceKv::default(),
                    feed: vec![],
                    ids: vec![],
                    logprobs: vec![],
                    followers: vec![],
                }),
            }
        }
        // The cache holds the batch's own adapters' keys and values (it is keyed by tokens alone): a sequence
        // with adapters of its own neither reads nor fills it.
        let cached: Vec<&Live> = leaders.iter().filter(|l| l.own_adapters.is_none()).collect();
        if let (Some(pc), Some(first)) = (prefixes.as_deref_mut(), cached.first()) {
            let shared = cached.iter().map(|l| common_prefix(&l.prompt, &first.prompt).min(l.prompt.len() - 1)).min().unwrap_or(0);
            let short_of_it = cached.iter().filter(|l| pc.longest(&l.prompt, l.prompt.len() - 1).map_or(0, |m| m.len) < shared).count();
            if cached.len() > 1 && short_of_it > 1 {
                let head = &first.prompt[..shared];
                let from = pc.longest(head, shared - 1);
                let mut kv = [SequenceKv::starting_from(from.map(|m| pc.segments(m)).transpose()?.unwrap_or_default())];
                let done = from.map_or(0, |m| m.len);
                in_pool(|| self.decoder.hidden_rows(&head[done..], &[shared - done], &mut kv, self.adapters))?;
                counts.prefilled += shared - done;
                reused -= shared - done;
                let [kv] = kv;
                pc.insert(head.to_vec(), kv.into_segments(shared)?)?;
            }
        }
        for mut l in leaders {
            let cache = prefixes.as_deref_mut().filter(|_| l.own_adapters.is_none());
            let from = cache.and_then(|pc| pc.longest(&l.prompt, l.prompt.len() - 1).map(|m| (pc.segments(m), m.len)));
            let (segments, done) = match from {
                Some((s, len)) => (s?, len),
                None => (Vec::new(), 0),
            };
            l.kv = SequenceKv::starting_from(segments);
            l.feed = l.prompt[done..].to_vec();
            reused -= l.feed.len();
            self.live.push(l);
        }
        counts.reused += reused;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiny::tiny_policy;
    use crate::Arch;
    use rand::SeedableRng;

    fn greedy(max_tokens: usize) -> SamplingParams {
        SamplingParams { temperature: 0.0, max_tokens, ..Default::default() }
    }

    fn run(batch: &mut ContinuousBatch, most_live: &mut usize) -> Vec<Completion> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let mut out = Vec::new();
        while !batch.is_empty() {
            out.extend(batch.step(&mut Draws::Shared(&mut rng), &mut |_, _, _| Heard::Continue, None).unwrap());
            *most_live = (*most_live).max(batch.live.len());
        }
        out
    }

    /// Five sequences of different lengths through two slots: each ended one's slot goes to the next waiting,
    /// and every sequence gets the tokens it gets alone.
    #[test]
    fn an_ended_sequence_gives_its_slot_to_the_next_waiting_one() {
        let p = tiny_policy(Arch::Qwen2, 3).unwrap();
        let prompts: Vec<Vec<u32>> = (0..5).map(|i| (0..4 + 3 * i).map(|t| 40 + ((t * 7 + i) % 50) as u32).collect()).collect();
        let mut alone = Vec::new();
        for (i, prompt) in prompts.iter().enumerate() {
            let mut b = ContinuousBatch::new(&p.decoder, &p.tokenizer, None);
            b.admit(i, prompt.clone(), greedy(2 + 2 * i)).unwrap();
            alone.extend(run(&mut b, &mut 0));
        }
        let mut b = ContinuousBatch::new(&p.decoder, &p.tokenizer, None).with_max_live(2);
        for (i, prompt) in prompts.iter().enumerate() {
            b.admit(i, prompt.clone(), greedy(2 + 2 * i)).unwrap();
        }
        let mut most_live = 0;
        let together = run(&mut b, &mut most_live);
        assert_eq!(most_live, 2);
        assert_eq!(together.len(), 5);
        for c in &together {
            let a = &alone[c.prompt_index];
            assert_eq!(c.token_ids, a.token_ids, "sequence {}", c.prompt_index);
            for (x, y) in c.logprobs.iter().zip(&a.logprobs) {
                assert!((x - y).abs() < 1e-4, "sequence {}: {x} batched, {y} alone", c.prompt_index);
            }
        }
    }

    fn assert_alike(together: &[Completion], alone: &[Completion]) {
        assert_eq!(together.len(), alone.len());
        for c in together {
            let a = alone.iter().find(|a| a.prompt_index == c.prompt_index).unwrap();
            assert_eq!(c.token_ids, a.token_ids, "sequence {}", c.prompt_index);
            for (x, y) in c.logprobs.iter().zip(&a.logprobs) {
                assert!((x - y).abs() < 1e-4, "sequence {}: {x} batched, {y} alone", c.prompt_index);
            }
        }
    }

    /// A long prompt read 8 tokens a step while two short sequences decode beside it: the short ones are
    /// done before the long prompt is read, and every sequence gets the tokens it gets alone.
    #[test]
    fn a_long_prompt_is_read_in_chunks_while_the_others_decode() {
        let p = tiny_policy(Arch::Llama, 3).unwrap();
        let long: Vec<u32> = (0..60).map(|t| 40 + (t * 11 % 90) as u32).collect();
        let prompts = [vec![50, 51, 52], long, vec![60, 61, 62, 63]];
        let mut alone = Vec::new();
        for (i, prompt) in prompts.iter().enumerate() {
            let mut b = ContinuousBatch::new(&p.decoder, &p.tokenizer, None);
            b.admit(i, prompt.clone(), greedy(4)).unwrap();
            alone.extend(run(&mut b, &mut 0));
        }
        let mut b = ContinuousBatch::new(&p.decoder, &p.tokenizer, None).with_step_tokens(8);
        for (i, prompt) in prompts.iter().enumerate() {
            b.admit(i, prompt.clone(), greedy(4)).unwrap();
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let (mut together, mut shapes) = (Vec::new(), Vec::new());
        while !b.is_empty() {
            let ended = b.step(&mut Draws::Shared(&mut rng), &mut |_, _, _| Heard::Continue, None).unwrap();
            shapes.push(b.last_step().clone());
            together.extend(ended.into_iter().map(|c| (c, shapes.len())));
        }
        assert!(shapes.iter().all(|s| s.tokens <= 8), "{shapes:?}");
        let step_of = |i: usize| together.iter().find(|(c, _)| c.prompt_index == i).unwrap().1;
        assert!(step_of(0) < step_of(1) && step_of(2) < step_of(1), "the short sequences waited for the long prompt: {shapes:?}");
        assert_eq!((shapes[0].sequences, shapes[0].prompt_tokens), (3, 8), "both short prompts are read in the first step: {shapes:?}");
        // The long prompt took several steps, in some of which the others decoded.
        assert!(shapes.iter().filter(|s| s.prompts_unfinished == 1 && s.sequences > 1).count() >= 2, "{shapes:?}");
        let together: Vec<Completion> = together.into_iter().map(|(c, _)| c).collect();
        assert_alike(&together, &alone);
    }

    /// Sequences of two adapters and of the base model in one batch decode in the same forwards, and each
    /// gets the tokens it gets in a batch of its own adapters.
    #[test]
    fn sequences_of_different_adapters_decode_in_one_forward() {
        let p = tiny_policy(Arch::Qwen2, 3).unwrap();
        let lora = crate::LoraConfig { rank: 4, alpha: 8.0, targets: crate::Target::ALL.to_vec(), dual: false };
        let sets: Vec<Arc<AdapterSet>> = (0..2)
            .map(|seed| {
                let a = AdapterSet::new(lora.clone(), p.config(), p.device(), seed).unwrap();
                a.randomize_b(0.2, seed).unwrap();
                Arc::new(a)
            })
            .collect();
        let prompt: Vec<u32> = (0..9).map(|t| 40 + t * 5).collect();
        let params = SamplingParams { temperature: 1.0, max_tokens: 6, ..Default::default() };
        let draw = |b: &mut ContinuousBatch, shapes: &mut Vec<StepShape>| {
            let mut rngs: Vec<rand::rngs::StdRng> = (0..3).map(rand::rngs::StdRng::seed_from_u64).collect();
            let mut out = Vec::new();
            while !b.is_empty() {
                out.extend(b.step(&mut Draws::PerRow(&mut rngs), &mut |_, _, _| Heard::Continue, None).unwrap());
                shapes.push(b.last_step().clone());
            }
            out
        };
        let mut alone = Vec::new();
        for i in 0..3 {
            let own = sets.get(i).map(|a| &**a);
            let mut b = ContinuousBatch::new(&p.decoder, &p.tokenizer, own);
            b.admit(i, prompt.clone(), params.clone()).unwrap();
            alone.extend(draw(&mut b, &mut vec![]));
        }
        let mut b = ContinuousBatch::new(&p.decoder, &p.tokenizer, None);
        b.admit_with_adapters(0, prompt.clone(), params.clone(), sets[0].clone()).unwrap();
        b.admit_with_adapters(1, prompt.clone(), params.clone(), sets[1].clone()).unwrap();
        b.admit(2, prompt.clone(), params.clone()).unwrap();
        let mut shapes = Vec::new();
        let together = draw(&mut b, &mut shapes);
        // One prompt, three models: not forked from one another, read and decoded side by side.
        assert_eq!((shapes[0].sequences, shapes[0].adapters), (3, 3), "{shapes:?}");
        assert!(shapes.iter().all(|s| s.adapters == s.sequences), "{shapes:?}");
        assert_alike(&together, &alone);
        assert_ne!(alone[0].token_ids, alone[2].token_ids, "the adapters change the samples");
    }

    #[test]
    fn a_prompt_past_the_context_is_refused_when_admitted() {
        let p = tiny_policy(Arch::Llama, 3).unwrap();
        let mut b = ContinuousBatch::new(&p.decoder, &p.tokenizer, None);
        let context = p.decoder.cfg.max_position_embeddings;
        let e = b.admit(7, vec![1; context], greedy(1)).unwrap_err().to_string();
        assert!(e.contains("sequence 7") && e.contains("context"), "{e}");
        assert!(b.admit(0, vec![], greedy(1)).is_err());
        assert!(b.is_empty());
    }
}
