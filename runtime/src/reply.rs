//! What a model's reply asks for: a program to run, a final answer, or neither.
//!
//! Two program forms are accepted: a fenced block (```` ```python ````, ```` ```py ```` or a bare
//! fence), the form small code models write most readily; and the one-call form
//! `<tool>search_pages("query")</tool>`, whose content is itself a one-line Python program.

/// What a reply asks the episode to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyAction {
    /// Run this program and show the model what it printed.
    Program(String),
    /// The episode ends with this answer.
    Answer(String),
    /// The reply holds neither a program nor an answer.
    Nothing,
}

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

    #[test]
    fn fenced_python_block() {
        let reply = "Let me search.\n```python\nhits = search_pages(\"x\")\nprint(hits)\n```\n";
        assert_eq!(parse_reply(reply), ReplyAction::Program("hits = search_pages(\"x\")\nprint(hits)\n".into()));
    }

    #[test]
    fn seed_one_call_form() {
        assert_eq!(parse_reply("<tool>search_pages(\"Denver\")</tool>"), ReplyAction::Program("search_pages(\"Denver\")".into()));
    }

    #[test]
    fn other_languages_are_skipped() {
        let reply = "```json\n{}\n```\n```py\nprint(1)\n```";
        assert_eq!(parse_reply(reply), ReplyAction::Program("print(1)\n".into()));
    }

    #[test]
    fn answer_and_unclosed_answer() {
        assert_eq!(parse_reply("<answer> Paris </answer>"), ReplyAction::Answer("Paris".into()));
        assert_eq!(parse_reply("so <answer>Paris"), ReplyAction::Answer("Paris".into()));
        assert_eq!(parse_reply("I don't know"), ReplyAction::Nothing);
    }

    #[test]
    fn program_before_answer_runs_first() {
        let reply = "<tool>read_section(\"a:b\")</tool> <answer>x</answer>";
        assert_eq!(parse_reply(reply), ReplyAction::Program("read_section(\"a:b\")".into()));
        let reply = "<answer>x</answer> <tool>read_section(\"a:b\")</tool>";
        assert_eq!(parse_reply(reply), ReplyAction::Answer("x".into()));
    }
}
