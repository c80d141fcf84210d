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
    /// The partial credit of an answer short of right (what `algorithm.f1_weight` pays): the best token
    /// F-score against the gold answers with recall weighed this many times as much as precision. 1 is
    /// SQuAD's F1; 0.5 ranks parts of the answer above longer spans around it (`agentrt_judge::f_beta_score`).
    #[serde(default = "squad_f1_beta")]
    pub partial_credit_beta: f64,
}

/// SQuAD's F1: precision and recall weighed alike.
fn squad_f1_beta() -> f64 {
    1.0
}

impl Default for WikiSection {
    fn default() -> Self {
        WikiSection {
            questions: agentrt_search::DEFAULT_QUESTIONS_FILE.into(),
            split: "train".into(),
            system_prompt: "short".into(),
            demonstration: Demonstration::Builtin(true),
            judge: "rule".into(),
            partial_credit_beta: squad_f1_beta(),
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
        if !(self.partial_credit_beta > 0.0 && self.partial_credit_beta <= 10.0) {
            return Err(format!("env.wiki.partial_credit_beta: {} is outside (0, 10]", self.partial_credit_beta));
        }
        if matches!(&self.demonstration, Demonstration::File(p) if p.trim().is_empty()) {
            return Err("env.wiki.demonstration: empty: give true, false or a file of turns".into());
        }
        Ok(())
    }
}
