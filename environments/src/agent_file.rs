//! `agent.json`: how an adapter was trained to play, saved beside every trained adapter (a checkpoint of
//! `agentrt train` or `agentrt sft`), so that `agentrt eval --adapter DIR`, `agentrt generate --adapter DIR`
//! and `agentrt serve` play it as it was trained without a flag.
//!
//! The file is flat JSON: `model` (the base model), the wiki's `system_prompt` and `demonstration`, the
//! [`EpisodeSpec`]'s keys, and `environment` when it was trained in another than the wiki. Files written by earlier versions read as they meant: a nested `limits` as the
//! four sandbox keys, a key the spec did not have yet as its default, and a `judge` (which belongs to a
//! measurement, not to the adapter) dropped.

use crate::wiki::{Demonstration, WikiSection};
use agentrt_assets::FileError;
use agentrt_rollout::{EpisodeSpec, RolloutError};
use agentrt_runtime::Limits;
use serde::Serialize;
use std::path::Path;

/// The file name, in a checkpoint directory (beside `adapters/`) or in a PEFT adapter directory.
pub const AGENT_FILE: &str = "agent.json";

/// How an adapter was trained to play.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentSettings {
    /// The base model the adapter sits on (a named model or a path).
    pub model: String,
    /// The wiki's system prompt it was trained with: `short`, `full`, or the prompt's own text.
    pub system_prompt: String,
    /// The worked episode it was shown before every question (`true`: the built-in one; `false`: none;
    /// or a file of turns).
    pub demonstration: Demonstration,
    /// Its turns, reply length, sampling, observation size and sandbox bounds.
    #[serde(flatten)]
    pub spec: EpisodeSpec,
    /// The environment it was trained in, when not the wiki (`code`, or an environment package's folder,
    /// absolute): what `eval --adapter` plays it in without `--env`. Absent for the wiki, so its files
    /// read as they always did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
}

/// The value of `model.init_adapter` that names the adapter this project ships for the model and
/// environment trained ([`shipped_adapter`]); where none is shipped, fresh adapters.
pub const SHIPPED: &str = "shipped";

/// The adapters this project ships, by environment and base model: `(environment, model, folder)`.
const SHIPPED_ADAPTERS: &[(&str, &str, &str)] = &[(crate::wiki::NAME, "smollm2-135m", "models/smollm2-135m-wiki-read")];

/// The folder of the adapter this project ships for `model` in `env` (found from any folder: the
/// checkout's `models/`), if it ships one.
pub fn shipped_adapter(env: &str, model: &str) -> Option<std::path::PathBuf> {
    let (_, _, folder) = SHIPPED_ADAPTERS.iter().find(|(e, m, _)| *e == env && *m == model)?;
    agentrt_assets::data_file(Path::new(folder), "model.init_adapter").ok()
}

impl AgentSettings {
    /// The settings of an adapter trained on `model` with `spec` and the wiki's prompt settings `wiki`.
    pub fn new(model: &str, spec: &EpisodeSpec, wiki: &WikiSection) -> AgentSettings {
        AgentSettings {
            model: model.into(),
            system_prompt: wiki.system_prompt.clone(),
            demonstration: wiki.demonstration.clone(),
            spec: spec.clone(),
            environment: None,
        }
    }
    /// These settings of an adapter trained in the environment `env.name` names: recorded unless it is
    /// the wiki (a package's folder made absolute, so the adapter finds it from anywhere).
    pub fn trained_in(self, env: &crate::EnvSection) -> AgentSettings {
        let environment = match env.name.as_str() {
            crate::wiki::NAME => None,
            crate::code::NAME => Some(env.name.clone()),
            folder => Some(std::fs::canonicalize(folder).map_or_else(|_| folder.to_string(), |p| p.display().to_string())),
        };
        AgentSettings { environment, ..self }
    }

    /// `dir/agent.json` if `dir` has one; a file that is there but unreadable or malformed is an error
    /// naming it.
    pub fn read(dir: &Path) -> Result<Option<AgentSettings>, RolloutError> {
        let path = dir.join(AGENT_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let malformed = |reason: String| RolloutError::from(FileError::malformed(path.clone(), reason));
        let text = std::fs::read_to_string(&path).map_err(FileError::io(&path))?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| malformed(format!("not JSON: {e}")))?;
        AgentSettings::from_json(value).map(Some).map_err(malformed)
    }

