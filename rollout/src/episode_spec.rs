//! How an episode is played, in every environment, as one serde type: the `[rollout]` keys of a training
//! config that shape an episode (`agentrt_trainer::TrainConfig::rollout` flattens it), and most of the
//! `agent.json` saved beside every trained adapter (`agentrt_environments::AgentSettings`). What only one
//! environment has (the wiki's prompt and judge, the code tests' bounds) is that environment's settings.
//!
//! An environment may adapt a spec to itself (the code environment plays one reply under its tests'
//! bounds: `agentrt_environments::EnvSection::played`); the spec read from a config or an `agent.json`
//! is always the one that was written, never an adapted one.

use agentrt_policy::SamplingParams;
use agentrt_runtime::Limits;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How an episode is played: the turn and reply budgets, sampling, the observation size and the sandbox's
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
    /// Sampling temperature of the replies that follow a tool's output, in `[0, 2]`; unset: `temperature`
    /// for every reply. In the find and scan recipes the program is the first reply and the answer the
    /// one after its output, so this explores the answer's span while the program stays as sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_after_tool: Option<f64>,
    /// Nucleus sampling: only the most likely tokens holding this much probability (1: all).
    pub top_p: f64,
    /// Only the k most likely tokens are sampled (0: all).
    pub top_k: usize,
    /// Characters of a tool's output the model sees per turn; a longer one is cut, with a note.
    pub max_observation_chars: usize,
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
            temperature_after_tool: None,
            top_p: 1.0,
            top_k: 50,
            max_observation_chars: 1500,
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

    /// How a reply that follows a tool's output is sampled, where `temperature_after_tool` says it differs
    /// from [`EpisodeSpec::sampling`].
    pub fn sampling_after_tool(&self, stop: Vec<String>) -> Option<SamplingParams> {
        self.temperature_after_tool.map(|temperature| SamplingParams { temperature, ..self.sampling(stop) })
    }

    /// Checks ranges; the message names the key (as `[rollout]` spells it).
    pub fn validate(&self) -> Result<(), String> {
        if self.max_turns == 0 || self.max_new_tokens == 0 || self.max_observation_chars == 0 {
            return Err("max_turns / max_new_tokens / max_observation_chars: must be at least 1".into());
        }
        if !((0.0..=2.0).contains(&self.temperature) && self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err("temperature / top_p: temperature in [0, 2], top_p in (0, 1]".into());
        }
        if let Some(t) = self.temperature_after_tool.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(format!("temperature_after_tool: {t} is outside [0, 2]"));
        }
        if self.fuel == 0 || self.memory_mib == 0 || self.timeout_ms == 0 || self.max_host_calls == 0 {
            return Err("fuel / memory_mib / timeout_ms / max_host_calls: must be at least 1".into());
        }
        Ok(())
    }

    /// How an adapter trained with `trained` is measured under this spec: the way it was trained to play
    /// (turns, reply length, observation size, sandbox bounds), with this spec's sampling, which belongs
    /// to the measurement, not to the adapter.
    pub fn played_as(&self, trained: &EpisodeSpec) -> EpisodeSpec {
        EpisodeSpec {
            temperature: self.temperature,
            temperature_after_tool: self.temperature_after_tool,
            top_p: self.top_p,
            top_k: self.top_k,
            ..trained.clone()
        }
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
    fn an_adapter_is_measured_with_the_measurements_sampling() {
        let trained = EpisodeSpec { temperature: 1.2, temperature_after_tool: Some(1.1), max_turns: 2, max_observation_chars: 700, ..EpisodeSpec::default() };
        let measure = EpisodeSpec { temperature: 0.0, top_k: 7, ..EpisodeSpec::default() };
        let played = measure.played_as(&trained);
        assert_eq!(played, EpisodeSpec { temperature: 0.0, temperature_after_tool: None, top_k: 7, ..trained });
    }

    #[test]
    fn replies_after_a_tool_sample_at_their_own_temperature_when_set() {
        let stop = vec!["</answer>".to_string()];
        let plain = EpisodeSpec { temperature: 0.8, ..EpisodeSpec::default() };
        assert_eq!(plain.sampling_after_tool(stop.clone()), None);
        let split = EpisodeSpec { temperature_after_tool: Some(1.2), ..plain.clone() };
        let after = split.sampling_after_tool(stop.clone()).expect("set");
        assert_eq!((after.temperature, after.top_p, after.max_tokens, after.stop.clone()), (1.2, plain.top_p, plain.max_new_tokens, stop.clone()));
        assert_eq!(split.sampling(stop).temperature, 0.8);
        assert!(EpisodeSpec { temperature_after_tool: Some(2.5), ..plain }.validate().unwrap_err().contains("temperature_after_tool"));
    }
}
