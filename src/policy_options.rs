//! The policy flags shared by every command that plays episodes with a chosen policy (`eval`,
//! `trajectories sample`), what such a command plays ([`PolicyOptions::played`]: a training config,
//! whose environment `Environment::build` builds as `train` does) and how the flags become a
//! [`TurnPolicy`]: one construction, so a policy plays the same wherever it is measured or sampled.

use agentrt_environments::wiki::{Demonstration, RandomPolicy};
use agentrt_environments::{AgentSettings, Environment};
use agentrt_policy::{ModelSource, Policy};
use agentrt_rollout::{LocalPolicy, OpenAiPolicy, OpenAiPolicyConfig, TurnPolicy};
use agentrt_trainer::TrainConfig;
use std::path::PathBuf;

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
    /// demonstration, turns, reply length). An adapter directory or an `agent.json` file. Default: the
    /// settings the server lists for the model (`agentrt serve` lists a served adapter's agent.json in
    /// /v1/models; other servers list none, and the defaults play); a server whose settings differ from
    /// these is warned of.
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
    /// Where the local model runs: `cpu`, or `cuda:N` (a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// What the local model's decoding multiplies its GGUF blocks with: `f32` (the training forward's
    /// products) or `int8` (activations rounded to 8 bits per 32 values, as a run with
    /// `rollout.sampler_activations = "int8"` samples and its `run.eval_activations = "int8"` evaluates:
    /// 2-3.5x faster on Qwen's prompts). Compare two adapters with the same.
    #[arg(long, default_value = "f32")]
    pub decode_activations: agentrt_policy::DecodeActivations,
}

