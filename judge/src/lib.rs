//! Judging answers: turns (question, gold answers, response) into a reward in `[0, 1]`.
//!
//! The design in three parts:
//! - **who asks**: the trainer and the eval harness hold a `Box<dyn` [`Judge`]`>` built from a
//!   [`JudgeSpec`] (`rule`, `rule:0.8`, `openai:MODEL@BASE_URL`) and call [`Judge::judge`] for one
//!   [`JudgeInput`] or [`judge_batch`] for many, with a bound on how many are in flight at once.
//! - **who answers**: the offline [`RuleJudge`] (SQuAD's normalized exact match and token F1 against
//!   every gold alias, no network) or the [`OpenAiJudge`], which asks any OpenAI-compatible
//!   chat-completions server (Ollama, vLLM, llama.cpp's server, OpenAI) a fixed yes/no prompt
//!   ([`JUDGE_PROMPT`]) and reads the reply strictly: the first word must be `yes` or `no`, anything
//!   else is reported as an `unparsable` verdict rather than guessed. Transport failures (timeouts,
//!   refused connections, HTTP errors) are typed [`JudgeError`]s that name the endpoint; 5xx replies,
//!   timeouts and connection errors are retried with jittered exponential backoff, 4xx never.
//! - **who remembers**: the [`VerdictCache`], one JSON file per (judge model, [`PROMPT_VERSION`],
//!   question, answers, response) under `$AGENTRT_CACHE/judge`, written atomically, so a re-run of
//!   the same evaluation asks the server nothing.
//!
//! Both judges grade the text inside `<answer>…</answer>` when the response has such a tag, and the
//! whole response otherwise (see [`extract_answer`]).

#![warn(missing_docs)]

mod cache;
mod error;
mod openai;
mod rule;
mod spec;

/// The key lookup every client of an OpenAI-compatible server shares (`AGENTRT_JUDGE_API_KEY`, else
/// `OPENAI_API_KEY`).
pub use agentrt_openai::api_key_from_env;
pub use cache::{default_cache_dir, CacheKey, VerdictCache};
pub use error::JudgeError;
pub use openai::{build_prompt, parse_verdict, JudgeOptions, OpenAiJudge, OpenAiJudgeConfig, JUDGE_PROMPT, PROMPT_VERSION};
pub use rule::{best_f1, best_f_beta, exact_match_score, f1_score, f_beta_score, normalize_answer, RuleJudge, DEFAULT_F1_THRESHOLD};
pub use spec::{judge_from_spec, JudgeSpec, OPENAI_API_BASE};

use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};

/// One thing to judge: the question, its accepted gold answers (aliases), and the policy's response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeInput {
    /// The question as the policy saw it.
    pub question: String,
    /// Every accepted form of the gold answer; at least one is required.
    pub answers: Vec<String>,
    /// The policy's final reply (an `<answer>…</answer>` tag inside it narrows what is graded).
    pub response: String,
}

impl JudgeInput {
    /// Builds an input from borrowed parts.
    pub fn new(question: impl Into<String>, answers: impl IntoIterator<Item = impl Into<String>>, response: impl Into<String>) -> Self {
        JudgeInput { question: question.into(), answers: answers.into_iter().map(Into::into).collect(), response: response.into() }
    }
}

/// What kind of verdict a judge reached; serialized in snake_case (`"correct"`, `"f1_match"`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictLabel {
    /// LLM judge: the reply's first word was "yes".
    Correct,
    /// LLM judge: the reply's first word was "no".
    Incorrect,
    /// LLM judge: the reply did not start with "yes" or "no"; reward 0, counted separately.
    Unparsable,
    /// Rule judge: the normalized response equals a normalized gold alias.
    ExactMatch,
    /// Rule judge: no exact match, but the best token F1 reached the threshold.
    F1Match,
    /// Rule judge: neither exact match nor enough token overlap.
    NoMatch,
}

impl VerdictLabel {
    /// The label as it appears in JSON and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictLabel::Correct => "correct",
            VerdictLabel::Incorrect => "incorrect",
            VerdictLabel::Unparsable => "unparsable",
            VerdictLabel::ExactMatch => "exact_match",
            VerdictLabel::F1Match => "f1_match",
            VerdictLabel::NoMatch => "no_match",
        }
    }
}

impl std::fmt::Display for VerdictLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A judge's decision: the reward, what kind of decision it was, and the judge's raw text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The reward in `[0, 1]` (both judges give 0 or 1).
    pub reward: f32,
    /// Why: which rule matched, or how the LLM's reply was read.
    pub label: VerdictLabel,
    /// The LLM's reply verbatim, or the rule judge's scores (`em=… f1=… alias=… graded=…`).
    pub raw: String,
}

/// Scores responses. Implementations must be cheap to share between tasks (`Send + Sync`).
#[async_trait]
pub trait Judge: Send + Sync {
    /// A short description for logs and reports, e.g. `rule(f1>=0.80)` or `openai:gpt-4o-mini@https://…`.
    fn name(&self) -> String;

    /// Judges one input. Errors are failures to judge (transport, cache, bad input), never a
    /// negative verdict.
    async fn judge(&self, item: &JudgeInput) -> Result<Verdict, JudgeError>;
}

/// Judges `items` with at most `max_concurrency` calls in flight (0 is taken as 1) and returns the
/// results in the order of `items`.
pub async fn judge_batch<J: Judge + ?Sized>(judge: &J, items: &[JudgeInput], max_concurrency: usize) -> Vec<Result<Verdict, JudgeError>> {
    stream::iter(items).map(|item| judge.judge(item)).buffered(max_concurrency.max(1)).collect().await
}

/// The text a judge grades: the inside of the first `<answer>…</answer>` tag, trimmed, when the
/// response has one (an unclosed tag runs to the end), and otherwise the whole response, trimmed.
pub fn extract_answer(response: &str) -> &str {
    const OPEN: &str = "<answer>";
    const CLOSE: &str = "</answer>";
    match response.find(OPEN) {
        Some(start) => {
            let inner = &response[start + OPEN.len()..];
            let end = inner.find(CLOSE).unwrap_or(inner.len());
            inner[..end].trim()
        }
        None => response.trim(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extract_answer_prefers_the_tag() {
        assert_eq!(extract_answer("I think <answer> Paris </answer>."), "Paris");
        assert_eq!(extract_answer("  Paris \n"), "Paris");
        assert_eq!(extract_answer("<answer>Paris"), "Paris");
        assert_eq!(extract_answer("<answer></answer>"), "");
        assert_eq!(extract_answer("x <answer>a</answer> <answer>b</answer>"), "a");
    }

    #[test]
    fn labels_serialize_in_snake_case() {
        let v = Verdict { reward: 1.0, label: VerdictLabel::F1Match, raw: "r".into() };
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(json, r#"{"reward":1.0,"label":"f1_match","raw":"r"}"#);
        for label in
            [VerdictLabel::Correct, VerdictLabel::Incorrect, VerdictLabel::Unparsable, VerdictLabel::ExactMatch, VerdictLabel::F1Match, VerdictLabel::NoMatch]
        {
            let s = serde_json::to_string(&label).unwrap();
            assert_eq!(s, format!("\"{}\"", label.as_str()));
        }
    }
}
