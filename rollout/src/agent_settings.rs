//! How a trained adapter expects to be played, saved beside it (`agent.json`), so that
//! `agentrt eval --adapter DIR` and `agentrt generate --adapter DIR` play it as it was trained without a
//! flag: the base model, the system prompt, whether the worked demonstration is shown, the turns and the
//! reply length. Written by `agentrt train` and `agentrt sft` into every checkpoint; a flag given on the
//! command line still wins over it.

use crate::error::RolloutError;
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
}

impl AgentSettings {
    /// The settings saved in `dir` (a checkpoint or an adapter directory), if it has them; a file that is
    /// there but unreadable or malformed is an error naming it.
    pub fn read(dir: &Path) -> Result<Option<AgentSettings>, RolloutError> {
        let path = dir.join(AGENT_SETTINGS_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| RolloutError::Io { path: path.clone(), reason: e.to_string() })?;
        let settings: AgentSettings = serde_json::from_str(&text).map_err(|e| RolloutError::Io { path: path.clone(), reason: format!("not valid agent settings: {e}") })?;
        settings.validate().map_err(|reason| RolloutError::Io { path, reason })?;
        Ok(Some(settings))
    }

    /// Writes `dir/agent.json` atomically.
    pub fn write(&self, dir: &Path) -> Result<(), RolloutError> {
        let path = dir.join(AGENT_SETTINGS_FILE);
        let text = serde_json::to_string_pretty(self).expect("agent settings serialise") + "\n";
        agentrt_assets::write_atomic(&path, text.as_bytes()).map_err(|e| RolloutError::Io { path, reason: e.to_string() })
    }

    fn validate(&self) -> Result<(), String> {
        if self.model.trim().is_empty() {
            return Err("`model` is empty".into());
        }
        if self.system_prompt.trim().is_empty() {
            return Err("`system_prompt` is empty".into());
        }
        if self.max_turns == 0 || self.max_new_tokens == 0 {
            return Err("`max_turns` and `max_new_tokens` must be at least 1".into());
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
        let s = AgentSettings { model: "smollm2-135m".into(), system_prompt: "full".into(), demonstration: false, max_turns: 2, max_new_tokens: 256 };
        s.write(dir.path()).unwrap();
        assert_eq!(AgentSettings::read(dir.path()).unwrap(), Some(s));
        std::fs::write(dir.path().join(AGENT_SETTINGS_FILE), "{\"model\": \"x\"}").unwrap();
        let e = AgentSettings::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("agent.json") && e.contains("missing field"), "{e}");
        std::fs::write(dir.path().join(AGENT_SETTINGS_FILE), "{\"model\": \"x\", \"system_prompt\": \"full\", \"demonstration\": true, \"max_turns\": 0, \"max_new_tokens\": 9}").unwrap();
        let e = AgentSettings::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("max_turns"), "{e}");
    }
}
