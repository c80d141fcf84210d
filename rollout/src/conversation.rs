//! A conversation as messages and, for token-level policies, as the exact token ids the model saw.

use agentrt_policy::Message;
use serde::{Deserialize, Serialize};

/// The exact ids of a conversation and which of them the model wrote.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenTrace {
    /// Every token id of the conversation, prompt and replies, in order.
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
    /// The chat so far: system prompt, any demonstrations, the question, then replies and tool output.
    pub messages: Vec<Message>,
    /// Present when the policy works on tokens ([`crate::LocalPolicy`]).
    pub tokens: Option<TokenTrace>,
    /// How many replies the policy has written.
    pub replies: usize,
    /// Whether the last reply ended with the model's own end-of-turn token.
    pub last_reply_closed: bool,
}

impl Conversation {
    /// A conversation for `question_id` starting from `messages`, with no replies yet and no token trace.
    pub fn new(question_id: impl Into<String>, messages: Vec<Message>) -> Conversation {
        Conversation { question_id: question_id.into(), messages, tokens: None, replies: 0, last_reply_closed: true }
    }

    /// The question this episode answers: the last user turn (a demonstration before it has its own).
    pub fn question(&self) -> Option<&str> {
        self.messages.iter().rev().find(|m| m.role == "user").map(|m| m.content.as_str())
    }

    /// The ids of each conversation's token trace, the prompts a token-level policy samples after; an error
    /// when one has none (the policy's `begin` was not called on it).
    pub fn trace_ids(conversations: &[&Conversation]) -> Result<Vec<Vec<u32>>, crate::error::RolloutError> {
        conversations
            .iter()
            .map(|c| c.tokens.as_ref().map(|t| t.ids.clone()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| crate::error::RolloutError::Invalid("a conversation has no token trace (begin() was not called)".into()))
    }

    /// The text of this episode's last tool turn: one after the question, never a demonstration's.
    pub fn last_tool_output(&self) -> Option<&str> {
        self.messages.iter().rev().take_while(|m| m.role != "user").find(|m| m.role == "tool").map(|m| m.content.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A demonstration's tool turn comes before the question, so it is not this episode's output.
    #[test]
    fn tool_output_before_the_question_is_not_the_episodes() {
        let mut c = Conversation::new(
            "q",
            vec![
                Message::system("s"),
                Message::user("demo question"),
                Message::assistant("<tool>search_pages(\"x\")</tool>"),
                Message::new("tool", "demo output"),
                Message::assistant("<answer>demo</answer>"),
                Message::user("the question"),
            ],
        );
        assert_eq!(c.question(), Some("the question"));
        assert_eq!(c.last_tool_output(), None);
        c.messages.push(Message::assistant("```python\nprint(1)\n```"));
        c.messages.push(Message::new("tool", "1"));
        assert_eq!(c.last_tool_output(), Some("1"));
    }
}
