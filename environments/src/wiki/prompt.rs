//! The system prompt that teaches the tools and the program format, and a worked demonstration.

use agentrt_policy::Message;
use agentrt_runtime::ToolSignature;
use serde::{Deserialize, Serialize};

/// The default system prompt (`short`): the one-call search form and the answer form; the demonstration
/// ([`demonstration`]) shows the rest. Why so short: measured with SmolLM2-135M (transformers, temperature
/// 1, after the demonstration), 6 of 16 first replies held a program with this prompt, 1 of 16 with
/// [`FULL_SYSTEM_PROMPT`] and 2 of 24 with this prompt followed by the tool list.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You answer questions by searching Wikipedia. Reply with a search: \
<tool>search_pages(\"words\")</tool>. After the tool output, reply with <answer>the short answer</answer>.{plugins}";

/// The prompt for models that follow instructions (`full`): every tool, the program format and an example.
pub const FULL_SYSTEM_PROMPT: &str = "You answer questions using a Wikipedia search engine. \
You act by writing a short Python program in a ```python block; it runs and you see what it prints. Tools:
- search_pages(query) returns a list of {\"page_id\", \"title\", \"score\", \"section_id\"}; section_id is the page's section that matches the query best
- search_passages(query, page_id=None, k=10) returns the k sentences that best answer the query, a list of {\"page_id\", \"section_id\", \"text\", \"score\"}, from the best pages or from one page
- view_sections(page_id) returns a list of {\"section_id\", \"title\"}
- read_section(section_id) returns the section's text
{plugins}Example:
```python
hits = search_pages(\"Who won Super Bowl 50?\")
print(read_section(hits[0][\"section_id\"]))
```
When you know the answer, reply with <answer>the short answer</answer>.";

/// The template a config names: `short` ([`DEFAULT_SYSTEM_PROMPT`]), `full` ([`FULL_SYSTEM_PROMPT`]), or
/// the template's own text (where `{plugins}` lists plug-in tools).
pub fn system_prompt_template(name: &str) -> &str {
    match name {
        "short" => DEFAULT_SYSTEM_PROMPT,
        "full" => FULL_SYSTEM_PROMPT,
        text => text,
    }
}

/// Where a system prompt lists the plug-in tools.
pub const PLUGINS_PLACEHOLDER: &str = "{plugins}";

/// The system prompt with plug-in tools listed where `template` holds `{plugins}`, or at its end when it
/// holds none (a prompt that names no tool would hide them from the model). A `{plugins}` at the start of
/// a line gets the list's lines; one inside a line (the `short` prompt's, at its end) gets them on lines
/// of their own after a heading.
pub fn system_prompt(template: &str, plugins: &[ToolSignature]) -> String {
    let mut listed = String::new();
    let at = template.find(PLUGINS_PLACEHOLDER);
    let line_start = at.is_some_and(|i| i == 0 || template[..i].ends_with('\n'));
    if !plugins.is_empty() && !line_start {
        listed.push_str("\nMore tools, called the same way:\n");
    }
    for p in plugins {
        let doc = p.doc.lines().next().unwrap_or("").trim();
        listed.push_str(&format!("- {}({}) {}\n", p.name, p.params.join(", "), doc));
    }
    if at.is_some() {
        template.replace(PLUGINS_PLACEHOLDER, &listed)
    } else {
        format!("{template}{listed}")
    }
}

/// Which worked episode is shown before every question (`env.wiki.demonstration`, and an adapter's
/// `agent.json`): `true`, the built-in one ([`demonstration`], an episode on the bundled corpus); `false`,
/// none; or a JSON Lines file of your own turns, for your own corpus (docs/your-data.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Demonstration {
    /// The built-in episode (`true`) or none (`false`).
    Builtin(bool),
    /// A file of turns, `{"role": ..., "content": ...}` a line: `user` (a question), then `assistant`
    /// replies and the `tool` outputs between them, ending with an `assistant` answer.
    File(String),
}

impl Default for Demonstration {
    fn default() -> Self {
        Demonstration::Builtin(true)
    }
}

impl From<bool> for Demonstration {
    fn from(shown: bool) -> Self {
        Demonstration::Builtin(shown)
    }
}

impl std::str::FromStr for Demonstration {
    type Err = String;
    /// `true`, `false`, or a file's path (as a flag or `--set` gives it).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "true" => Ok(Demonstration::Builtin(true)),
            "false" => Ok(Demonstration::Builtin(false)),
            "" => Err("expected true, false or a file of turns".into()),
            path => Ok(Demonstration::File(path.to_string())),
        }
    }
}

impl std::fmt::Display for Demonstration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Demonstration::Builtin(shown) => write!(f, "{shown}"),
            Demonstration::File(path) => write!(f, "{path:?}"),
        }
    }
}

impl Demonstration {
    /// Whether any episode is shown.
    pub fn is_shown(&self) -> bool {
        !matches!(self, Demonstration::Builtin(false))
    }

    /// The turns shown (none for `false`). A file that cannot be read, a bad line, or turns that are not a
    /// question, replies and tool outputs ending in an answer, is an error naming the file and line.
    pub fn turns(&self) -> Result<Vec<Message>, String> {
        match self {
            Demonstration::Builtin(true) => Ok(demonstration()),
            Demonstration::Builtin(false) => Ok(Vec::new()),
            Demonstration::File(path) => read_demonstration(std::path::Path::new(path)),
        }
    }
}