/// What [`PolicyOptions::load`] loaded: the local model when one plays, and the policy's name for reports.
pub struct LoadedPolicy {
    pub local: Option<Policy>,
    /// How the adapter was trained to play (its `agent.json`), when an adapter with one plays.
    pub trained: Option<AgentSettings>,
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
        // A run directory given for an adapter is refused with its newest checkpoint named.
        let adapter = self.adapter.as_deref().map(|d| agentrt_trainer::warm_start::checked_adapter_dir(d, "--adapter")).transpose()?;
        let agent_file = match (&self.policy, &self.baseline, &adapter) {
            (None, None, Some(dir)) => AgentSettings::read(dir)?,
            (Some(spec), _, _) => {
                let given = match &self.agent_settings {
                    Some(p) => {
                        let dir = if p.is_file() { p.parent().unwrap_or(p.as_path()) } else { p.as_path() };
                        let settings = AgentSettings::read(dir)?.ok_or_else(|| anyhow::anyhow!("--agent-settings {}: no agent.json there", p.display()))?;
                        Some((p.as_path(), settings))
                    }
                    None => None,
                };
                endpoint_settings(spec, given)?
            }
            _ => None,
        };
        let model = AgentSettings::base_model(self.model.as_deref(), agent_file.as_ref());
        let trained = agent_file;
        Ok(match (&self.policy, self.baseline.as_deref()) {
            (Some(p), _) => LoadedPolicy { local: None, trained, name: p.clone() },
            (None, Some("random")) => LoadedPolicy { local: None, trained, name: "random baseline".into() },
            (None, Some("zero-shot")) | (None, None) => {
                let device = agentrt_policy::parse_device(&self.device)?;
                // Evaluation and trajectories only sample: the GGUF's blocks without an f32 copy.
                let mut p = Policy::load_for_inference(&ModelSource::parse(&model), &device)?;
                if p.decoder.set_decode_activations(self.decode_activations) != self.decode_activations {
                    // Saying int8 over f32 weights would report a decoding that did not happen.
                    anyhow::bail!("--decode-activations int8: {model} has no GGUF blocks (int8 activations multiply a GGUF's blocks); leave it at f32");
                }
                let mut name = format!("{model} zero-shot");
                if self.baseline.is_none() {
                    if let Some(dir) = &adapter {
                        p.load_adapters(&agentrt_trainer::warm_start::adapters_dir(dir))?;
                        p.set_adapter_scales(scales[0], scales[1]);
                        name = format!("{model} + {} (scales {},{})", dir.display(), scales[0], scales[1]);
                    }
                }
                if self.decode_activations == agentrt_policy::DecodeActivations::Int8 {
                    name.push_str(", int8 activations");
                }
                LoadedPolicy { local: Some(p), trained, name }
            }
            (None, Some(other)) => anyhow::bail!("--baseline {other:?}: expected zero-shot or random"),
        })
    }

    /// Whether the random baseline plays (it reads no demonstration).
    pub fn is_random(&self) -> bool {
        self.policy.is_none() && self.baseline.as_deref() == Some("random")
    }

    /// What a command plays with this policy: `config`'s environment and episode spec (`given`: a config
    /// the user gave, which is played as it stands; otherwise the training defaults, played as the loaded
    /// adapter was trained, its `agent.json`), then `temperature` and these flags' sampling over it. With
    /// neither a config, an adapter's settings nor `--max-new-tokens`, a reply is as long as the
    /// environment's replies need ([`agentrt_environments::Package::default_max_new_tokens`]). An
    /// environment that cannot be read (a package folder without its manifest) is an error.
    pub fn played(&self, mut config: TrainConfig, given: bool, loaded: &LoadedPolicy, temperature: f64) -> anyhow::Result<TrainConfig> {
        match (&loaded.trained, given) {
            (Some(trained), false) => {
                config.rollout.episode = config.rollout.episode.played_as(&trained.spec);
                config.env.wiki = trained.prompted(&config.env.wiki);
                // In the environment it was trained in, unless --env named another.
                if let (Some(env), agentrt_environments::wiki::NAME) = (&trained.environment, config.env.name.as_str()) {
                    config.env.select(env).map_err(anyhow::Error::msg)?;
                }
            }
            (None, false) => config.rollout.episode.max_new_tokens = config.env.package().map_err(anyhow::Error::msg)?.default_max_new_tokens(),
            (_, true) => {}
        }
        let spec = &mut config.rollout.episode;
        spec.temperature = temperature;
        spec.top_k = self.top_k;
        if let Some(n) = self.max_new_tokens {
            spec.max_new_tokens = n;
        }
        Ok(config)
    }

    /// The policy that plays `environment`, sampling as its spec says (the endpoint, the loaded model, or
    /// the random baseline).
    pub fn turn_policy<'a>(&self, loaded: &'a LoadedPolicy, seed: u64, environment: &Environment) -> anyhow::Result<Box<dyn TurnPolicy + 'a>> {
        let params = environment.sampling();
        Ok(match (&self.policy, &loaded.local) {
            (Some(spec), _) => {
                anyhow::ensure!(
                    environment.sampling_after_tool().is_none(),
                    "rollout.temperature_after_tool is set, but an endpoint ({spec}) samples every reply alike: leave it unset or play a local model"
                );
                let mut c = OpenAiPolicyConfig::parse(spec)?;
                c.temperature = params.temperature;
                c.max_tokens = params.max_tokens;
                c.stop = params.stop.clone();
                c.tool_turns = agentrt_rollout::ToolTurns::parse(&self.tool_turns)?;
                c.top_p = params.top_p;
                c.top_k = params.top_k;
                Box::new(OpenAiPolicy::new(c)?)
            }
            (None, Some(p)) => Box::new(LocalPolicy::new(p, params, seed).with_after_tool(environment.sampling_after_tool())),
            (None, None) => Box::new(RandomPolicy::new(seed)),
        })
    }
}

