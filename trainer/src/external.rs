//! Sampling on OpenAI-compatible servers while training stays in candle, and keeping those servers
//! on-policy.
//!
//! Before each step, [`AdapterPublisher::publish`] writes the adapters in PEFT form under the run's
//! `served-adapters/step-N` and loads them on every server as `MODEL-step-N` (vLLM's
//! `/v1/load_lora_adapter` with `load_inplace`, which `agentrt serve --allow-runtime-lora` implements), unloading the previous
//! step's. When the run ends, fails or is dropped, the publisher unloads what it loaded, so the servers are
//! left as they were and the same training can run on them again (a run killed outright leaves its last
//! adapter loaded, and the next run's `load_inplace` replaces it). The [`ExternalSampler`] then asks for
//! replies by that name. With exact tokens, each reply carries the ids the
//! server sampled and their log-probs (vLLM's `return_tokens_as_token_ids`), so the traces hold exactly what
//! was sampled and the learner can measure how far the server's log-probs are from its own; otherwise the
//! text is tokenised here, once.

use crate::error::TrainError;
use agentrt_assets::FileError;
use agentrt_policy::Policy;
use agentrt_rollout::{Conversation, Finish, LocalPolicy, OpenAiPolicy, OpenAiPolicyConfig, Reply, RolloutError, TurnPolicy};
use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub struct ExternalSampler<'a> {
    pub remote: OpenAiPolicy,
    pub tokens: LocalPolicy<'a>,
    pub policy: &'a Policy,
    /// Replies whose ids were not sent by the server and were tokenised here.
    pub retokenised: AtomicUsize,
}

impl<'a> ExternalSampler<'a> {
    pub fn new(remote: OpenAiPolicy, tokens: LocalPolicy<'a>, policy: &'a Policy) -> Self {
        ExternalSampler { remote, tokens, policy, retokenised: AtomicUsize::new(0) }
    }
}

#[async_trait]
impl TurnPolicy for ExternalSampler<'_> {
    fn name(&self) -> String {
        self.remote.name()
    }

    fn begin(&self, c: &mut Conversation) -> Result<(), RolloutError> {
        self.tokens.begin(c)
    }

    async fn reply(&self, conversations: &[&Conversation]) -> Result<Vec<Reply>, RolloutError> {
        let mut replies = self.remote.reply(conversations).await?;
        let eos = *self.policy.tokenizer.eos_ids.first().ok_or_else(|| RolloutError::Invalid("the tokenizer has no end-of-turn token".into()))?;
        for r in &mut replies {
            if !r.token_ids.is_empty() {
                // The server's own ids: its end-of-turn token is among them when it wrote one.
                let closed = r.token_ids.last().is_some_and(|id| self.policy.tokenizer.eos_ids.contains(id));
                if closed != (r.finish == Finish::EndOfTurn) && r.finish != Finish::Stop {
                    return Err(RolloutError::Invalid(format!("the server's reply ended {:?} but its last sampled id is {:?}", r.finish, r.token_ids.last())));
                }
                continue;
            }
            self.retokenised.fetch_add(1, Ordering::Relaxed);
            r.token_ids = self.policy.tokenizer.encode(&r.text)?;
            if r.finish == Finish::EndOfTurn {
                r.token_ids.push(eos);
            }
            r.logprobs = vec![0.0; r.token_ids.len()];
        }
        Ok(replies)
    }

    fn push_reply(&self, c: &mut Conversation, reply: &Reply) -> Result<(), RolloutError> {
        self.tokens.push_reply(c, reply)
    }

    fn push_tool_turn(&self, c: &mut Conversation, output: &str) -> Result<(), RolloutError> {
        self.tokens.push_tool_turn(c, output)
    }
}

/// The name step `step`'s adapter is served under.
pub fn served_name(model: &str, step: usize) -> String {
    format!("{model}-step-{step}")
}

/// How long each server may take to unload an adapter when a run is dropped: the cleanup blocks the thread
/// that drops the publisher, and a hung server must not hold a failed run's error back for minutes.
/// The run directory's folder of the adapters the servers load.
pub(crate) const SERVED_ADAPTERS: &str = "served-adapters";
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Loads each step's adapter on the servers, and unloads what it loaded when the run is over: by
/// [`AdapterPublisher::unload_all`] when it ends, or on drop when it fails or is cancelled (best effort:
/// failures are printed, never returned, so the run's own error is the one reported).
pub struct AdapterPublisher {
    config: OpenAiPolicyConfig,
    remote: OpenAiPolicy,
    /// Names this run asked the servers to load and has not unloaded (a load that failed on some server
    /// counts: the servers before it have the adapter).
    loaded: Vec<String>,
}

