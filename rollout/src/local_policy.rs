//! The candle policy as a [`TurnPolicy`]: samples a batch of replies and keeps the exact token ids.
//!
//! Nothing is ever re-tokenised: the prompt is tokenised once, the model's ids are appended as sampled, and
//! a tool turn appends only the ids of the new text the chat template puts after the reply (its
//! end-of-turn glue, the tool message and the next generation prompt). That text is found by rendering
//! the conversation with and without the new turn; a template for which that is not a pure suffix is an
//! error, never a silent re-tokenisation. The rendering itself is [`TraceBuilder`]'s, which `agentrt sft`
//! shares.

use crate::conversation::{Conversation, TokenTrace};
use crate::error::RolloutError;
use crate::trace::TraceBuilder;
use crate::turn_policy::{Finish, Reply, ReplyStream, TurnPolicy};
use agentrt_policy::prefix_cache::DEFAULT_PREFIX_CACHE_BYTES;
use agentrt_policy::rand::rngs::StdRng;
use agentrt_policy::rand::SeedableRng;
use agentrt_policy::sampling::{Draws, Heard};
use agentrt_policy::{Completion, ContinuousBatch, FinishReason, Message, Policy, PrefixCache, SamplingParams, TokenCounts};
use async_trait::async_trait;
use std::sync::Mutex;

/// Samples from a loaded [`Policy`] (with whatever adapters and scales it has).
///
/// Every turn starts from the keys and values of the longest prefix read before (the system prompt and
/// demonstration, the question of a group's rollouts, an episode's earlier turns): see [`PrefixCache`]. Those
/// depend on the adapters, so a `LocalPolicy` must not outlive an update of them (the trainer makes one per
/// sampling pass).
pub struct LocalPolicy<'a> {
    policy: &'a Policy,
    params: SamplingParams,
    /// How a reply that follows a tool's output is sampled, where it differs from `params`.
    after_tool: Option<SamplingParams>,
    /// Seeds [`LocalPolicy::reply`]'s one stream and each conversation's own stream in [`LocalPolicy::stream`].
    seed: u64,
    rng: Mutex<StdRng>,
    prefixes: Mutex<PrefixCache>,
}

impl<'a> LocalPolicy<'a> {
    /// `params.n` is ignored (one reply per conversation: repeat a question for several rollouts).
    pub fn new(policy: &'a Policy, params: SamplingParams, seed: u64) -> LocalPolicy<'a> {
        LocalPolicy {
            policy,
            params: SamplingParams { n: 1, ..params },
            after_tool: None,
            seed,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            prefixes: Mutex::new(PrefixCache::new(DEFAULT_PREFIX_CACHE_BYTES)),
        }
    }

    /// Replies that follow a tool's output sampled under `params` instead (`None`: as every other reply):
    /// a temperature per turn kind, the answer explored while the program is not.
    pub fn with_after_tool(mut self, params: Option<SamplingParams>) -> LocalPolicy<'a> {
        self.after_tool = params.map(|p| SamplingParams { n: 1, ..p });
        self
    }

    /// How `c`'s next reply is sampled: after a tool's output, as [`LocalPolicy::with_after_tool`] set.
    fn params_for(&self, c: &Conversation) -> &SamplingParams {
        match &self.after_tool {
            Some(after) if c.messages.last().is_some_and(|m| m.role == "tool") => after,
            _ => &self.params,
        }
    }

    fn trace<'c>(&self, c: &'c mut Conversation) -> Result<&'c mut TokenTrace, RolloutError> {
        c.tokens.as_mut().ok_or_else(|| RolloutError::Invalid("a local policy's conversation has no token trace (begin() was not called)".into()))
    }
}

