//! The sampling thread: one owner of the model, and a batch that requests join and leave step by step.
//!
//! Requests queue as [`Job`]s, one sequence per choice. Between any two decoding steps the thread admits
//! what has arrived, first come first served, while a slot is free (`max_num_seqs`), into one
//! [`ContinuousBatch`]: a new request is read in the next step, beside the sequences already decoding, and a
//! sequence leaves the step it ends, so a short request finishes in about its own time whatever else runs. A
//! step reads at most `max_num_batched_tokens`: long prompts are read in chunks of what decoding leaves
//! (chunked prefill), shortest first, so one long prompt delays the others by a step's time, not by its whole
//! prefill. Each sequence reads its request's adapter; sequences of different adapters decode in one forward
//! (the frozen weights once for all rows, each row's LoRA delta its own). Every sequence draws from its
//! request's seeded stream, so a request's tokens do not depend on what it ran beside (up to float rounding).
//!
//! Every token goes to its job's channel as soon as it is picked; a closed channel (the client has gone)
//! cancels the sequence at once, freeing its slot. The channel has no capacity to fill, so the engine never
//! waits on a client: one that reads slowly or never costs memory, bounded by its request's `max_tokens`
//! (see `http::stream_reply`), and never holds a slot past its sequences' own end, as in vLLM; a reply that
//! waits past the write timeout closes its connection, and so its channel (`crate::write_timeout`). An ended
//! request's keys and values stay in a bounded prefix cache, so a later prompt that starts alike (a shared
//! system prompt, the next turn of a conversation) is read only past what they cover. Each request that ends is logged (id, model, tokens,
//! time to first token, total time).

use agentrt_policy::rand::rngs::StdRng;
use agentrt_policy::rand::SeedableRng;
use agentrt_policy::sampling::{Draws, Heard};
use agentrt_policy::{AdapterSet, Completion, ContinuousBatch, FinishReason, Policy, PrefixCache, SamplingParams};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// How the server schedules, named as vLLM names its flags.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Sequences (request choices) in the batch at most (`--max-num-seqs`); later ones wait for a slot.
    pub max_num_seqs: usize,
    /// Tokens one step reads at most (`--max-num-batched-tokens`): every decoding sequence's last token,
    /// then prompts in chunks of what is left.
    pub max_num_batched_tokens: usize,
    /// Prompt plus `max_tokens` a request may ask for (`--max-model-len`); `None`: the model's context.
    pub max_model_len: Option<usize>,
    /// The key clients must send as `Authorization: Bearer KEY` (`--api-key`); `None`: no authentication.
    pub api_key: Option<String>,
    /// Bytes of keys and values kept from ended requests for later prompts that start alike (automatic
    /// prefix caching, as vLLM and llama-server do; the least recently used go first); 0 keeps none. Only
    /// the base model's requests use it: the cache is keyed by tokens, and an adapter's keys differ.
    pub prefix_cache_bytes: usize,
    /// Whether `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` may change the served adapters
    /// (`--allow-runtime-lora`; vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING`). Off by default: a client that
    /// may load a path may also learn what exists on the server's filesystem.
    pub allow_runtime_lora: bool,
    /// With runtime loading on, the directory a loaded `lora_path` must lie under once symlinks are resolved
    /// (`--lora-root`; a relative `lora_path` is read under it); `None`: any path the server can read.
    pub lora_root: Option<std::path::PathBuf>,
    /// How long a reply may wait for its client to take its bytes (`--timeout-s`, as llama-server's
    /// `--timeout`): a connection whose writes make no progress for this long is closed, which cancels its
    /// sequences and frees what its reply held. `None`: no limit.
    pub write_timeout: Option<std::time::Duration>,
}

/// The default of [`ServeConfig::write_timeout`], in seconds (llama-server's `--timeout`).
pub const DEFAULT_WRITE_TIMEOUT_S: u64 = 600;

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_num_seqs: 16,
            max_num_batched_tokens: 256,
            max_model_len: None,
            api_key: None,
            prefix_cache_bytes: 512 << 20,
            allow_runtime_lora: false,
            lora_root: None,
            write_timeout: Some(std::time::Duration::from_secs(DEFAULT_WRITE_TIMEOUT_S)),
        }
    }
}