impl AdapterPublisher {
    /// A publisher for the servers of `config`, naming adapters after `config.model`.
    pub fn new(config: OpenAiPolicyConfig) -> Result<AdapterPublisher, TrainError> {
        Ok(AdapterPublisher { remote: OpenAiPolicy::new(config.clone())?, config, loaded: Vec::new() })
    }

    /// Writes `policy`'s adapters for step `step` under `run_dir/served-adapters/` (assembled beside and
    /// renamed, so a server never reads half an adapter), loads them on every server as [`served_name`]
    /// (replacing one of that name, e.g. left by a run that was killed), and unloads step `step - 1`'s.
    /// Keeps the last two steps' directories on disk. Returns the name to sample with.
    pub async fn publish(&mut self, policy: &Policy, run_dir: &Path, step: usize) -> Result<String, TrainError> {
        let root = run_dir.join(SERVED_ADAPTERS);
        let dir = root.join(format!("step-{step}"));
        let partial = root.join(format!(".step-{step}.partial"));
        for d in [&dir, &partial] {
            if d.exists() {
                std::fs::remove_dir_all(d).map_err(FileError::io(d))?;
            }
        }
        std::fs::create_dir_all(&root).map_err(FileError::io(&root))?;
        policy.save_adapters(&partial)?;
        std::fs::rename(&partial, &dir).map_err(FileError::io(&dir))?;
        let absolute: PathBuf = dir.canonicalize().map_err(FileError::io(&dir))?;
        let name = served_name(&self.config.model, step);
        if !self.loaded.contains(&name) {
            self.loaded.push(name.clone());
        }
        self.remote.load_lora_adapter(&name, &absolute, true).await?;
        if step > 0 {
            let previous = served_name(&self.config.model, step - 1);
            if let Some(at) = self.loaded.iter().position(|n| *n == previous) {
                self.loaded.remove(at);
                // A server restarted since the last step no longer has it: that is not this step's problem.
                if let Err(e) = self.remote.unload_lora_adapter(&previous).await {
                    tracing::warn!("could not unload the previous step's adapter {previous}: {e}");
                }
            }
            let old = root.join(format!("step-{}", step.saturating_sub(2)));
            if step >= 2 && old.exists() {
                std::fs::remove_dir_all(&old).map_err(FileError::io(&old))?;
            }
        }
        Ok(name)
    }

    /// Unloads every adapter this run loaded from every server. A server that fails is named on stderr
    /// and otherwise ignored: the run is over, and its outcome is not the cleanup's.
    pub async fn unload_all(&mut self) {
        unload(&self.remote, std::mem::take(&mut self.loaded)).await;
    }
}

async fn unload(remote: &OpenAiPolicy, names: Vec<String>) {
    for name in names {
        if let Err(e) = remote.unload_lora_adapter(&name).await {
            tracing::warn!("could not unload adapter `{name}` from the sampling servers after the run: {e}");
        }
    }
}

impl Drop for AdapterPublisher {
    /// The run failed or was cancelled with adapters loaded. Drop cannot await, and may run inside the
    /// runtime, so a thread with a runtime and an HTTP client of its own unloads them, each server with
    /// [`CLEANUP_TIMEOUT`].
    fn drop(&mut self) {
        let names = std::mem::take(&mut self.loaded);
        if names.is_empty() {
            return;
        }
        let config = OpenAiPolicyConfig { timeout: self.config.timeout.min(CLEANUP_TIMEOUT), ..self.config.clone() };
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            match (runtime, OpenAiPolicy::new(config)) {
                (Ok(rt), Ok(remote)) => rt.block_on(unload(&remote, names)),
                (Err(e), _) => tracing::warn!("could not unload {} from the sampling servers: {e}", names.join(", ")),
                (_, Err(e)) => tracing::warn!("could not unload {} from the sampling servers: {e}", names.join(", ")),
            }
        });
        if cleanup.join().is_err() {
            tracing::warn!("unloading the run's adapters from the sampling servers panicked");
        }
    }
}
