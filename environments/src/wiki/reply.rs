//! The wiki's reply grammar ([`ToolPrograms`]): what a model's reply asks for, a program to run, a final
//! answer, or neither.
//!
//! Two program forms are accepted: a fenced block (```` ```python ````, ```` ```py ```` or a bare
//! fence), the form small code models write most readily; and the one-call form
//! `<tool>search_pages("query")</tool>`, whose content is itself a one-line Python program.

use agentrt_rollout::{ReplyAction, ReplyGrammar};

/// The wiki's grammar: a program (```` ```python ```` or `<tool>`) runs in the sandbox and its output comes
/// back as a tool turn; an `<answer>` (or a reply with neither) ends the episode.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolPrograms;

impl ReplyGrammar for ToolPrograms {
    fn name(&self) -> &'static str {
        "tool_programs"
    }

    fn read(&self, reply: &str) -> ReplyAction {
        parse_reply(reply)
    }
}

/// Where a reply ends: an answer, the one-call form, or a closed code fence. The samplers of `train`,
/// `eval`, `trajectories` and a remote `openai:` policy all stop there, so a reply is one action.
pub const STOP_STRINGS: &[&str] = &["</answer>", "</tool>", "\n```\n"];

/// Reads a reply. An answer wins over a program only when it comes first: a model that writes code
/// and then guesses an answer has not seen its code's output yet.
pub fn parse_reply(reply: &str) -> ReplyAction {
    let answer = tagged(reply, "answer");
    let program = extract_program(reply);
    match (answer, program) {
        (Some((a_at, a)), Some((p_at, _))) if a_at < p_at => ReplyAction::Answer(a),
        (_, Some((_, p))) => ReplyAction::Program(p),
        (Some((_, a)), None) => ReplyAction::Answer(a),
        (None, None) => ReplyAction::Nothing,
    }
}

/// The first program in `reply` and its byte offset.
pub fn extract_program(reply: &str) -> Option<(usize, String)> {
    let fenced = fenced_block(reply);
    let tool = tagged(reply, "tool");
    match (fenced, tool) {
        (Some(f), Some(t)) => Some(if f.0 <= t.0 { f } else { t }),
        (f, t) => f.or(t),
    }
    .filter(|(_, p)| !p.trim().is_empty())
}

/// The text inside the first `<tag>…</tag>`, trimmed, with its offset. An unclosed tag runs to the end
/// of the reply (generation often stops on the closing tag).
pub fn tagged(reply: &str, tag: &str) -> Option<(usize, String)> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = reply.find(&open)?;
    let body = &reply[start + open.len()..];
    let end = body.find(&close).unwrap_or(body.len());
    Some((start, body[..end].trim().to_string()))
}

fn fenced_block(reply: &str) -> Option<(usize, String)> {
    let mut from = 0;
    while let Some(rel) = reply[from..].find("```") {
        let start = from + rel;
        let after = &reply[start + 3..];
        let line_end = after.find('\n')?;
        let language = after[..line_end].trim().to_ascii_lowercase();
        let body = &after[line_end + 1..];
        let close = body.find("```");
        if matches!(language.as_str(), "" | "python" | "py" | "python3") {
            return Some((start, body[..close.unwrap_or(body.len())].to_string()));
        }
        // Another language's block: skip past its closing fence.
        from = start + 3 + line_end + 1 + close? + 3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replies and the action each parses to, with what it shows.
    #[test]
    fn each_reply_parses_to_its_action() {
        let program = |code: &str| ReplyAction::Program(code.into());
        let answer = |text: &str| ReplyAction::Answer(text.into());
        let cases = [
            (
                "a fenced python block",
                "Let me search.\n```python\nhits = search_pages(\"x\")\nprint(hits)\n```\n",
                program("hits = search_pages(\"x\")\nprint(hits)\n"),
            ),
            ("the seed's one-call form", "<tool>search_pages(\"Denver\")</tool>", program("search_pages(\"Denver\")")),
            ("other languages are skipped", "```json\n{}\n```\n```py\nprint(1)\n```", program("print(1)\n")),
            ("an answer", "<answer> Paris </answer>", answer("Paris")),
            ("an unclosed answer", "so <answer>Paris", answer("Paris")),
            ("neither", "I don't know", ReplyAction::Nothing),
            ("a program before an answer runs first", "<tool>read_section(\"a:b\")</tool> <answer>x</answer>", program("read_section(\"a:b\")")),
            ("an answer before a program is the answer", "<answer>x</answer> <tool>read_section(\"a:b\")</tool>", answer("x")),
        ];
        for (what, reply, action) in cases {
            assert_eq!(parse_reply(reply), action, "{what}: {reply:?}");
        }
    }
}
