//! How an episode is played, as one serde type: the `[rollout]` keys of a training config that shape an
//! episode (`agentrt_trainer::TrainConfig::rollout` flattens it), and the body of the `agent.json` saved
//! beside every trained adapter, so that `agentrt eval --adapter DIR`, `agentrt generate --adapter DIR`
//! and `agentrt serve` play an adapter as it was trained without a flag.
//!
//! An environment may adapt a spec to itself (the code environment plays one reply under its tests'
//! bounds: `agentrt_environments::EnvSection::played`); the spec read from a config or an `agent.json`
//! is always the one that was written, never an adapted one.

use crate::error::RolloutError;
use agentrt_assets::FileError;
use agentrt_policy::SamplingParams;
use agentrt_runtime::Limits;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// The file name, in a checkpoint directory (beside `adapters/`) or in a PEFT adapter directory.
pub const AGENT_FILE: &str = "agent.json";

/// How an episode is played: the prompt, the judge, the turn and reply budgets, sampling and the sandbox's
/// bounds per program. Its `Default` is `trainer/default.toml`'s `[rollout]` (a test there checks the two
/// agree key by key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EpisodeSpec {
    /// Replies an episode may hold at most (the answer included).
    pub max_turns: usize,
    /// Tokens the model may write in one reply at most.
    pub max_new_tokens: usize,
    /// Sampling temperature, in `[0, 2]` (1: the model's own distribution).
    pub temperature: f64,
    /// Nucleus sampling: only the most likely tokens holding this much probability (1: all).
    pub top_p: f64,
    /// Only the k most likely tokens are sampled (0: all).
    pub top_k: usize,
    /// Characters of a tool's output the model sees per turn; a longer one is cut, with a note.
    pub max_observation_chars: usize,
    /// `short`, `full`, or the system prompt's own text (`{plugins}` lists plug-in tools).
    pub system_prompt: String,
    /// Show the built-in worked episode (few-shot) before every question.
    pub demonstration: bool,
    /// How answers are scored: `rule` (offline, SQuAD F1), `rule:0.5`, or `openai:MODEL@BASE_URL`.
    pub judge: String,
    /// Sandbox fuel per program (its instruction budget).
    pub fuel: u64,
    /// Sandbox memory per program, in MiB.
    pub memory_mib: usize,
    /// Wall-clock limit per program, in milliseconds.
    pub timeout_ms: u64,
    /// Tool calls one program may make at most.
    pub max_host_calls: u32,
}

impl Default for EpisodeSpec {
    fn default() -> Self {
        // The sandbox's bounds have one home, the runtime's `Limits`: `exec` and an episode run alike.
        let sandbox = Limits::default();
        EpisodeSpec {
            max_turns: 3,
            max_new_tokens: 160,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 50,
            max_observation_chars: 1500,
            system_prompt: "short".into(),
            demonstration: true,
            judge: "rule".into(),
            fuel: sandbox.fuel,
            memory_mib: sandbox.memory_bytes >> 20,
            timeout_ms: sandbox.timeout.as_millis() as u64,
            max_host_calls: sandbox.max_host_calls,
        }
    }
}

impl EpisodeSpec {
    /// The sandbox's bounds for every program of an episode (output bytes: the sandbox's own default).
    pub fn limits(&self) -> Limits {
        Limits {
            fuel: self.fuel,
            memory_bytes: self.memory_mib << 20,
            timeout: Duration::from_millis(self.timeout_ms),
            max_host_calls: self.max_host_calls,
            ..Limits::default()
        }
    }