#[async_trait]
impl TurnPolicy for LocalPolicy<'_> {
    fn name(&self) -> String {
        self.policy.base_name.clone()
    }

    fn begin(&self, c: &mut Conversation) -> Result<(), RolloutError> {
        c.tokens = Some(TraceBuilder::new(self.policy).begin(&c.messages)?);
        Ok(())
    }

    async fn reply(&self, conversations: &[&Conversation]) -> Result<Vec<Reply>, RolloutError> {
        let prompts = Conversation::trace_ids(conversations)?;
        let mut rng = self.rng.lock().expect("rng lock");
        let mut prefixes = self.prefixes.lock().expect("prefix cache lock");
        let mut replies: Vec<Option<Reply>> = vec![None; prompts.len()];
        // One batch per way of sampling (one, unless replies after a tool's output sample otherwise).
        let mut kinds: Vec<(&SamplingParams, Vec<usize>)> = Vec::new();
        for (i, c) in conversations.iter().enumerate() {
            let params = self.params_for(c);
            match kinds.iter_mut().find(|(p, _)| std::ptr::eq(*p, params)) {
                Some((_, members)) => members.push(i),
                None => kinds.push((params, vec![i])),
            }
        }
        for (params, members) in kinds {
            let batch: Vec<Vec<u32>> = members.iter().map(|&i| prompts[i].clone()).collect();
            for c in self.policy.sample_with_prefixes(&batch, params, &mut *rng, &mut prefixes)? {
                let slot = members
                    .get(c.prompt_index)
                    .and_then(|&i| replies.get_mut(i))
                    .ok_or_else(|| RolloutError::Invalid(format!("completion for prompt {} of {}", c.prompt_index, batch.len())))?;
                *slot = Some(reply_of(c)?);
            }
        }
        replies.into_iter().enumerate().map(|(i, r)| r.ok_or_else(|| RolloutError::Invalid(format!("no completion for prompt {i}")))).collect()
    }

    /// Continuous batching: a conversation joins the running batch at the next decoding step after it is
    /// submitted, and its reply comes back the step it ends, while the others go on. Each conversation
    /// (its tag: an episode) draws from a stream of its own, seeded by the policy's seed and the tag, so
    /// its tokens do not depend on which others are sampled beside it or when they join.
    fn stream(&self) -> Box<dyn ReplyStream + '_> {
        let p = self.policy;
        let batch = ContinuousBatch::new(&p.decoder, &p.tokenizer, p.adapters.as_ref()).with_max_live(self.params.max_batch);
        Box::new(LocalStream { local: self, batch, rngs: Vec::new() })
    }

    fn token_counts(&self) -> Option<TokenCounts> {
        Some(self.prefixes.lock().expect("prefix cache lock").counts())
    }

    fn push_reply(&self, c: &mut Conversation, reply: &Reply) -> Result<(), RolloutError> {
        self.trace(c)?.push_model(&reply.token_ids, &reply.logprobs);
        c.messages.push(Message::assistant(reply.text.clone()));
        c.replies += 1;
        c.last_reply_closed = reply.finish == Finish::EndOfTurn;
        Ok(())
    }

    fn push_tool_turn(&self, c: &mut Conversation, output: &str) -> Result<(), RolloutError> {
        // The reply's ids (and its end-of-turn token, when the model wrote it) are in the trace already; the
        // tool turn goes in as the text the template adds after the reply.
        let tool = Message::new("tool", output);
        let closed = c.last_reply_closed;
        let trace =
            c.tokens.as_mut().ok_or_else(|| RolloutError::Invalid("a local policy's conversation has no token trace (begin() was not called)".into()))?;
        TraceBuilder::new(self.policy).push_turns(trace, &c.messages, std::slice::from_ref(&tool), closed)?;
        c.messages.push(tool);
        Ok(())
    }
}

fn reply_of(c: Completion) -> Result<Reply, RolloutError> {
    let finish = match c.finish_reason {
        FinishReason::Eos => Finish::EndOfTurn,
        FinishReason::Stop(_) => Finish::Stop,
        FinishReason::Length => Finish::Length,
        FinishReason::Cancelled => return Err(RolloutError::Invalid("a local completion was cancelled, which only a server's observer does".into())),
    };
    Ok(Reply { text: c.text, token_ids: c.token_ids, logprobs: c.logprobs, finish, counted_tokens: None })
}

/// The local policy's [`ReplyStream`]: one [`ContinuousBatch`] for a whole rollout.
struct LocalStream<'s, 'a> {
    local: &'s LocalPolicy<'a>,
    batch: ContinuousBatch<'a>,
    /// Conversation `tag`'s random stream at index `tag`, made when it is first submitted and kept across
    /// its turns.
    rngs: Vec<StdRng>,
}