    /// The settings an `agent.json` holds, given as JSON (as `agentrt serve` lists them in `/v1/models`), read
    /// as [`AgentSettings::read`] reads the file; the error says what is wrong, for the caller to name where
    /// the JSON came from.
    pub fn from_json(mut value: serde_json::Value) -> Result<AgentSettings, String> {
        let object = value.as_object_mut().ok_or("not a JSON object")?;
        if let Some(old) = object.remove("limits") {
            let limits: Limits = serde_json::from_value(old).map_err(|e| format!("`limits`: {e}"))?;
            object.insert("fuel".into(), limits.fuel.into());
            object.insert("memory_mib".into(), (limits.memory_bytes >> 20).into());
            object.insert("timeout_ms".into(), (limits.timeout.as_millis() as u64).into());
            object.insert("max_host_calls".into(), limits.max_host_calls.into());
        }
        object.remove("judge");
        let model = match object.remove("model") {
            Some(serde_json::Value::String(m)) if !m.trim().is_empty() => m,
            Some(_) => return Err("`model` must be a model name or path".into()),
            None => return Err("missing field `model`".into()),
        };
        let wiki = WikiSection::default();
        let system_prompt = match object.remove("system_prompt") {
            Some(serde_json::Value::String(p)) if !p.trim().is_empty() => p,
            Some(_) => return Err("`system_prompt` must be `short`, `full` or the prompt's text".into()),
            None => wiki.system_prompt,
        };
        let demonstration = match object.remove("demonstration") {
            Some(serde_json::Value::Bool(d)) => Demonstration::Builtin(d),
            Some(serde_json::Value::String(f)) if !f.trim().is_empty() => Demonstration::File(f),
            Some(_) => return Err("`demonstration` must be true, false or a file of turns".into()),
            None => wiki.demonstration,
        };
        let environment = match object.remove("environment") {
            Some(serde_json::Value::String(e)) if !e.trim().is_empty() => Some(e),
            Some(_) => return Err("`environment` must be `code` or an environment package's folder".into()),
            None => None,
        };
        let spec: EpisodeSpec = serde_json::from_value(value).map_err(|e| format!("not a valid episode spec: {e}"))?;
        spec.validate()?;
        Ok(AgentSettings { model, system_prompt, demonstration, spec, environment })
    }

    /// Writes `dir/agent.json` atomically.
    pub fn write(&self, dir: &Path) -> Result<(), RolloutError> {
        let path = dir.join(AGENT_FILE);
        let text = serde_json::to_string_pretty(self).expect("agent settings serialise") + "\n";
        agentrt_assets::write_atomic(&path, text.as_bytes()).map_err(|e| FileError::io(&path)(e).into())
    }

    /// The model a command loads: `given` (its `--model`), else the base model of the adapter's settings
    /// `trained`, else the default model.
    pub fn base_model(given: Option<&str>, trained: Option<&AgentSettings>) -> String {
        given.map(str::to_string).or_else(|| trained.map(|a| a.model.clone())).unwrap_or_else(|| agentrt_policy::DEFAULT_MODEL_NAME.into())
    }

