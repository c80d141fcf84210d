//! The one way a conversation becomes exact token ids: rollouts ([`crate::LocalPolicy`]) and supervised
//! fine-tuning (`agentrt sft`) both build their [`TokenTrace`] here, so what SFT trains on is token for
//! token what a rollout of the same conversation would have shown the model.
//!
//! - The prompt (everything before the first reply) is rendered with the generation prompt and tokenised
//!   once.
//! - A reply's ids are the model's own: sampled ids in a rollout; in SFT, the tokenizer's encoding of the
//!   message's content followed by the template's end-of-turn token. Both are marked as the model's.
//! - The turns after a reply (a tool turn, a user turn) are appended as the suffix the template adds: the
//!   conversation is rendered with and without them, and only the new text is tokenised (the rest of the
//!   reply's end-of-turn glue, the new turns, the next generation prompt). A template for which that is not
//!   a pure suffix is an error, never a silent re-tokenisation.

use crate::conversation::TokenTrace;
use crate::error::RolloutError;
use agentrt_policy::{Message, Policy};

/// Renders conversations into [`TokenTrace`]s with a policy's chat template and tokenizer.
#[derive(Clone, Copy)]
pub struct TraceBuilder<'a> {
    policy: &'a Policy,
}

/// How the template writes the assistant reply that ends a conversation.
struct RenderedReply {
    /// The reply's text as the template writes it, before its end-of-turn marker.
    text: String,
    /// The end-of-turn token the template writes after the reply.
    marker_id: u32,
    /// What the template writes after the marker when the conversation ends there (e.g. a newline).
    after_marker: String,
}