/// The page ids that the tool outputs of `turns` name (`'page_id': '...'`, as search hits print): a
/// demonstration written for another corpus shows pages the index does not hold (the built-in one shows
/// the bundled corpus's).
pub fn page_ids_shown(turns: &[Message]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for m in turns.iter().filter(|m| m.role == "tool") {
        for part in m.content.split("'page_id': '").skip(1).chain(m.content.split("\"page_id\": \"").skip(1)) {
            if let Some(id) = part.split(['\'', '"']).next().filter(|id| !id.is_empty()) {
                if !ids.iter().any(|i| i == id) {
                    ids.push(id.to_string());
                }
            }
        }
    }
    ids
}

/// A demonstration file's turns (see [`Demonstration::File`]).
fn read_demonstration(path: &std::path::Path) -> Result<Vec<Message>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("env.wiki.demonstration {}: {e}", path.display()))?;
    let mut turns = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let m: Message = serde_json::from_str(line)
            .map_err(|e| format!("env.wiki.demonstration {}:{}: not a turn {{\"role\": ..., \"content\": ...}}: {e}", path.display(), i + 1))?;
        if !["user", "assistant", "tool"].contains(&m.role.as_str()) {
            return Err(format!("env.wiki.demonstration {}:{}: role {:?}: expected user, assistant or tool", path.display(), i + 1, m.role));
        }
        turns.push(m);
    }
    let roles: Vec<&str> = turns.iter().map(|m| m.role.as_str()).collect();
    if roles.first() != Some(&"user") || roles.last() != Some(&"assistant") {
        return Err(format!(
            "env.wiki.demonstration {}: the turns must start with the question (role user) and end with the answer (role assistant), not {:?}",
            path.display(),
            roles
        ));
    }
    Ok(turns)
}

/// One worked episode, placed as earlier turns between the system prompt and the question (few-shot).
///
/// Why: SmolLM2-135M ignores instructions in the system prompt. Measured with transformers on 12 train
/// questions at temperature 1: 0 of 12 first replies held a program with the system prompt alone, 3 of 12
/// with this demonstration before the question, which gives GRPO groups that are not all equal. The tool
/// turns are the real sandbox's observations on the bundled index (truncated), so the demonstration shows
/// exactly what the model will see; it uses the one-call form first, then a program.
pub fn demonstration() -> Vec<Message> {
    vec![
        Message::user("Who wrote the novel Nineteen Eighty-Four?"),
        Message::assistant("<tool>search_pages(\"Nineteen Eighty-Four novel\")</tool>"),
        Message::new(
            "tool",
            "[{'page_id': 'nineteen_eighty-four', 'title': 'Nineteen Eighty-Four', 'score': 0.0328, 'section_id': 'nineteen_eighty-four:intro'}, \
{'page_id': 'novel', 'title': 'Novel', 'score': 0.032, 'section_id': 'novel:intro'}, \
{'page_id': 'ulysses_(novel)', 'title': 'Ulysses (novel)', 'score': 0.0301, 'section_id': 'ulysses_(novel):intro'}]",
        ),
        Message::assistant("```python\nsections = view_sections(\"nineteen_eighty-four\")\nprint(read_section(sections[0][\"section_id\"])[:300])\n```"),
        Message::new(
            "tool",
            "Nineteen Eighty-Four is a dystopian and speculative fiction novel by English writer George Orwell. \
It was published on 8 June 1949 by Secker & Warburg as Orwell's ninth and final completed book.",
        ),
        Message::assistant("<answer>George Orwell</answer>"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_are_listed_in_place() {
        let sig = ToolSignature { name: "word_count".into(), params: vec!["text".into()], doc: "counts words\nmore".into() };
        let p = system_prompt(FULL_SYSTEM_PROMPT, std::slice::from_ref(&sig));
        assert!(p.contains("- word_count(text) counts words\nExample:"), "{p}");
        let p = system_prompt(DEFAULT_SYSTEM_PROMPT, &[sig]);
        assert!(p.ends_with("</answer>.\nMore tools, called the same way:\n- word_count(text) counts words\n"), "{p}");
        assert!(!system_prompt(DEFAULT_SYSTEM_PROMPT, &[]).contains("{plugins}"));
        assert_eq!(system_prompt_template("full"), FULL_SYSTEM_PROMPT);
        assert_eq!(system_prompt_template("Answer. {plugins}"), "Answer. {plugins}");
        // A prompt of one's own without {plugins} still lists them, at its end.
        let own = system_prompt("Answer from my notes.", &[ToolSignature { name: "lookup".into(), params: vec!["key".into()], doc: "finds".into() }]);
        assert_eq!(own, "Answer from my notes.\nMore tools, called the same way:\n- lookup(key) finds\n");
        assert_eq!(system_prompt("Answer from my notes.", &[]), "Answer from my notes.");
    }

    /// The demonstration's replies are what the episode loop accepts: programs, then an answer.
    #[test]
    fn demonstration_replies_parse_as_programs_then_an_answer() {
        use super::super::reply::parse_reply;
        use agentrt_rollout::ReplyAction;
        let demo = demonstration();
        let roles: Vec<&str> = demo.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant", "tool", "assistant"]);
        let actions: Vec<ReplyAction> = demo.iter().filter(|m| m.role == "assistant").map(|m| parse_reply(&m.content)).collect();
        assert!(matches!(&actions[0], ReplyAction::Program(c) if c.contains("search_pages(\"Nineteen Eighty-Four novel\")")), "{:?}", actions[0]);
        assert!(matches!(&actions[1], ReplyAction::Program(c) if c.contains("read_section(sections[0][\"section_id\"])")), "{:?}", actions[1]);
        assert!(matches!(&actions[2], ReplyAction::Answer(a) if a == "George Orwell"), "{:?}", actions[2]);
    }
}