/// How the endpoint `spec` plays: `given` (`--agent-settings PATH`, read) or else the settings its first
/// server lists for the model ([`served_settings`]), warning where the two differ or the server's cannot be
/// used, naming both.
fn endpoint_settings(spec: &str, given: Option<(&std::path::Path, AgentSettings)>) -> anyhow::Result<Option<AgentSettings>> {
    let config = OpenAiPolicyConfig::parse(spec)?;
    let server = format!("{}/models", config.base_urls[0]);
    let model = config.model.clone();
    let served = served_settings(config);
    Ok(match (given, served) {
        (Some((path, given)), Some(Ok(served))) => {
            let differ = differing_keys(&given, &served);
            if !differ.is_empty() {
                tracing::warn!(
                    "--agent-settings {} differs from the agent settings {server} lists for `{model}` (the served adapter's agent.json) in {}: playing --agent-settings",
                    path.display(),
                    differ.join(", ")
                );
            }
            Some(given)
        }
        (Some((path, given)), Some(Err(why))) => {
            tracing::warn!("{server} lists agent settings for `{model}` that cannot be used here ({why}): playing --agent-settings {}", path.display());
            Some(given)
        }
        (Some((_, given)), None) => Some(given),
        (None, Some(Ok(served))) => {
            tracing::info!("playing `{model}` as {server} lists its agent settings (the served adapter's agent.json); --agent-settings overrides them");
            Some(served)
        }
        (None, Some(Err(why))) => {
            tracing::warn!(
                "{server} lists agent settings for `{model}` that cannot be used here ({why}): playing the default prompt and turns; \
                 pass --agent-settings with the adapter's agent.json to play it as it was trained"
            );
            None
        }
        (None, None) => None,
    })
}

/// The agent settings the first server of `config` lists for its model (`agentrt serve`'s `agent_settings`
/// in `/v1/models`), or why they cannot be used here; none where the server lists none (vLLM, OpenAI) or
/// could not be asked (warned of: the evaluation's own requests then say what is wrong).
fn served_settings(mut config: OpenAiPolicyConfig) -> Option<Result<AgentSettings, String>> {
    let server = config.base_urls[0].clone();
    // A list, not a reply: a server that takes longer is not worth the evaluation's wait.
    config.timeout = config.timeout.min(std::time::Duration::from_secs(30));
    let asked = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string()).and_then(|runtime| {
        let policy = OpenAiPolicy::new(config).map_err(|e| e.to_string())?;
        runtime.block_on(policy.served_agent_settings()).map_err(|e| e.to_string())
    });
    let value = match asked {
        Ok(value) => value?,
        Err(why) => {
            tracing::warn!("could not list the models of {server} ({why}): playing without the served adapter's agent settings");
            return None;
        }
    };
    Some(AgentSettings::from_json(value).and_then(|settings| match &settings.demonstration {
        // A file of turns is read where the evaluation runs: one only the server has cannot be shown.
        Demonstration::File(f) if !std::path::Path::new(f).is_file() => Err(format!("its demonstration is the file {f}, which is not on this machine")),
        _ => Ok(settings),
    }))
}

/// The keys of `agent.json` whose values differ between `a` and `b`, except the base model (a client of a
/// server does not load it).
fn differing_keys(a: &AgentSettings, b: &AgentSettings) -> Vec<String> {
    let (a, b) = (serde_json::to_value(a).unwrap_or_default(), serde_json::to_value(b).unwrap_or_default());
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else { return vec!["(unreadable)".into()] };
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter().filter(|k| k.as_str() != "model" && a.get(*k) != b.get(*k)).cloned().collect()
}

/// The flags that shape an episode, where given, over `config`: turns (`[rollout]`), and the wiki's system
/// prompt, demonstration and judge (`[env.wiki]`).
pub fn apply_episode_flags(
    config: &mut TrainConfig,
    max_turns: Option<usize>,
    system_prompt: Option<&String>,
    demonstration: Option<Demonstration>,
    judge: Option<&String>,
) {
    if let Some(t) = max_turns {
        config.rollout.episode.max_turns = t;
    }
    let wiki = &mut config.env.wiki;
    if let Some(p) = system_prompt {
        wiki.system_prompt = p.clone();
    }
    if let Some(d) = demonstration {
        wiki.demonstration = d;
    }
    if let Some(j) = judge {
        wiki.judge = j.clone();
    }
}
