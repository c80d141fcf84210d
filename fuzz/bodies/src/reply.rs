//! The model-reply parser ([`parse_reply`]): what every sampled reply goes through before the sandbox runs
//! the program it finds. The reply is the model's, which the prompt (and so anyone who writes a page the
//! agent reads) can steer.

use crate::violated;
use agentrt_environments::wiki::reply::{extract_program, parse_reply, tagged};
use agentrt_rollout::ReplyAction;

/// The bytes as text (invalid UTF-8 replaced, as the tokenizer's decoder does). An answer or a program is
/// a piece of the reply: an answer trimmed and not holding its closing tag, a program not blank; and what
/// is found reads back the same from a reply that holds only it.
pub fn model_reply(data: &[u8]) {
    let reply = String::from_utf8_lossy(data);
    let action = parse_reply(&reply);
    match &action {
        ReplyAction::Answer(a) => {
            if a.trim() != a || a.contains("</answer>") || !reply.contains(a.as_str()) {
                violated(&format!("the answer {a:?} is not a trimmed piece of the reply"), data);
            }
            if tagged(&reply, "answer").map(|(_, t)| t).as_deref() != Some(a.as_str()) {
                violated("the answer is not the first <answer> of the reply", data);
            }
            let alone = parse_reply(&format!("<answer>{a}</answer>"));
            let interferes = ["<tool>", "```", "<answer>"].iter().any(|t| a.contains(t));
            if !interferes && alone != action {
                violated(&format!("the answer {a:?}, alone in a reply, reads as {alone:?}"), data);
            }
        }
        ReplyAction::Program(p) => {
            if p.trim().is_empty() || !reply.contains(p.trim()) {
                violated(&format!("the program {p:?} is blank or not a piece of the reply"), data);
            }
            if extract_program(&reply).map(|(_, q)| q).as_deref() != Some(p.as_str()) {
                violated("the program is not the reply's first program", data);
            }
            let alone = parse_reply(&format!("```python\n{p}```"));
            // A backtick at its end would join the closing fence.
            let interferes = ["<tool>", "`", "<answer>"].iter().any(|t| p.contains(t));
            if !interferes && alone != action {
                violated(&format!("the program {p:?}, alone in a fenced block, reads as {alone:?}"), data);
            }
        }
        ReplyAction::Nothing => {
            if extract_program(&reply).is_some() {
                violated("a reply with a program read as nothing", data);
            }
            if tagged(&reply, "answer").is_some() {
                violated("a reply with an <answer> read as nothing", data);
            }
        }
    }
}
