//! Sampling from an external OpenAI-compatible server while training stays in candle: the server's text
//! replies are tokenised once, here, and the conversation's tokens are extended exactly as for local
//! sampling. The sampled log-probs are unknown (zero), so the update is on-policy only while the server
//! serves the same weights (push the adapters to it, e.g. vLLM's LoRA loading, after each checkpoint).

use agentrt_policy::Policy;
use agentrt_rollout::{Conversation, Finish, LocalPolicy, OpenAiPolicy, Reply, RolloutError, TurnPolicy};
use async_trait::async_trait;

pub struct ExternalSampler<'a> {
    pub remote: OpenAiPolicy,
    pub tokens: LocalPolicy<'a>,
    pub policy: &'a Policy,
}

#[async_trait]
impl TurnPolicy for ExternalSampler<'_> {
    fn name(&self) -> String {
        self.remote.name()
    }

    fn begin(&self, c: &mut Conversation) -> Result<(), RolloutError> {
        self.tokens.begin(c)
    }

    async fn reply(&self, conversations: &[&Conversation]) -> Result<Vec<Reply>, RolloutError> {
        let mut replies = self.remote.reply(conversations).await?;
        let eos = *self.policy.tokenizer.eos_ids.first().ok_or_else(|| RolloutError::Invalid("the tokenizer has no end-of-turn token".into()))?;
        for r in &mut replies {
            r.token_ids = self.policy.tokenizer.encode(&r.text)?;
            if r.finish == Finish::EndOfTurn {
                r.token_ids.push(eos);
            }
            r.logprobs = vec![0.0; r.token_ids.len()];
        }
        Ok(replies)
    }

    fn push_reply(&self, c: &mut Conversation, reply: &Reply) -> Result<(), RolloutError> {
        self.tokens.push_reply(c, reply)
    }

    fn push_tool_turn(&self, c: &mut Conversation, output: &str) -> Result<(), RolloutError> {
        self.tokens.push_tool_turn(c, output)
    }
}