    /// How a reply is sampled under this spec, ending at `stop` (the environment's stop strings).
    pub fn sampling(&self, stop: Vec<String>) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            max_tokens: self.max_new_tokens,
            stop,
            ..SamplingParams::default()
        }
    }

    /// Checks ranges; the message names the key (as `[rollout]` spells it).
    pub fn validate(&self) -> Result<(), String> {
        if self.max_turns == 0 || self.max_new_tokens == 0 || self.max_observation_chars == 0 {
            return Err("max_turns / max_new_tokens / max_observation_chars: must be at least 1".into());
        }
        if !((0.0..=2.0).contains(&self.temperature) && self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err("temperature / top_p: temperature in [0, 2], top_p in (0, 1]".into());
        }
        if self.system_prompt.trim().is_empty() {
            return Err("system_prompt: empty".into());
        }
        if self.fuel == 0 || self.memory_mib == 0 || self.timeout_ms == 0 || self.max_host_calls == 0 {
            return Err("fuel / memory_mib / timeout_ms / max_host_calls: must be at least 1".into());
        }
        Ok(())
    }

    /// How an adapter trained with `trained` is measured under this spec: the way it was trained to play
    /// (prompt, demonstration, turns, reply length, observation size, sandbox bounds), with this spec's
    /// judge and sampling, which belong to the measurement, not to the adapter.
    pub fn played_as(&self, trained: &EpisodeSpec) -> EpisodeSpec {
        EpisodeSpec { judge: self.judge.clone(), temperature: self.temperature, top_p: self.top_p, top_k: self.top_k, ..trained.clone() }
    }

    /// The base model and spec an adapter was trained with, from `dir/agent.json` if `dir` has one; a
    /// file that is there but unreadable or malformed is an error naming it. Files saved before the spec
    /// held every key have the defaults for the keys they lack, and their nested `limits` read as the
    /// four sandbox keys.
    pub fn read_agent_file(dir: &Path) -> Result<Option<(String, EpisodeSpec)>, RolloutError> {
        let path = dir.join(AGENT_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let malformed = |reason: String| RolloutError::from(FileError::malformed(path.clone(), reason));
        let text = std::fs::read_to_string(&path).map_err(FileError::io(&path))?;
        let mut value: serde_json::Value = serde_json::from_str(&text).map_err(|e| malformed(format!("not JSON: {e}")))?;
        let object = value.as_object_mut().ok_or_else(|| malformed("not a JSON object".into()))?;
        if let Some(old) = object.remove("limits") {
            let limits: Limits = serde_json::from_value(old).map_err(|e| malformed(format!("`limits`: {e}")))?;
            object.insert("fuel".into(), limits.fuel.into());
            object.insert("memory_mib".into(), (limits.memory_bytes >> 20).into());
            object.insert("timeout_ms".into(), (limits.timeout.as_millis() as u64).into());
            object.insert("max_host_calls".into(), limits.max_host_calls.into());
        }
        let model = match object.remove("model") {
            Some(serde_json::Value::String(m)) if !m.trim().is_empty() => m,
            Some(_) => return Err(malformed("`model` must be a model name or path".into())),
            None => return Err(malformed("missing field `model`".into())),
        };
        let spec: EpisodeSpec = serde_json::from_value(value).map_err(|e| malformed(format!("not a valid episode spec: {e}")))?;
        spec.validate().map_err(malformed)?;
        Ok(Some((model, spec)))
    }

    /// Writes `dir/agent.json` atomically: `model` (the base model the adapter sits on) and this spec.
    pub fn write_agent_file(&self, dir: &Path, model: &str) -> Result<(), RolloutError> {
        // The base model first, then the spec's keys in their documented order.
        #[derive(Serialize)]
        struct AgentFile<'a> {
            model: &'a str,
            #[serde(flatten)]
            spec: &'a EpisodeSpec,
        }
        let path = dir.join(AGENT_FILE);
        let text = serde_json::to_string_pretty(&AgentFile { model, spec: self }).expect("an episode spec serialises") + "\n";
        agentrt_assets::write_atomic(&path, text.as_bytes()).map_err(|e| FileError::io(&path)(e).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_episode_runs_under_the_sandbox_s_own_default_limits() {
        // `agentrt exec` runs under `Limits::default()`; training's default.toml keys are held equal to
        // these by the trainer's key-by-key test.
        assert_eq!(EpisodeSpec::default().limits(), Limits::default());
    }

    #[test]
    fn agent_file_round_trips_and_bad_files_name_themselves() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(EpisodeSpec::read_agent_file(dir.path()).unwrap(), None);
        let spec = EpisodeSpec {
            system_prompt: "full".into(),
            demonstration: false,
            max_turns: 2,
            max_observation_chars: 900,
            max_host_calls: 5,
            ..EpisodeSpec::default()
        };
        spec.write_agent_file(dir.path(), "smollm2-135m").unwrap();
        assert_eq!(EpisodeSpec::read_agent_file(dir.path()).unwrap(), Some(("smollm2-135m".to_string(), spec)));

        std::fs::write(dir.path().join(AGENT_FILE), "{\"system_prompt\": \"short\"}").unwrap();
        let e = EpisodeSpec::read_agent_file(dir.path()).unwrap_err().to_string();
        assert!(e.contains("agent.json") && e.contains("missing field `model`"), "{e}");
        std::fs::write(dir.path().join(AGENT_FILE), "{\"model\": \"x\", \"max_turns\": 0}").unwrap();
        let e = EpisodeSpec::read_agent_file(dir.path()).unwrap_err().to_string();
        assert!(e.contains("agent.json") && e.contains("max_turns"), "{e}");
        std::fs::write(dir.path().join(AGENT_FILE), "{\"model\": \"x\", \"max_turnz\": 2}").unwrap();
        let e = EpisodeSpec::read_agent_file(dir.path()).unwrap_err().to_string();
        assert!(e.contains("agent.json") && e.contains("unknown field `max_turnz`"), "{e}");
    }

    #[test]
    fn agent_files_saved_before_the_spec_held_every_key_read_with_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(AGENT_FILE),
            "{\"model\": \"x\", \"system_prompt\": \"short\", \"demonstration\": true, \"max_turns\": 4, \"max_new_tokens\": 160}",
        )
        .unwrap();
        let (model, old) = EpisodeSpec::read_agent_file(dir.path()).unwrap().unwrap();
        assert_eq!((model.as_str(), &old), ("x", &EpisodeSpec { max_turns: 4, ..EpisodeSpec::default() }));
        std::fs::write(
            dir.path().join(AGENT_FILE),
            "{\"model\": \"x\", \"system_prompt\": \"full\", \"demonstration\": false, \"max_turns\": 2, \"max_new_tokens\": 96, \
             \"max_observation_chars\": 700, \"limits\": {\"fuel\": 7, \"memory_bytes\": 50331648, \"timeout\": 900, \"max_output_bytes\": 65536, \"max_host_calls\": 5}}",
        )
        .unwrap();
        let (_, old) = EpisodeSpec::read_agent_file(dir.path()).unwrap().unwrap();
        let expected = EpisodeSpec {
            system_prompt: "full".into(),
            demonstration: false,
            max_turns: 2,
            max_new_tokens: 96,
            max_observation_chars: 700,
            fuel: 7,
            memory_mib: 48,
            timeout_ms: 900,
            max_host_calls: 5,
            ..EpisodeSpec::default()
        };
        assert_eq!(old, expected);
        assert_eq!(old.limits(), Limits { fuel: 7, memory_bytes: 48 << 20, timeout: Duration::from_millis(900), max_host_calls: 5, ..Limits::default() });
    }

    #[test]
    fn an_adapter_is_measured_with_the_measurements_judge_and_sampling() {
        let trained = EpisodeSpec { judge: "openai:m@http://x/v1".into(), temperature: 1.2, max_turns: 2, demonstration: false, ..EpisodeSpec::default() };
        let measure = EpisodeSpec { temperature: 0.0, top_k: 7, ..EpisodeSpec::default() };
        let played = measure.played_as(&trained);
        assert_eq!(played, EpisodeSpec { judge: "rule".into(), temperature: 0.0, top_k: 7, ..trained });
    }
}
