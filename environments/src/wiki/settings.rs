//! `[env.wiki]`: the wiki's own settings: which questions, how its prompt reads, who judges its answers.

use super::prompt::Demonstration;
use serde::{Deserialize, Serialize};

/// `[env.wiki]` of a training config: what the wiki asks (its questions file and training split), how
/// its prompt reads (the system prompt, the worked demonstration) and who judges its answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WikiSection {
    /// The questions file (JSON Lines or Parquet with question, answer or answers, page).
    pub questions: String,
    /// The split of that file that trains.
    pub split: String,
    /// `short`, `full`, or the system prompt's own text (`{plugins}` lists plug-in tools).
    pub system_prompt: String,
    /// The worked episode (few-shot) shown before every question: `true` the built-in one, `false` none,
    /// or a JSON Lines file of turns for your own corpus.
    pub demonstration: Demonstration,
    /// How answers are scored: `rule` (offline, SQuAD F1), `rule:0.5`, or `openai:MODEL@BASE_URL`.
    pub judge: String,
}

impl Default for WikiSection {
    fn default() -> Self {
        WikiSection {
            questions: agentrt_search::DEFAULT_QUESTIONS_FILE.into(),
            split: "train".into(),
            system_prompt: "short".into(),
            demonstration: Demonstration::Builtin(true),
            judge: "rule".into(),
        }
    }
}

impl WikiSection {
    /// Checks what can be checked without reading a file; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.system_prompt.trim().is_empty() {
            return Err("env.wiki.system_prompt: empty".into());
        }
        if self.questions.trim().is_empty() {
            return Err("env.wiki.questions: empty".into());
        }
        if matches!(&self.demonstration, Demonstration::File(p) if p.trim().is_empty()) {
            return Err("env.wiki.demonstration: empty: give true, false or a file of turns".into());
        }
        Ok(())
    }
}
