//! The policy flags shared by every command that plays episodes with a chosen policy (`eval`,
//! `trajectories sample`), how they become a [`TurnPolicy`], and the episode runner those commands build
//! over a sandbox: one construction, so a policy plays the same wherever it is measured or sampled.

use agentrt_environments::{EnvSection, Environment, WikiSettings};
use agentrt_policy::{ModelSource, Policy, SamplingParams};
use agentrt_rollout::{AgentSettings, EpisodeConfig, LocalPolicy, OpenAiPolicy, OpenAiPolicyConfig, RandomPolicy, TurnPolicy};
use agentrt_runtime::Sandbox;
use agentrt_trainer::TrainConfig;
use std::path::PathBuf;
use std::sync::Arc;

/// Which policy plays: a local model (with a trained adapter or without), a baseline, or an endpoint.
#[derive(clap::Args, Clone, Debug)]
pub struct PolicyOptions {
    /// The local model: `smollm2-135m`, `qwen2.5-coder-0.5b`, a .gguf file or a safetensors directory.
    /// Default: the adapter's own base model (its `agent.json`), else smollm2-135m.
    #[arg(long)]
    pub model: Option<String>,
    /// A trained adapter: a checkpoint directory of `agentrt train` / `agentrt sft` (or a copy of one, like
    /// `models/...`) or a PEFT adapter directory. Its `agent.json` supplies the base model, prompt, turns
    /// and reply length it was trained with, as defaults that flags override.
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// Inference scales of the retain and forget adapters (`1,0` ablates the forget adapter).
    #[arg(long, default_value = "1,1")]
    pub adapter_scales: String,
    /// A baseline instead of the model: `zero-shot` (the model without adapter) or `random`.
    #[arg(long)]
    pub baseline: Option<String>,
    /// Any OpenAI-compatible endpoint as the policy: `openai:MODEL@BASE_URL` (several servers:
    /// `openai:MODEL@URL1,URL2`, conversations spread over them).
    #[arg(long, conflicts_with_all = ["baseline", "adapter"])]
    pub policy: Option<String>,
    /// With --policy: play the endpoint the way this adapter was trained (its `agent.json`: prompt,
    /// demonstration, turns, reply length), e.g. when the server serves that adapter (`agentrt serve`).
    /// An adapter directory or an `agent.json` file.
    #[arg(long, requires = "policy")]
    pub agent_settings: Option<PathBuf>,
    /// With --policy: send tool output as `tool` messages (rendered by the server with the model's own chat
    /// template, as in training: vLLM, agentrt serve, Ollama, llama.cpp) or as `user` messages starting
    /// `Tool output:` (APIs that take `tool` messages only after their own tool calls, like OpenAI's).
    #[arg(long, default_value = "tool", value_parser = ["tool", "user"])]
    pub tool_turns: String,
    /// Tokens per reply at most. Default: the adapter's `agent.json`, else the environment's (wiki 160,
    /// code 512).
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// Sample only among the k most likely tokens (0: all; transformers' default is 50). With --policy it is sent
    /// as vLLM's `top_k` when sampling: pass 0 for APIs without it (OpenAI's).
    #[arg(long, default_value_t = 50)]
    pub top_k: usize,
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// What [`PolicyOptions::load`] loaded: the local model when one plays, and the policy's name for reports.
pub struct LoadedPolicy {
    pub local: Option<Policy>,
    /// The adapter's `agent.json`, when an adapter with one plays.
    pub settings: Option<AgentSettings>,
    /// Tokens per reply at most: the flag, else the adapter's settings, else the wiki's default (`eval --env
    /// code` replaces that with the code environment's).
    pub max_new_tokens: usize,
    /// `smollm2-135m zero-shot`, `MODEL + ADAPTER (scales r,f)`, `random baseline` or the endpoint spec.
    pub name: String,
}

impl PolicyOptions {
    /// Loads the local model and its adapter when the flags name one (nothing for an endpoint or the random
    /// baseline).
    pub fn load(&self) -> anyhow::Result<LoadedPolicy> {
        if self.baseline.as_deref() == Some("zero-shot") && self.adapter.is_some() {
            anyhow::bail!("--baseline zero-shot evaluates the model without an adapter: drop --adapter");
        }
        let scales: Vec<f64> = self
            .adapter_scales
            .split(',')
            .map(|x| x.trim().parse())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("--adapter-scales {:?}: {e}", self.adapter_scales))?;
        anyhow::ensure!(scales.len() == 2, "--adapter-scales takes two numbers, retain,forget");
        let settings = match (&self.policy, &self.baseline, &self.adapter) {
            (None, None, Some(dir)) => AgentSettings::read(dir)?,
            (Some(_), _, _) => match &self.agent_settings {
                Some(p) => {
                    let dir = if p.is_file() { p.parent().unwrap_or(p.as_path()) } else { p.as_path() };
                    Some(AgentSettings::read(dir)?.ok_or_else(|| anyhow::anyhow!("--agent-settings {}: no agent.json there", p.display()))?)
                }
                None => None,
            },
            _ => None,
        };
        let max_new_tokens = self.max_new_tokens.or(settings.as_ref().map(|s| s.max_new_tokens)).unwrap_or(agentrt_environments::WIKI_MAX_NEW_TOKENS);
        let model = self.model.clone().or(settings.as_ref().map(|s| s.model.clone())).unwrap_or_else(|| agentrt_policy::DEFAULT_MODEL_NAME.into());
        Ok(match (&self.policy, self.baseline.as_deref()) {
            (Some(p), _) => LoadedPolicy { local: None, settings, max_new_tokens, name: p.clone() },
            (None, Some("random")) => LoadedPolicy { local: None, settings, max_new_tokens, name: "random baseline".into() },
            (None, Some("zero-shot")) | (None, None) => {
                let device = agentrt_policy::parse_device(&self.device)?;
                let mut p = Policy::load(&ModelSource::parse(&model), &device)?;
                let mut name = format!("{model} zero-shot");
                if self.baseline.is_none() {
                    if let Some(dir) = &self.adapter {
                        p.load_adapters(&agentrt_trainer::warm_start::adapters_dir(dir))?;
                        p.set_adapter_scales(scales[0], scales[1]);
                        name = format!("{model} + {} (scales {},{})", dir.display(), scales[0], scales[1]);
                    }
                }
                LoadedPolicy { local: Some(p), settings, max_new_tokens, name }
            }
            (None, Some(other)) => anyhow::bail!("--baseline {other:?}: expected zero-shot or random"),
        })
    }

