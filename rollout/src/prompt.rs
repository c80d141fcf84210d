//! The system prompt that teaches the tools and the program format.

use agentrt_runtime::ToolSignature;

/// The default system prompt: the three wiki tools, the program format, the answer format and one
/// worked example, kept short because the default policy is a 135M model with a small context budget.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You answer questions using a Wikipedia search engine. \
You act by writing a short Python program in a ```python block; it runs and you see what it prints. Tools:
- search_pages(query) returns a list of {\"page_id\", \"title\", \"score\"}
- view_sections(page_id) returns a list of {\"section_id\", \"title\"}
- read_section(section_id) returns the section's text
{plugins}Example:
```python
hits = search_pages(\"Super Bowl 50\")
sections = view_sections(hits[0][\"page_id\"])
print(read_section(sections[0][\"section_id\"]))
```
When you know the answer, reply with <answer>the short answer</answer>.";

/// The system prompt with plug-in tools listed after the wiki tools (`template` holds `{plugins}`).
pub fn system_prompt(template: &str, plugins: &[ToolSignature]) -> String {
    let mut listed = String::new();
    for p in plugins {
        let doc = p.doc.lines().next().unwrap_or("").trim();
        listed.push_str(&format!("- {}({}) {}\n", p.name, p.params.join(", "), doc));
    }
    template.replace("{plugins}", &listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_are_listed_in_place() {
        let sig = ToolSignature { name: "word_count".into(), params: vec!["text".into()], doc: "counts words\nmore".into() };
        let p = system_prompt(DEFAULT_SYSTEM_PROMPT, &[sig]);
        assert!(p.contains("- word_count(text) counts words\nExample:"), "{p}");
        assert!(!system_prompt(DEFAULT_SYSTEM_PROMPT, &[]).contains("{plugins}"));
    }
}
