//! `--judge` strings and the options shared by every judge that talks to a server.

use crate::openai::{JudgeOptions, OpenAiJudge, OpenAiJudgeConfig};
use crate::rule::{RuleJudge, DEFAULT_F1_THRESHOLD};
use crate::{Judge, JudgeError};
use agentrt_openai::api_key_from_env;
use std::str::FromStr;

/// The API base used by `openai:MODEL` when no `@BASE_URL` is given.
pub const OPENAI_API_BASE: &str = "https://api.openai.com/v1";

/// Which judge to use, as written after `--judge`: `rule`, `rule:THRESHOLD`,
/// `openai:MODEL@BASE_URL` or `openai:MODEL`.
#[derive(Debug, Clone, PartialEq)]
pub enum JudgeSpec {
    /// The offline [`RuleJudge`] with this F1 threshold.
    Rule {
        /// Reward 1 when the best token F1 reaches this (exact matches always do).
        f1_threshold: f64,
    },
    /// The [`OpenAiJudge`] asking `model` at `base_url`.
    OpenAi {
        /// The model name as the server knows it.
        model: String,
        /// The API base, e.g. `http://localhost:11434/v1`.
        base_url: String,
    },
}

impl Default for JudgeSpec {
    fn default() -> Self {
        JudgeSpec::Rule { f1_threshold: DEFAULT_F1_THRESHOLD }
    }
}

impl std::fmt::Display for JudgeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JudgeSpec::Rule { f1_threshold } if *f1_threshold == DEFAULT_F1_THRESHOLD => f.write_str("rule"),
            JudgeSpec::Rule { f1_threshold } => write!(f, "rule:{f1_threshold}"),
            JudgeSpec::OpenAi { model, base_url } => write!(f, "openai:{model}@{base_url}"),
        }
    }
}

impl FromStr for JudgeSpec {
    type Err = JudgeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let spec = s.trim();
        let invalid = |reason: &str| JudgeError::InvalidSpec { spec: s.to_string(), reason: reason.to_string() };
        if spec == "rule" {
            return Ok(JudgeSpec::default());
        }
        if let Some(threshold) = spec.strip_prefix("rule:") {
            let f1_threshold: f64 = threshold.trim().parse().map_err(|_| invalid(&format!("{threshold:?} is not a number")))?;
            if !(f1_threshold > 0.0 && f1_threshold <= 1.0) {
                return Err(invalid("the F1 threshold must be greater than 0 and at most 1"));
            }
            return Ok(JudgeSpec::Rule { f1_threshold });
        }
        if let Some(rest) = spec.strip_prefix("openai:") {
            let split = ["@http://", "@https://"].iter().filter_map(|sep| rest.find(sep)).min();
            let (model, base_url) = match split {
                Some(at) => (&rest[..at], &rest[at + 1..]),
                None if rest.contains('@') => return Err(invalid("the base URL after '@' must start with http:// or https://")),
                None => (rest, OPENAI_API_BASE),
            };
            if model.trim().is_empty() {
                return Err(invalid("the model name is empty"));
            }
            return Ok(JudgeSpec::OpenAi { model: model.trim().to_string(), base_url: base_url.trim().to_string() });
        }
        Err(invalid("unknown judge kind"))
    }
}

impl JudgeSpec {
    /// Builds the judge. The rule judge ignores `options`; the LLM judge takes its key from
    /// `AGENTRT_JUDGE_API_KEY` or `OPENAI_API_KEY` and opens the cache in `options.cache_dir`.
    pub fn build(&self, options: &JudgeOptions) -> Result<Box<dyn Judge>, JudgeError> {
        match self {
            JudgeSpec::Rule { f1_threshold } => Ok(Box::new(RuleJudge::new(*f1_threshold)?)),
            JudgeSpec::OpenAi { model, base_url } => Ok(Box::new(OpenAiJudge::new(OpenAiJudgeConfig {
                model: model.clone(),
                base_url: base_url.clone(),
                api_key: api_key_from_env(),
                options: options.clone(),
            })?)),
        }
    }
}

/// The judge a spec string names (`rule`, `rule:0.5`, `openai:MODEL@BASE_URL`), with the default options:
/// how `train`, `eval` and `trajectories` all build theirs. Errors name the spec.
pub fn judge_from_spec(spec: &str) -> Result<std::sync::Arc<dyn Judge>, JudgeError> {
    let parsed: JudgeSpec = spec.parse()?;
    Ok(std::sync::Arc::from(parsed.build(&JudgeOptions::default())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_accepted_forms() {
        assert_eq!("rule".parse::<JudgeSpec>().unwrap(), JudgeSpec::Rule { f1_threshold: DEFAULT_F1_THRESHOLD });
        assert_eq!(" rule:0.5 ".parse::<JudgeSpec>().unwrap(), JudgeSpec::Rule { f1_threshold: 0.5 });
        assert_eq!(
            "openai:qwen2.5:7b@http://localhost:11434/v1".parse::<JudgeSpec>().unwrap(),
            JudgeSpec::OpenAi { model: "qwen2.5:7b".into(), base_url: "http://localhost:11434/v1".into() }
        );
        assert_eq!("openai:gpt-4o-mini".parse::<JudgeSpec>().unwrap(), JudgeSpec::OpenAi { model: "gpt-4o-mini".into(), base_url: OPENAI_API_BASE.into() });
    }

    #[test]
    fn round_trips_through_display() {
        for s in ["rule", "rule:0.5", "openai:qwen2.5:7b@http://localhost:11434/v1"] {
            assert_eq!(s.parse::<JudgeSpec>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn bad_specs_explain_the_accepted_forms() {
        for bad in ["", "llm", "rule:", "rule:1.5", "rule:0", "rule:abc", "openai:", "openai:@http://x", "openai:m@localhost:8000"] {
            let err = bad.parse::<JudgeSpec>().unwrap_err().to_string();
            assert!(err.contains("accepted forms"), "{bad:?}: {err}");
            assert!(err.contains("openai:MODEL@BASE_URL"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn bad_base_url_is_caught_at_build() {
        let spec = JudgeSpec::OpenAi { model: "m".into(), base_url: "ftp://x".into() };
        let options = JudgeOptions { cache_dir: None, ..JudgeOptions::default() };
        assert!(spec.build(&options).is_err());
    }
}
