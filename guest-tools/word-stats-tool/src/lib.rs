//! An example plug-in tool component: `word_count(text)`, `summarize(text)` and `top_words(text, n)`
//! become tools that model programs call by name, with no change to the runtime.
//!
//! To write your own: declare an interface in `wit/`, export it from a world that includes
//! `agentrt:tools/tool`, implement it here, and put the built `.wasm` in the tools directory (or name it
//! with `agentrt exec --tool`).

mod bindings {
    wit_bindgen::generate!({
        path: ["../../wit", "wit"],
        world: "example:word-stats/word-stats",
    });
}

use bindings::exports::agentrt::tools::metadata::{self, ToolDoc};
use bindings::exports::example::word_stats::stats::{self, TextStats};
use std::collections::HashMap;

struct WordStats;

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'').filter(|w| !w.is_empty())
}

impl stats::Guest for WordStats {
    fn word_count(text: String) -> u32 {
        words(&text).count() as u32
    }

    fn summarize(text: String) -> TextStats {
        let sentences = text.split(['.', '!', '?']).filter(|s| !s.trim().is_empty()).count() as u32;
        let longest_word = words(&text).fold("", |best, w| if w.chars().count() > best.chars().count() { w } else { best });
        TextStats { words: words(&text).count() as u32, sentences, longest_word: longest_word.to_string() }
    }

    fn top_words(text: String, n: u32) -> Result<Vec<(String, u32)>, String> {
        if !(1..=100).contains(&n) {
            return Err(format!("n must be from 1 to 100, got {n}"));
        }
        let mut counts: HashMap<String, u32> = HashMap::new();
        for word in words(&text) {
            *counts.entry(word.to_lowercase()).or_default() += 1;
        }
        let mut ranked: Vec<(String, u32)> = counts.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(n as usize);
        Ok(ranked)
    }
}

impl metadata::Guest for WordStats {
    fn describe() -> Vec<ToolDoc> {
        vec![
            ToolDoc { name: "word-count".into(), description: "-> int: the number of words in text".into() },
            ToolDoc { name: "summarize".into(), description: "-> {words, sentences, longest_word}".into() },
            ToolDoc { name: "top-words".into(), description: "-> [[word, count], ...]: the n most frequent words".into() },
        ]
    }

    fn stateless() -> bool {
        // Every call depends on its arguments only, so the host may reuse one instance for many calls.
        true
    }
}

bindings::export!(WordStats with_types_in bindings);