    /// `wiki` as this adapter was trained to be prompted (its questions and judge kept).
    pub fn prompted(&self, wiki: &WikiSection) -> WikiSection {
        WikiSection { system_prompt: self.system_prompt.clone(), demonstration: self.demonstration.clone(), ..wiki.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An adapter trained outside the wiki records where: `code`, or a package's folder made absolute; the
    /// wiki's file has no `environment` key, as before.
    #[test]
    fn the_environment_an_adapter_was_trained_in_is_recorded_unless_the_wiki() {
        let dir = tempfile::tempdir().unwrap();
        let base = AgentSettings::new("m", &EpisodeSpec::default(), &WikiSection::default());
        let env = |name: &str| crate::EnvSection { name: name.into(), ..crate::EnvSection::default() };
        assert_eq!(base.clone().trained_in(&env("wiki")).environment, None);
        assert_eq!(base.clone().trained_in(&env("code")).environment.as_deref(), Some("code"));
        let folder = base.clone().trained_in(&env(dir.path().to_str().unwrap())).environment.unwrap();
        assert!(std::path::Path::new(&folder).is_absolute());
        let wiki_json = serde_json::to_value(&base).unwrap();
        assert!(wiki_json.get("environment").is_none(), "{wiki_json}");
        let coded = base.trained_in(&env("code"));
        coded.write(dir.path()).unwrap();
        assert_eq!(AgentSettings::read(dir.path()).unwrap(), Some(coded));
        let bad = serde_json::json!({"model": "m", "environment": 3});
        assert!(AgentSettings::from_json(bad).unwrap_err().contains("`environment`"));
    }

    #[test]
    fn agent_file_round_trips_and_bad_files_name_themselves() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(AgentSettings::read(dir.path()).unwrap(), None);
        let spec = EpisodeSpec { max_turns: 2, max_observation_chars: 900, max_host_calls: 5, ..EpisodeSpec::default() };
        let wiki = WikiSection { system_prompt: "full".into(), demonstration: false.into(), ..WikiSection::default() };
        let settings = AgentSettings::new("smollm2-135m", &spec, &wiki);
        settings.write(dir.path()).unwrap();
        assert_eq!(AgentSettings::read(dir.path()).unwrap(), Some(settings.clone()));
        assert_eq!(
            settings.prompted(&WikiSection::default()),
            WikiSection { system_prompt: "full".into(), demonstration: false.into(), ..WikiSection::default() }
        );
        // The model: the flag, else the adapter's base, else the default.
        assert_eq!(AgentSettings::base_model(Some("m.gguf"), Some(&settings)), "m.gguf");
        assert_eq!(AgentSettings::base_model(None, Some(&settings)), "smollm2-135m");
        assert_eq!(AgentSettings::base_model(None, None), agentrt_policy::DEFAULT_MODEL_NAME);

        for (text, said) in [
            ("{\"system_prompt\": \"short\"}", "missing field `model`"),
            ("{\"model\": \"x\", \"max_turns\": 0}", "max_turns"),
            ("{\"model\": \"x\", \"max_turnz\": 2}", "unknown field `max_turnz`"),
            ("{\"model\": \"x\", \"demonstration\": 3}", "`demonstration` must be true, false or a file of turns"),
        ] {
            std::fs::write(dir.path().join(AGENT_FILE), text).unwrap();
            let e = AgentSettings::read(dir.path()).unwrap_err().to_string();
            assert!(e.contains("agent.json") && e.contains(said), "{e}");
        }
    }

    #[test]
    fn agent_files_of_earlier_versions_read_as_they_meant() {
        let dir = tempfile::tempdir().unwrap();
        // Before the spec held every key: the defaults for the rest.
        std::fs::write(
            dir.path().join(AGENT_FILE),
            "{\"model\": \"x\", \"system_prompt\": \"short\", \"demonstration\": true, \"max_turns\": 4, \"max_new_tokens\": 160}",
        )
        .unwrap();
        let old = AgentSettings::read(dir.path()).unwrap().unwrap();
        assert_eq!(old, AgentSettings::new("x", &EpisodeSpec { max_turns: 4, ..EpisodeSpec::default() }, &WikiSection::default()));
        // The nested `limits` of the first files, and the `judge` every file carried until the wiki's
        // settings left the spec.
        std::fs::write(
            dir.path().join(AGENT_FILE),
            "{\"model\": \"x\", \"system_prompt\": \"full\", \"demonstration\": false, \"judge\": \"rule\", \"max_turns\": 2, \"max_new_tokens\": 96, \
             \"max_observation_chars\": 700, \"limits\": {\"fuel\": 7, \"memory_bytes\": 50331648, \"timeout\": 900, \"max_output_bytes\": 65536, \"max_host_calls\": 5}}",
        )
        .unwrap();
        let old = AgentSettings::read(dir.path()).unwrap().unwrap();
        let spec = EpisodeSpec {
            max_turns: 2,
            max_new_tokens: 96,
            max_observation_chars: 700,
            fuel: 7,
            memory_mib: 48,
            timeout_ms: 900,
            max_host_calls: 5,
            ..EpisodeSpec::default()
        };
        assert_eq!((old.system_prompt.as_str(), &old.demonstration, &old.spec), ("full", &Demonstration::Builtin(false), &spec));
        assert_eq!(old.spec.limits(), Limits { fuel: 7, memory_bytes: 48 << 20, timeout: Duration::from_millis(900), max_host_calls: 5, ..Limits::default() });
    }
}
