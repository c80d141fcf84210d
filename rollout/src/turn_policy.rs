//! What writes the replies: the trait every policy (local model, remote server, baseline) implements.

use crate::conversation::Conversation;
use crate::error::RolloutError;
use agentrt_policy::Message;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Why a reply ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// The model ended its turn.
    EndOfTurn,
    /// A stop string was reached.
    Stop,
    /// The token budget ran out.
    Length,
}

/// One reply; the ids and log-probs are present when the policy samples tokens itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The reply's text, the assistant turn the conversation records.
    pub text: String,
    /// The ids the model sampled, in order (empty for text-only policies).
    pub token_ids: Vec<u32>,
    /// The sampling log-prob of each of `token_ids`.
    pub logprobs: Vec<f32>,
    /// Why the reply ended.
    pub finish: Finish,
    /// How many tokens the model sampled, as a server counted them (`usage.completion_tokens`), for a
    /// policy that gets the text without the ids; `None` where the ids are the count, or nobody counted.
    pub counted_tokens: Option<usize>,
}

impl Reply {
    /// A reply known only as text (remote and scripted policies).
    pub fn text(text: impl Into<String>) -> Reply {
        Reply { text: text.into(), token_ids: vec![], logprobs: vec![], finish: Finish::EndOfTurn, counted_tokens: None }
    }

    /// Tokens the model wrote in this reply: the server's count when it gave one, else the ids sampled (0
    /// for a policy with neither, which cannot know).
    pub fn tokens(&self) -> usize {
        self.counted_tokens.unwrap_or(self.token_ids.len())
    }
}

/// Writes replies for a batch of conversations at once (a local model samples them in one batch).
#[async_trait]
pub trait TurnPolicy: Send + Sync {
    /// A short description for logs and reports.
    fn name(&self) -> String;

    /// Called once per conversation, before its first reply (a token-level policy records the prompt's ids).
    fn begin(&self, _conversation: &mut Conversation) -> Result<(), RolloutError> {
        Ok(())
    }

    /// One reply per conversation, in order.
    async fn reply(&self, conversations: &[&Conversation]) -> Result<Vec<Reply>, RolloutError>;

    /// A stream of replies for the episode loop: conversations are submitted as they become ready for a
    /// reply, and each [`ReplyStream::step`] hands back the replies that are done. By default every step
    /// answers all the conversations submitted since the last one with one [`TurnPolicy::reply`] call; a
    /// policy that batches continuously (the local one) lets a conversation join or leave between any two
    /// decoding steps.
    fn stream(&self) -> Box<dyn ReplyStream + '_> {
        Box::new(TurnByTurn { policy: self, pending: Vec::new() })
    }

    /// What this policy's sampling has prefilled, reused from shared prefixes and sampled so far, where it
    /// reads tokens itself (a server's policy does not know).
    fn token_counts(&self) -> Option<agentrt_policy::TokenCounts> {
        None
    }

    /// Appends `reply` as the assistant's turn.
    fn push_reply(&self, conversation: &mut Conversation, reply: &Reply) -> Result<(), RolloutError> {
        conversation.messages.push(Message::assistant(reply.text.clone()));
        conversation.replies += 1;
        conversation.last_reply_closed = reply.finish == Finish::EndOfTurn;
        Ok(())
    }

    /// Appends what a program produced as a tool turn.
    fn push_tool_turn(&self, conversation: &mut Conversation, output: &str) -> Result<(), RolloutError> {
        conversation.messages.push(Message::new("tool", output));
        Ok(())
    }
}

/// Replies handed out as they are done (see [`TurnPolicy::stream`]).
#[async_trait]
pub trait ReplyStream: Send {
    /// Asks for a reply to `conversation` (as it stands now), handed back under `tag`.
    fn submit(&mut self, tag: usize, conversation: &Conversation) -> Result<(), RolloutError>;

    /// Works on the submitted conversations and returns the replies done by now, each with its tag (none
    /// when work goes on without a reply ending).
    async fn step(&mut self) -> Result<Vec<(usize, Reply)>, RolloutError>;

    /// Whether no submitted conversation is still waiting for its reply.
    fn is_empty(&self) -> bool;
}

/// The default stream: one [`TurnPolicy::reply`] call per step for everything submitted since the last.
struct TurnByTurn<'p, P: TurnPolicy + ?Sized> {
    policy: &'p P,
    pending: Vec<(usize, Conversation)>,
}

#[async_trait]
impl<P: TurnPolicy + ?Sized> ReplyStream for TurnByTurn<'_, P> {
    fn submit(&mut self, tag: usize, conversation: &Conversation) -> Result<(), RolloutError> {
        self.pending.push((tag, conversation.clone()));
        Ok(())
    }

    async fn step(&mut self) -> Result<Vec<(usize, Reply)>, RolloutError> {
        let pending = std::mem::take(&mut self.pending);
        let conversations: Vec<&Conversation> = pending.iter().map(|(_, c)| c).collect();
        let replies = self.policy.reply(&conversations).await?;
        if replies.len() != pending.len() {
            return Err(RolloutError::Invalid(format!("policy `{}` gave {} replies for {} conversations", self.policy.name(), replies.len(), pending.len())));
        }
        Ok(pending.iter().map(|(tag, _)| *tag).zip(replies).collect())
    }

    fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}