/// What the engine has done, for `/health` and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    /// Decoding steps (forwards) run.
    pub steps: u64,
    /// Sequences admitted (one per choice).
    pub sequences: u64,
    /// The most sequences one step read.
    pub largest_step: usize,
    /// Steps whose forward read sequences of two or more adapters (the base model counts as one).
    pub mixed_adapter_steps: u64,
    /// Steps that read part of a prompt and left the rest for later steps (chunked prefill).
    pub chunked_prompt_steps: u64,
    /// Prompt tokens read.
    pub prompt_tokens: u64,
    /// Prompt tokens whose keys and values came from the prefix cache (or a request's other choices) instead.
    pub cached_prompt_tokens: u64,
    /// Tokens sampled.
    pub generated_tokens: u64,
    /// Sequences dropped because their client went away.
    pub cancelled: u64,
    /// Requests whose client had gone before they were admitted.
    pub abandoned: u64,
    /// Sequences in the batch now (decoding, or their prompts being read).
    pub running: usize,
}

/// What a job's channel hears.
#[derive(Debug)]
pub enum Event {
    /// Choice `choice` sampled `id` with `logprob`.
    Token {
        /// Which of the job's choices (0-based).
        choice: usize,
        /// The sampled token id.
        id: u32,
        /// Its `log p` under the model at temperature 1, before top-p/top-k truncation.
        logprob: f32,
    },
    /// Choice `choice` ended.
    Done {
        /// Which of the job's choices (0-based).
        choice: usize,
        /// Its token ids, log-probs, text and finish reason (boxed, so that an event, which a client that
        /// does not read leaves waiting in its channel once per token, stays small).
        completion: Box<Completion>,
    },
    /// Sampling failed; the job gets no more events.
    Failed(String),
}

/// One request's work: `rngs.len()` choices of one prompt under one adapter.
pub struct Job {
    /// The request's id (`chatcmpl-…`), for the log.
    pub id: String,
    /// The model it asked for (the base model's name or an adapter's), for the log.
    pub model: String,
    /// The adapter (`None`: the base model).
    pub adapter: Option<Arc<AdapterSet>>,
    /// The rendered prompt's token ids.
    pub prompt: Vec<u32>,
    /// The request's sampling settings, shared by every choice.
    pub params: SamplingParams,
    /// One seeded stream per choice.
    pub rngs: Vec<StdRng>,
    /// Where the job's tokens and endings go; closed when the client has gone, which cancels the job.
    /// Unbounded, so that sending never waits; it holds at most `n × (max_tokens + 1)` events, each choice's
    /// tokens and its end.
    pub events: UnboundedSender<Event>,
    /// When the server accepted it.
    pub received: Instant,
}

/// A job in the batch: its choices not yet ended and when its first token came.
struct Running {
    job: Job,
    open: usize,
    completion_tokens: usize,
    first_token: Option<Instant>,
    cancelled: bool,
}

/// Starts the engine thread; jobs sent to the returned channel are admitted in arrival order.
pub fn start(policy: Arc<Policy>, config: ServeConfig, stats: Arc<Mutex<EngineStats>>) -> mpsc::Sender<Job> {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("agentrt-serve-engine".into())
        .spawn(move || Engine::new(&policy, &config).run(&rx, &stats))
        .expect("spawning the sampling thread");
    tx
}

/// The batch and who owns each of its sequences. A sequence's tag is its slot: `0..max_num_seqs`, reused
/// once it ends, which indexes its random stream.
struct Engine<'p> {
    policy: &'p Policy,
    config: &'p ServeConfig,
    batch: ContinuousBatch<'p>,
    prefixes: Option<PrefixCache>,
    /// The prefix cache's `reused` count when the stats last took it.
    reused_seen: usize,
    /// `slots[tag]`: the job key and choice of the sequence in that slot.
    slots: Vec<Option<(u64, usize)>>,
    rngs: Vec<StdRng>,
    jobs: BTreeMap<u64, Running>,
    next_key: u64,
    queue: VecDeque<Job>,
}

