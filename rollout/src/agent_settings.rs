//! How a trained adapter expects to be played, saved beside it (`agent.json`), so that
//! `agentrt eval --adapter DIR` and `agentrt generate --adapter DIR` play it as it was trained without a
//! flag: the base model, the system prompt, whether the worked demonstration is shown, the turns and the
//! reply length. Written by `agentrt train` and `agentrt sft` into every checkpoint; a flag given on the
//! command line still wins over it.

use crate::error::RolloutError;
use crate::EpisodeConfig;
use agentrt_runtime::Limits;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file name, in a checkpoint directory (beside `adapters/`) or in a PEFT adapter directory.
pub const AGENT_SETTINGS_FILE: &str = "agent.json";

/// The settings an adapter was trained with (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    /// The base model: `smollm2-135m`, `qwen2.5-coder-0.5b`, a .gguf file or a safetensors directory.
    pub model: String,
    /// `short`, `full` or the system prompt's own text.
    pub system_prompt: String,
    /// Whether the worked demonstration precedes the question.
    pub demonstration: bool,
    /// Replies per episode at most (the answer included).
    pub max_turns: usize,
    /// Tokens per reply at most.
    pub max_new_tokens: usize,
    /// Characters of tool output the model saw per turn at most (absent in settings saved before it was
    /// recorded, and from `agentrt sft`, whose conversations carry their own observations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_observation_chars: Option<usize>,
    /// The sandbox's bounds per program while training (absent as above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

impl AgentSettings {
    /// The settings saved in `dir` (a checkpoint or an adapter directory), if it has them; a file that is
    /// there but unreadable or malformed is an error naming it.
    pub fn read(dir: &Path) -> Result<Option<AgentSettings>, RolloutError> {
        let path = dir.join(AGENT_SETTINGS_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| RolloutError::Io { path: path.clone(), source: e })?;
        let settings: AgentSettings =
            serde_json::from_str(&text).map_err(|e| RolloutError::Malformed { path: path.clone(), reason: format!("not valid agent settings: {e}") })?;
        settings.validate().map_err(|reason| RolloutError::Malformed { path, reason })?;
        Ok(Some(settings))
    }

    /// Writes `dir/agent.json` atomically.
    pub fn write(&self, dir: &Path) -> Result<(), RolloutError> {
        let path = dir.join(AGENT_SETTINGS_FILE);
        let text = serde_json::to_string_pretty(self).expect("agent settings serialise") + "\n";
        agentrt_assets::write_atomic(&path, text.as_bytes()).map_err(|e| RolloutError::Io { path, source: e })
    }

    /// `base` with what these settings recorded (turns, observation size, sandbox bounds) in its place.
    pub fn episode_config(&self, base: EpisodeConfig) -> EpisodeConfig {
        EpisodeConfig {
            max_turns: self.max_turns,
            max_observation_chars: self.max_observation_chars.unwrap_or(base.max_observation_chars),
            limits: self.limits.unwrap_or(base.limits),
            ..base
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.model.trim().is_empty() {
            return Err("`model` is empty".into());
        }
        if self.system_prompt.trim().is_empty() {
            return Err("`system_prompt` is empty".into());
        }
        if self.max_turns == 0 || self.max_new_tokens == 0 || self.max_observation_chars == Some(0) {
            return Err("`max_turns`, `max_new_tokens` and `max_observation_chars` must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_bad_files_name_themselves() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(AgentSettings::read(dir.path()).unwrap(), None);
        let s = AgentSettings {
            model: "smollm2-135m".into(),
            system_prompt: "full".into(),
            demonstration: false,
            max_turns: 2,
            max_new_tokens: 256,
            max_observation_chars: Some(900),
            limits: Some(Limits { max_host_calls: 5, ..Limits::default() }),
        };
        s.write(dir.path()).unwrap();
        assert_eq!(AgentSettings::read(dir.path()).unwrap(), Some(s));
        std::fs::write(dir.path().join(AGENT_SETTINGS_FILE), "{\"model\": \"x\"}").unwrap();
        let e = AgentSettings::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("agent.json") && e.contains("missing field"), "{e}");
        std::fs::write(
            dir.path().join(AGENT_SETTINGS_FILE),
            "{\"model\": \"x\", \"system_prompt\": \"full\", \"demonstration\": true, \"max_turns\": 0, \"max_new_tokens\": 9}",
        )
        .unwrap();
        let e = AgentSettings::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("max_turns"), "{e}");
    }

    #[test]
    fn settings_saved_before_observation_and_limits_were_recorded_keep_the_base_ones() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(AGENT_SETTINGS_FILE),
            "{\"model\": \"x\", \"system_prompt\": \"short\", \"demonstration\": true, \"max_turns\": 4, \"max_new_tokens\": 160}",
        )
        .unwrap();
        let old = AgentSettings::read(dir.path()).unwrap().unwrap();
        assert_eq!((old.max_observation_chars, old.limits), (None, None));
        let base = EpisodeConfig { max_turns: 3, max_observation_chars: 700, ..EpisodeConfig::default() };
        assert_eq!(old.episode_config(base.clone()), EpisodeConfig { max_turns: 4, ..base.clone() });
        let limits = Limits { fuel: 7, ..Limits::default() };
        let new = AgentSettings { max_observation_chars: Some(900), limits: Some(limits), ..old };
        assert_eq!(new.episode_config(base.clone()), EpisodeConfig { max_turns: 4, max_observation_chars: 900, limits, ..base });
    }
}
