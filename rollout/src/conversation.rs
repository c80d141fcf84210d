//! A conversation as messages and, for token-level policies, as the exact token ids the model saw.

use agentrt_policy::Message;
use serde::{Deserialize, Serialize};

/// The exact ids of a conversation and which of them the model wrote.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenTrace {
    pub ids: Vec<u32>,
    /// True on the ids the model sampled; false on the prompt, the template's glue and tool output.
    pub model_mask: Vec<bool>,
    /// The sampling log-prob of each id (0 where the model did not write it).
    pub sampled_logprobs: Vec<f32>,
}

impl TokenTrace {
    /// Appends ids the model did not write.
    pub fn push_context(&mut self, ids: &[u32]) {
        self.ids.extend_from_slice(ids);
        self.model_mask.extend(std::iter::repeat_n(false, ids.len()));
        self.sampled_logprobs.extend(std::iter::repeat_n(0.0, ids.len()));
    }

    /// Appends ids the model sampled, with their log-probs.
    pub fn push_model(&mut self, ids: &[u32], logprobs: &[f32]) {
        assert_eq!(ids.len(), logprobs.len(), "one log-prob per sampled id");
        self.ids.extend_from_slice(ids);
        self.model_mask.extend(std::iter::repeat_n(true, ids.len()));
        self.sampled_logprobs.extend_from_slice(logprobs);
    }

    /// How many ids the model wrote.
    pub fn model_tokens(&self) -> usize {
        self.model_mask.iter().filter(|&&m| m).count()
    }
}

/// One episode's dialogue so far.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// The question this conversation answers (scripted policies look their replies up by it).
    pub question_id: String,
    pub messages: Vec<Message>,
    /// Present when the policy works on tokens ([`crate::LocalPolicy`]).
    pub tokens: Option<TokenTrace>,
    /// How many replies the policy has written.
    pub replies: usize,
    /// Whether the last reply ended with the model's own end-of-turn token.
    pub last_reply_closed: bool,
}

impl Conversation {
    pub fn new(question_id: impl Into<String>, messages: Vec<Message>) -> Conversation {
        Conversation { question_id: question_id.into(), messages, tokens: None, replies: 0, last_reply_closed: true }
    }

    /// The text of the last tool turn, if any.
    pub fn last_tool_output(&self) -> Option<&str> {
        self.messages.iter().rev().find(|m| m.role == "tool").map(|m| m.content.as_str())
    }
}