impl<'p> Engine<'p> {
    fn new(policy: &'p Policy, config: &'p ServeConfig) -> Engine<'p> {
        let seqs = config.max_num_seqs.max(1);
        Engine {
            policy,
            config,
            batch: Self::empty_batch(policy, config),
            prefixes: (config.prefix_cache_bytes > 0).then(|| PrefixCache::new(config.prefix_cache_bytes)),
            reused_seen: 0,
            slots: vec![None; seqs],
            rngs: (0..seqs).map(|_| StdRng::seed_from_u64(0)).collect(),
            jobs: BTreeMap::new(),
            next_key: 0,
            queue: VecDeque::new(),
        }
    }

    fn empty_batch(policy: &'p Policy, config: &ServeConfig) -> ContinuousBatch<'p> {
        ContinuousBatch::new(&policy.decoder, &policy.tokenizer, None).with_max_live(config.max_num_seqs.max(1)).with_step_tokens(config.max_num_batched_tokens)
    }

    fn run(mut self, rx: &mpsc::Receiver<Job>, stats: &Mutex<EngineStats>) {
        loop {
            if self.jobs.is_empty() && self.queue.is_empty() {
                match rx.recv() {
                    Ok(j) => self.queue.push_back(j),
                    Err(_) => return,
                }
            }
            self.queue.extend(rx.try_iter());
            self.admit(stats);
            if !self.jobs.is_empty() {
                self.step(stats);
            }
            stats.lock().expect("stats lock").running = self.slots.iter().filter(|s| s.is_some()).count();
        }
    }

    /// Moves queued jobs into the batch, in order, while their choices find free slots.
    fn admit(&mut self, stats: &Mutex<EngineStats>) {
        while let Some(job) = self.queue.front() {
            if job.events.is_closed() {
                let job = self.queue.pop_front().expect("a queued job");
                stats.lock().expect("stats lock").abandoned += 1;
                tracing::info!(id = %job.id, model = %job.model, "request abandoned before it was admitted: its client went away");
                continue;
            }
            let free: Vec<usize> = (0..self.slots.len()).filter(|&t| self.slots[t].is_none()).collect();
            if job.rngs.len() > free.len() {
                if job.rngs.len() > self.slots.len() {
                    let job = self.queue.pop_front().expect("a queued job");
                    let _ = job.events.send(Event::Failed(format!("{} choices exceed --max-num-seqs ({})", job.rngs.len(), self.slots.len())));
                }
                return;
            }
            let mut job = self.queue.pop_front().expect("a queued job");
            let key = self.next_key;
            self.next_key += 1;
            let rngs = std::mem::take(&mut job.rngs);
            let choices = rngs.len();
            for ((choice, rng), &tag) in rngs.into_iter().enumerate().zip(&free) {
                self.rngs[tag] = rng;
                let admitted = match &job.adapter {
                    Some(a) => self.batch.admit_with_adapters(tag, job.prompt.clone(), job.params.clone(), a.clone()),
                    None => self.batch.admit(tag, job.prompt.clone(), job.params.clone()),
                };
                if let Err(e) = admitted {
                    // Checked before queueing (context, max_tokens), so this is the engine's own fault: the
                    // batch cannot take back the choices it has, so every job in it fails.
                    let _ = job.events.send(Event::Failed(format!("admitting the request: {e}")));
                    self.fail_all(&format!("admitting request {}: {e}", job.id));
                    return;
                }
                self.slots[tag] = Some((key, choice));
            }
            stats.lock().expect("stats lock").sequences += choices as u64;
            self.jobs.insert(key, Running { job, open: choices, completion_tokens: 0, first_token: None, cancelled: false });
        }
    }

    /// One decoding step: tokens to their jobs, ended choices to theirs, finished jobs logged.
    fn step(&mut self, stats: &Mutex<EngineStats>) {
        let (slots, jobs) = (&self.slots, &mut self.jobs);
        let (mut cancelled, mut sampled) = (0u64, 0u64);
        let result = self.batch.step(
            &mut Draws::PerRow(&mut self.rngs),
            &mut |tag, id, logprob| {
                sampled += 1;
                let Some((key, choice)) = slots[tag] else { return Heard::Cancel };
                let Some(running) = jobs.get_mut(&key) else { return Heard::Cancel };
                running.first_token.get_or_insert_with(Instant::now);
                if running.job.events.send(Event::Token { choice, id, logprob }).is_ok() {
                    Heard::Continue
                } else {
                    cancelled += 1;
                    running.cancelled = true;
                    Heard::Cancel
                }
            },
            self.prefixes.as_mut(),
        );
        let shape = self.batch.last_step().clone();
        // The cache counts in all; the stats take what this step added.
        let reused_in_all = self.prefixes.as_ref().map_or(0, |pc| pc.counts().reused);
        let reused = reused_in_all - std::mem::replace(&mut self.reused_seen, reused_in_all);
        {
            let mut s = stats.lock().expect("stats lock");
            s.steps += 1;
            s.largest_step = s.largest_step.max(shape.sequences);
            s.mixed_adapter_steps += u64::from(shape.adapters > 1);
            s.chunked_prompt_steps += u64::from(shape.prompts_unfinished > 0);
            s.prompt_tokens += shape.prompt_tokens as u64;
            s.cached_prompt_tokens += reused as u64;
            s.generated_tokens += sampled;
            s.cancelled += cancelled;
        }
        match result {
            Ok(ended) => {
                for completion in ended {
                    self.end(completion);
                }
            }
            Err(e) => self.fail_all(&format!("sampling failed: {e}")),
        }
    }

    /// Hands an ended choice to its job, frees its slot, and retires the job when it was its last.
    fn end(&mut self, completion: Completion) {
        let tag = completion.prompt_index;
        let Some((key, choice)) = self.slots[tag].take() else { return };
        let Some(running) = self.jobs.get_mut(&key) else { return };
        running.open -= 1;
        running.completion_tokens += completion.token_ids.len();
        let was_cancelled = completion.finish_reason == FinishReason::Cancelled;
        let _ = running.job.events.send(Event::Done { choice, completion: Box::new(completion) });
        if running.open > 0 {
            return;
        }
        let running = self.jobs.remove(&key).expect("the job just read");
        let job = &running.job;
        let ms = |t: Instant| t.duration_since(job.received).as_secs_f64() * 1e3;
        let ttft_ms = running.first_token.map(ms).unwrap_or(f64::NAN);
        let outcome = if running.cancelled || was_cancelled { "cancelled: the client went away" } else { "done" };
        tracing::info!(
            id = %job.id,
            model = %job.model,
            prompt_tokens = job.prompt.len(),
            completion_tokens = running.completion_tokens,
            ttft_ms = format_args!("{ttft_ms:.0}"),
            total_ms = format_args!("{:.0}", ms(Instant::now())),
            "request {outcome}"
        );
    }

    /// Fails every job in the batch (their sequences' caches are lost with a failed forward) and starts an
    /// empty batch; queued jobs wait for it.
    fn fail_all(&mut self, message: &str) {
        tracing::error!("{message}; failing the {} requests in the batch", self.jobs.len());
        for running in std::mem::take(&mut self.jobs).into_values() {
            let _ = running.job.events.send(Event::Failed(message.to_string()));
        }
        self.slots.iter_mut().for_each(|s| *s = None);
        self.batch = Self::empty_batch(self.policy, self.config);
        self.prefixes = (self.config.prefix_cache_bytes > 0).then(|| PrefixCache::new(self.config.prefix_cache_bytes));
        self.reused_seen = 0;
    }
}