    /// Whether the random baseline plays (it reads no demonstration).
    pub fn is_random(&self) -> bool {
        self.policy.is_none() && self.baseline.as_deref() == Some("random")
    }

    /// The sampling settings these flags, the loaded adapter's settings, `temperature` (0 is greedy) and
    /// the environment's `stop` strings describe.
    pub fn sampling(&self, loaded: &LoadedPolicy, temperature: f64, stop: &[String]) -> SamplingParams {
        SamplingParams { temperature, top_k: self.top_k, max_tokens: loaded.max_new_tokens, stop: stop.to_vec(), ..SamplingParams::default() }
    }

    /// The policy that plays `plan`'s environment: the endpoint, the loaded model, or the random baseline.
    pub fn turn_policy<'a>(&self, loaded: &'a LoadedPolicy, temperature: f64, seed: u64, plan: &EpisodePlan) -> anyhow::Result<Box<dyn TurnPolicy + 'a>> {
        let params = self.sampling(loaded, temperature, &plan.env.stop_strings());
        Ok(match (&self.policy, &loaded.local) {
            (Some(spec), _) => {
                let mut c = OpenAiPolicyConfig::parse(spec)?;
                c.temperature = temperature;
                c.max_tokens = loaded.max_new_tokens;
                c.stop = params.stop.clone();
                c.tool_turns = agentrt_rollout::ToolTurns::parse(&self.tool_turns)?;
                c.top_k = self.top_k;
                Box::new(OpenAiPolicy::new(c)?)
            }
            (None, Some(p)) => Box::new(LocalPolicy::new(p, params, seed)),
            (None, None) => Box::new(RandomPolicy::new(seed)),
        })
    }
}

/// How a command's episodes run: the environment, its episode bounds (turns, observation size, sandbox
/// limits), the system prompt and whether the worked demonstration is shown. Built from what `agentrt
/// train` plays ([`EpisodePlan::of_training`]), then what an adapter was trained with, then the command's
/// flags, so a policy is measured the way it was trained.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodePlan {
    /// The environment and its own keys (`[env]`).
    pub env: EnvSection,
    pub config: EpisodeConfig,
    /// `short`, `full` or the prompt's own text.
    pub system_prompt: String,
    pub demonstration: bool,
    /// `rule`, `rule:0.5` or `openai:MODEL@URL` (the wiki's).
    pub judge: String,
}

impl EpisodePlan {
    /// What `agentrt train` plays with `config`.
    pub fn of_training(config: &TrainConfig) -> Self {
        EpisodePlan {
            env: config.env.clone(),
            config: agentrt_trainer::episode_config(config),
            system_prompt: config.rollout.system_prompt.clone(),
            demonstration: config.rollout.demonstration,
            judge: config.rollout.judge.clone(),
        }
    }

    /// The environment these settings describe, in `sandbox`: the one construction `agentrt train` uses
    /// too ([`Environment::build`]).
    pub fn environment(&self, sandbox: Arc<Sandbox>) -> anyhow::Result<Environment> {
        let wiki = WikiSettings { system_prompt: self.system_prompt.clone(), demonstration: self.demonstration, judge: self.judge.clone() };
        Ok(Environment::build(&self.env, &wiki, self.config.clone(), sandbox)?)
    }

    /// As the adapter whose `agent.json` this is was trained, where it says.
    pub fn with_agent(self, agent: Option<&AgentSettings>) -> Self {
        match agent {
            None => self,
            Some(a) => EpisodePlan { config: a.episode_config(self.config), system_prompt: a.system_prompt.clone(), demonstration: a.demonstration, ..self },
        }
    }

    /// The command's flags, where given, over everything else.
    pub fn with_flags(mut self, max_turns: Option<usize>, system_prompt: Option<&String>, demonstration: Option<bool>, judge: Option<&String>) -> Self {
        if let Some(j) = judge {
            self.judge = j.clone();
        }
        if let Some(t) = max_turns {
            self.config.max_turns = t;
        }
        if let Some(p) = system_prompt {
            self.system_prompt = p.clone();
        }
        if let Some(d) = demonstration {
            self.demonstration = d;
        }
        self
    }
}