impl<'a> TraceBuilder<'a> {
    /// A builder using `policy`'s chat template and tokenizer.
    pub fn new(policy: &'a Policy) -> TraceBuilder<'a> {
        TraceBuilder { policy }
    }

    fn render(&self, m: &[Message], open: bool) -> Result<String, RolloutError> {
        self.policy.template.render(m, open).map_err(|e| RolloutError::Template(e.to_string()))
    }

    fn not_suffix() -> RolloutError {
        RolloutError::Template("rendering a new turn changed earlier text; cannot extend the conversation's tokens without re-tokenising".into())
    }

    /// A trace holding the prompt of `messages` (rendered with the generation prompt, tokenised once).
    pub fn begin(&self, messages: &[Message]) -> Result<TokenTrace, RolloutError> {
        let mut t = TokenTrace::default();
        t.push_context(&self.policy.chat_prompt(messages)?);
        Ok(t)
    }

    /// `messages` ends with an assistant reply: how the template writes it and its end-of-turn marker.
    fn rendered_reply(&self, messages: &[Message]) -> Result<RenderedReply, RolloutError> {
        let n = messages.len();
        assert!(n > 0, "a reply to render");
        let before_reply = self.render(&messages[..n - 1], true)?;
        let with_reply = self.render(messages, false)?;
        let after_prompt = with_reply.strip_prefix(before_reply.as_str()).ok_or_else(Self::not_suffix)?;
        let tok = &self.policy.tokenizer;
        let (marker_id, marker_start, marker_end) = tok
            .eos_ids
            .iter()
            .filter_map(|&id| {
                let s = tok.inner.id_to_token(id)?;
                after_prompt.rfind(&s).map(|at| (id, at, at + s.len()))
            })
            .max_by_key(|&(_, _, end)| end)
            .ok_or_else(|| RolloutError::Template("the template writes no end-of-turn token after a reply".into()))?;
        Ok(RenderedReply { text: after_prompt[..marker_start].to_string(), marker_id, after_marker: after_prompt[marker_end..].to_string() })
    }

    /// Appends the turns `new` (tool output, a user turn, or none) after the reply that ends `messages`, as
    /// context: the marker first when the reply's ids lack it (`closed` false: the model stopped on a stop
    /// string or the length limit), then the template's glue, the new turns and the next generation prompt.
    pub fn push_turns(&self, trace: &mut TokenTrace, messages: &[Message], new: &[Message], closed: bool) -> Result<(), RolloutError> {
        let reply = self.rendered_reply(messages)?;
        let with_reply = self.render(messages, false)?;
        let mut all = messages.to_vec();
        all.extend_from_slice(new);
        let with_new = self.render(&all, true)?;
        let glue_and_new = with_new.strip_prefix(with_reply.as_str()).ok_or_else(Self::not_suffix)?;
        let ids = self.policy.tokenizer.encode(&format!("{}{}", reply.after_marker, glue_and_new))?;
        if !closed {
            trace.push_context(&[reply.marker_id]);
        }
        trace.push_context(&ids);
        Ok(())
    }

    /// Appends a written (not sampled) assistant reply, the one that ends `messages`: the tokenizer's
    /// encoding of its content, then the template's end-of-turn token, all marked as the model's (so a
    /// model trained on it learns to stop). The template must write the content as it stands.
    pub fn push_written_reply(&self, trace: &mut TokenTrace, messages: &[Message]) -> Result<(), RolloutError> {
        let content = &messages.last().expect("a reply").content;
        let reply = self.rendered_reply(messages)?;
        if reply.text != *content {
            return Err(RolloutError::Template(format!(
                "the template writes this assistant reply as {:?}, not as its content {:?}; its tokens would differ from a rollout's",
                clip(&reply.text),
                clip(content)
            )));
        }
        let mut ids = self.policy.tokenizer.encode(content)?;
        ids.push(reply.marker_id);
        trace.push_model(&ids, &vec![0.0; ids.len()]);
        Ok(())
    }

    /// A whole conversation with written replies (supervised fine-tuning): the prompt up to the first
    /// assistant turn as context, each assistant turn as the model's ids (content and end-of-turn token),
    /// and the turns between replies as the template's suffix, exactly as a rollout appends them. Turns after
    /// the last assistant turn are left out (nothing follows them to learn). An error when there is no
    /// assistant turn.
    pub fn render_conversation(&self, messages: &[Message]) -> Result<TokenTrace, RolloutError> {
        let replies: Vec<usize> = messages.iter().enumerate().filter(|(_, m)| m.role == "assistant").map(|(i, _)| i).collect();
        let Some(&first) = replies.first() else {
            return Err(RolloutError::Invalid("the conversation has no assistant turn".into()));
        };
        let mut trace = self.begin(&messages[..first])?;
        for (k, &i) in replies.iter().enumerate() {
            self.push_written_reply(&mut trace, &messages[..=i])?;
            if let Some(&next) = replies.get(k + 1) {
                self.push_turns(&mut trace, &messages[..=i], &messages[i + 1..next], true)?;
            }
        }
        Ok(trace)
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() <= 80 {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(80).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_policy::tiny::tiny_policy;

    /// The byte-level test tokenizer has no merges, so the whole conversation re-encoded must equal the trace
    /// built turn by turn, and the mask must cover exactly each reply and its `<|im_end|>`.
    #[test]
    fn a_conversation_masks_exactly_the_replies_and_their_end_of_turn() {
        let policy = tiny_policy(agentrt_policy::Arch::Llama, 5).unwrap();
        let b = TraceBuilder::new(&policy);
        let messages = vec![
            Message::system("S"),
            Message::user("question?"),
            Message::assistant("<tool>search_pages(\"x\")</tool>"),
            Message::new("tool", "tool output"),
            Message::assistant("<answer>A</answer>"),
            Message::user("and?"),
            Message::assistant("B"),
            Message::new("tool", "left out"),
        ];
        let t = b.render_conversation(&messages).unwrap();
        let full = policy.template.render(&messages[..7], false).unwrap();
        let full = full.strip_suffix('\n').unwrap(); // ChatML's newline after the last <|im_end|>
        assert_eq!(t.ids, policy.tokenizer.encode(full).unwrap());
        // The masked spans, decoded, are the replies with their end-of-turn token, nothing else.
        let mut spans = vec![];
        let mut cur = vec![];
        for (&id, &m) in t.ids.iter().zip(&t.model_mask) {
            if m {
                cur.push(id);
            } else if !cur.is_empty() {
                spans.push(policy.tokenizer.decode(&std::mem::take(&mut cur)).unwrap());
            }
        }
        if !cur.is_empty() {
            spans.push(policy.tokenizer.decode(&cur).unwrap());
        }
        assert_eq!(spans, ["<tool>search_pages(\"x\")</tool><|im_end|>", "<answer>A</answer><|im_end|>", "B<|im_end|>"]);
        assert!(b.render_conversation(&messages[..2]).unwrap_err().to_string().contains("no assistant turn"));
    }
}