/// The seed of conversation `tag`'s stream under a policy seeded `seed`.
fn conversation_seed(seed: u64, tag: usize) -> u64 {
    seed ^ (tag as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[async_trait]
impl ReplyStream for LocalStream<'_, '_> {
    fn submit(&mut self, tag: usize, conversation: &Conversation) -> Result<(), RolloutError> {
        let ids = Conversation::trace_ids(&[conversation])?.remove(0);
        while self.rngs.len() <= tag {
            self.rngs.push(StdRng::seed_from_u64(conversation_seed(self.local.seed, self.rngs.len())));
        }
        Ok(self.batch.admit(tag, ids, self.local.params_for(conversation).clone())?)
    }

    async fn step(&mut self) -> Result<Vec<(usize, Reply)>, RolloutError> {
        let mut prefixes = self.local.prefixes.lock().expect("prefix cache lock");
        let done = self.batch.step(&mut Draws::PerRow(&mut self.rngs), &mut |_, _, _| Heard::Continue, Some(&mut prefixes))?;
        done.into_iter().map(|c| Ok((c.prompt_index, reply_of(c)?))).collect()
    }

    fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_policy::tiny::tiny_policy;

    /// The byte-level test tokenizer has no merges, so re-encoding the rendered conversation must give exactly
    /// the ids the trace built turn by turn: the trace is the conversation the model saw, nothing re-tokenised.
    #[tokio::test]
    async fn the_trace_is_the_rendered_conversation_and_masks_only_model_tokens() {
        let policy = tiny_policy(agentrt_policy::Arch::Llama, 5).unwrap();
        let lp = LocalPolicy::new(&policy, SamplingParams { max_tokens: 6, ..SamplingParams::default() }, 1);
        let mut c = Conversation::new("q", vec![Message::system("S"), Message::user("question?")]);
        lp.begin(&mut c).unwrap();
        let replies = lp.reply(&[&c]).await.unwrap();
        let reply = &replies[0];
        lp.push_reply(&mut c, reply).unwrap();
        lp.push_tool_turn(&mut c, "tool output").unwrap();
        let t = c.tokens.as_ref().unwrap();
        let mut closed = c.messages.clone();
        closed[2].content = policy.tokenizer.decode(&reply.token_ids).unwrap().trim_end_matches("<|im_end|>").to_string();
        let expected = policy.tokenizer.encode(&policy.template.render(&closed, true).unwrap()).unwrap();
        assert_eq!(t.ids, expected);
        assert_eq!(t.model_tokens(), reply.token_ids.len());
        let first = t.model_mask.iter().position(|&m| m).unwrap();
        assert_eq!(&t.ids[first..first + reply.token_ids.len()], reply.token_ids.as_slice());
        assert!(t.model_mask[first..first + reply.token_ids.len()].iter().all(|&m| m));
        assert_eq!(t.sampled_logprobs[first..first + reply.token_ids.len()], reply.logprobs[..]);
    }

    /// The stream lets a conversation rejoin the running batch with its tool turn while the others are still
    /// decoding their first replies; every sampled log-prob is still the training forward's over the trace.
    #[tokio::test]
    async fn a_conversation_that_rejoins_mid_batch_keeps_exact_log_probs() {
        let policy = tiny_policy(agentrt_policy::Arch::Qwen2, 5).unwrap();
        let lp = LocalPolicy::new(&policy, SamplingParams { max_tokens: 10, ..SamplingParams::default() }, 3);
        let mut convs: Vec<Conversation> =
            (0..3).map(|i| Conversation::new(format!("q{i}"), vec![Message::system("S"), Message::user(format!("question {i}?"))])).collect();
        let mut stream = lp.stream();
        for (i, c) in convs.iter_mut().enumerate() {
            lp.begin(c).unwrap();
            stream.submit(i, c).unwrap();
        }
        let mut steps = 0;
        while !stream.is_empty() {
            steps += 1;
            for (i, reply) in stream.step().await.unwrap() {
                lp.push_reply(&mut convs[i], &reply).unwrap();
                if convs[i].replies == 1 {
                    lp.push_tool_turn(&mut convs[i], &format!("output {i}")).unwrap();
                    stream.submit(i, &convs[i]).unwrap();
                }
            }
        }
        assert!(steps <= 20, "two replies of at most 10 tokens each took {steps} steps");
        for c in &convs {
            assert_eq!(c.replies, 2);
            let t = c.tokens.as_ref().unwrap();
            let lps = policy.token_logprobs(std::slice::from_ref(&t.ids), &[]).unwrap().squeeze(0).unwrap().to_vec1::<f32>().unwrap();
            for p in (1..t.ids.len()).filter(|&p| t.model_mask[p]) {
                assert!(
                    (lps[p - 1] - t.sampled_logprobs[p]).abs() < 1e-4,
                    "{}: token {p} sampled at {}, recomputed {}",
                    c.question_id,
                    t.sampled_logprobs[p],
                    lps[p - 1]
                );
            }
        }
    }

    /// A temperature per turn kind: with greedy opening replies and hot ones after a tool's output
    /// (`with_after_tool`), two seeds write the same opening and different replies after the tool, by
    /// `reply` and by the stream alike; without `with_after_tool` both replies are greedy and equal.
    #[tokio::test]
    async fn replies_after_a_tool_output_sample_as_with_after_tool_says() {
        /// (the opening reply's ids, the ids of the reply after the tool) under `seed`.
        async fn play(policy: &Policy, seed: u64, after: Option<SamplingParams>, streamed: bool) -> (Vec<u32>, Vec<u32>) {
            let greedy = SamplingParams { max_tokens: 12, temperature: 0.0, ..SamplingParams::default() };
            let lp = LocalPolicy::new(policy, greedy, seed).with_after_tool(after);
            let mut c = Conversation::new("q", vec![Message::system("S"), Message::user("question?")]);
            lp.begin(&mut c).unwrap();
            let opening = lp.reply(&[&c]).await.unwrap().remove(0);
            lp.push_reply(&mut c, &opening).unwrap();
            lp.push_tool_turn(&mut c, "the same tool output").unwrap();
            let next = if streamed {
                let mut stream = lp.stream();
                stream.submit(0, &c).unwrap();
                let mut got = None;
                while !stream.is_empty() {
                    got = stream.step().await.unwrap().pop().map(|(_, r)| r).or(got);
                }
                got.expect("a reply")
            } else {
                lp.reply(&[&c]).await.unwrap().remove(0)
            };
            (opening.token_ids, next.token_ids)
        }
        let policy = tiny_policy(agentrt_policy::Arch::Qwen2, 5).unwrap();
        let hot = SamplingParams { max_tokens: 12, temperature: 8.0, top_k: 0, top_p: 1.0, ..SamplingParams::default() };
        for streamed in [false, true] {
            let (a, b) = (play(&policy, 1, Some(hot.clone()), streamed).await, play(&policy, 2, Some(hot.clone()), streamed).await);
            assert_eq!(a.0, b.0, "greedy openings (streamed: {streamed})");
            assert_ne!(a.1, b.1, "hot replies after the tool (streamed: {streamed})");
            assert_eq!(play(&policy, 1, None, streamed).await, play(&policy, 2, None, streamed).await, "all greedy (streamed: {streamed})");
        }
    }

    /// Each conversation draws from its own seeded stream: sampled alone or beside others, at a temperature
    /// that flattens the tiny model's peaked distribution, an episode writes the same tokens; another seed
    /// writes others.
    #[test]
    fn a_conversation_samples_the_same_tokens_alone_or_beside_others() {
        let policy = tiny_policy(agentrt_policy::Arch::Qwen2, 5).unwrap();
        let params = SamplingParams { max_tokens: 12, temperature: 8.0, top_k: 0, top_p: 1.0, ..SamplingParams::default() };
        let sample = |seed: u64, n: usize| {
            let lp = LocalPolicy::new(&policy, params.clone(), seed);
            let mut convs: Vec<Conversation> =
                (0..n).map(|i| Conversation::new(format!("q{i}"), vec![Message::system("S"), Message::user(format!("question {i}?"))])).collect();
            let mut stream = lp.stream();
            for (i, c) in convs.iter_mut().enumerate() {
                lp.begin(c).unwrap();
                stream.submit(i, c).unwrap();
            }
            let mut out = vec![Vec::new(); n];
            while !stream.is_empty() {
                for (i, reply) in futures::executor::block_on(stream.step()).unwrap() {
                    out[i] = reply.token_ids;
                }
            }
            out
        };
        let alone = sample(9, 1).remove(0);
        assert!(alone.iter().any(|&t| t != alone[0]), "one token over and over tells nothing: {alone:?}");
        let beside = sample(9, 4);
        assert_eq!(alone, beside[0], "the first episode's tokens changed with the others beside it");
        assert_ne!(beside[1], beside[2], "two episodes drew the same tokens");
        assert_ne!(alone, sample(10, 1).remove(0), "another seed drew the same tokens");
    }
}
