//! The sampling thread: one owner of the model, batching the requests that arrive together.
//!
//! Requests queue as [`Job`]s. The thread takes the first, waits `batch_window` for more (up to
//! `max_batch` rows), groups what it has by adapter (one adapter per forward pass), and samples each group
//! in one [`sample_rows`] batch, splitting it where a long prompt and a long reply together would pass the
//! model's context. Every token goes to its job's channel as soon as it is picked; a closed channel (the
//! client has gone) cancels the row at once, so its slot is free for the next step's work. Jobs waiting past
//! `max_batch` run in the next batch.

use agentrt_policy::rand::rngs::StdRng;
use agentrt_policy::sampling::{sample_rows, Draws, Heard, RowSpec};
use agentrt_policy::{AdapterSet, Completion, Policy, SamplingParams};
use std::collections::VecDeque;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// How the server batches.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Rows (choices of all requests) sampled together at most.
    pub max_batch: usize,
    /// How long the engine waits after a request for others to batch with it.
    pub batch_window: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig { max_batch: 16, batch_window: Duration::from_millis(5) }
    }
}

/// What the engine has done, for `/health` and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    /// Batches sampled.
    pub batches: u64,
    /// Rows sampled (one per choice).
    pub rows: u64,
    /// The most rows one batch held.
    pub largest_batch: usize,
    /// Rows dropped because their client went away.
    pub cancelled: u64,
    /// Requests whose client had gone before they were sampled.
    pub abandoned: u64,
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
        /// Its token ids, log-probs, text and finish reason.
        completion: Completion,
    },
    /// The batch failed; the job gets no more events.
    Failed(String),
}

/// One request's work: `rngs.len()` choices of one prompt under one adapter.
pub struct Job {
    /// The adapter (`None`: the base model); jobs of one adapter batch together.
    pub adapter: Option<Arc<AdapterSet>>,
    /// The rendered prompt's token ids.
    pub prompt: Vec<u32>,
    /// The request's sampling settings, shared by every choice.
    pub params: SamplingParams,
    /// One seeded stream per choice.
    pub rngs: Vec<StdRng>,
    /// Where the job's tokens and endings go; closed when the client has gone, which cancels the job.
    pub events: UnboundedSender<Event>,
}

impl Job {
    fn rows(&self) -> usize {
        self.rngs.len()
    }
}

/// Starts the engine thread; jobs sent to the returned channel are sampled in arrival order.
pub fn start(policy: Arc<Policy>, config: ServeConfig, stats: Arc<Mutex<EngineStats>>) -> mpsc::Sender<Job> {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new().name("agentrt-serve-engine".into()).spawn(move || run(&policy, &config, &rx, &stats)).expect("spawning the sampling thread");
    tx
}

fn run(policy: &Policy, config: &ServeConfig, rx: &mpsc::Receiver<Job>, stats: &Mutex<EngineStats>) {
    let mut waiting: VecDeque<Job> = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match rx.recv() {
                Ok(j) => waiting.push_back(j),
                Err(_) => return,
            }
        }
        let deadline = Instant::now() + config.batch_window;
        while waiting.iter().map(Job::rows).sum::<usize>() < config.max_batch {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(j) => waiting.push_back(j),
                Err(_) => break,
            }
        }
        let mut batch = take_batch(&mut waiting, policy.config().max_position_embeddings, config.max_batch);
        let before = batch.len();
        batch.retain(|j| !j.events.is_closed());
        stats.lock().expect("stats lock").abandoned += (before - batch.len()) as u64;
        if !batch.is_empty() {
            sample_batch(policy, batch, stats);
        }
    }
}

/// The first waiting job and those after it that share its adapter and fit beside it (rows, context),
/// in arrival order; the rest keep waiting.
fn take_batch(waiting: &mut VecDeque<Job>, context: usize, max_batch: usize) -> Vec<Job> {
    let first = waiting.pop_front().expect("a waiting job");
    let (mut rows, mut longest, mut most) = (first.rows(), first.prompt.len(), first.params.max_tokens);
    let mut batch = vec![first];
    let mut rest = VecDeque::new();
    while let Some(j) = waiting.pop_front() {
        // The same adapter, not only the same name: one replaced in place since is another model.
        let same_adapter = match (&j.adapter, &batch[0].adapter) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        let fits = same_adapter && rows + j.rows() <= max_batch && longest.max(j.prompt.len()) + most.max(j.params.max_tokens) <= context;
        if fits {
            rows += j.rows();
            longest = longest.max(j.prompt.len());
            most = most.max(j.params.max_tokens);
            batch.push(j);
        } else {
            rest.push_back(j);
        }
    }
    *waiting = rest;
    batch
}

fn sample_batch(policy: &Policy, mut jobs: Vec<Job>, stats: &Mutex<EngineStats>) {
    // Row r is choice `owner[r].1` of job `owner[r].0`.
    let owner: Vec<(usize, usize)> = jobs.iter().enumerate().flat_map(|(j, job)| (0..job.rows()).map(move |c| (j, c))).collect();
    let mut rngs: Vec<StdRng> = jobs.iter_mut().flat_map(|j| std::mem::take(&mut j.rngs)).collect();
    let specs: Vec<RowSpec> = owner.iter().map(|&(j, _)| RowSpec { prompt: &jobs[j].prompt, params: &jobs[j].params }).collect();
    let adapter = jobs[0].adapter.clone();
    let mut cancelled = 0u64;
    let result = sample_rows(
        &policy.decoder,
        &policy.tokenizer,
        adapter.as_deref(),
        &specs,
        Draws::PerRow(&mut rngs),
        &mut |row, id, logprob| {
            let (j, choice) = owner[row];
            if jobs[j].events.send(Event::Token { choice, id, logprob }).is_ok() {
                Heard::Continue
            } else {
                cancelled += 1;
                Heard::Cancel
            }
        },
        None,
    );
    {
        let mut s = stats.lock().expect("stats lock");
        s.batches += 1;
        s.rows += owner.len() as u64;
        s.largest_batch = s.largest_batch.max(owner.len());
        s.cancelled += cancelled;
    }
    match result {
        Ok(completions) => {
            for c in completions {
                let (j, choice) = owner[c.prompt_index];
                let _ = jobs[j].events.send(Event::Done { choice, completion: c });
            }
        }
        Err(e) => {
            for j in &jobs {
                let _ = j.events.send(Event::Failed(format!("sampling failed: {e}")));
            }
        }
    }
}
