//! `agentrt bench rollout`: the sampling of a training step, played by agentrt and by transformers.
//!
//! The workload is the training config's (by default the embedded one: 2 questions x 4 rollouts, up to 3
//! turns of 160 tokens, SmolLM2-135M): the same questions, in the order training takes them, played
//! through the same episode loop, with the real sandbox and index. Only the sampler differs. Ours is the
//! trainer's own (`LocalPolicy`, with the fresh LoRA adapters training samples with, shared prefixes
//! read once). The peer is transformers' `generate` in a Python process
//! (`bench/rollout/transformers_peer.py`), handed each turn's prompts as the very token ids ours reads,
//! with the same sampling settings; it samples a question's G rollouts with `num_return_sequences=G`
//! while they share their prompt. Both sides report tokens sampled per second (the fair measure: the
//! two draw different samples, so their replies differ in length) and episodes per minute.

use super::peer::Peer;
use super::workload::{Workload, WorkloadArgs};
use agentrt_policy::{Policy, SamplingParams};
use agentrt_rollout::{Conversation, EpisodeRunner, Finish, LocalPolicy, Question, Reply, RolloutError, TurnPolicy};
use async_trait::async_trait;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Arguments of `agentrt bench rollout`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  bash bench/policy/setup_venv.sh          # once: torch, transformers, peft (~5 GB)\n  \
    agentrt bench rollout                    # 2 steps of the default workload on each side\n  \
    agentrt bench rollout --steps 4 --set rollout.num_rollouts=8\n\n\
    Both sides play the same questions through the same episode loop (sandbox, index, tool turns); only\n\
    the sampler differs. The CPU and the kernel path are printed with the numbers.")]
pub struct Args {
    /// Training steps' worth of episodes each side plays (each: rollout.batch_size questions x
    /// rollout.num_rollouts rollouts).
    #[arg(long, default_value_t = 2)]
    pub steps: usize,
    /// The peer's script.
    #[arg(long, default_value = "bench/rollout/transformers_peer.py")]
    pub peer: PathBuf,
    #[command(flatten)]
    pub workload: WorkloadArgs,
}

/// One side's totals over the steps.
#[derive(Debug, Default, Serialize)]
pub struct SideTotals {
    pub name: String,
    pub episodes: usize,
    pub replies: usize,
    pub tokens_sampled: usize,
    /// Wall time of the episode loop: sampling, programs, grading.
    pub seconds: f64,
    /// Of which sampling.
    pub generate_seconds: f64,
    pub tokens_per_s: f64,
    pub episodes_per_minute: f64,
    pub accuracy: f64,
}

impl SideTotals {
    fn add(&mut self, played: &agentrt_rollout::RolloutBatch, seconds: f64) {
        self.episodes += played.episodes.len();
        self.replies += played.episodes.iter().map(|e| e.turns.len()).sum::<usize>();
        self.tokens_sampled += played.episodes.iter().map(|e| e.model_tokens()).sum::<usize>();
        self.accuracy += played.episodes.iter().filter(|e| e.outcome == agentrt_rollout::EpisodeOutcome::Correct).count() as f64;
        self.seconds += seconds;
        self.generate_seconds += played.times.generate_s;
    }

    fn finish(&mut self) {
        self.tokens_per_s = self.tokens_sampled as f64 / self.seconds;
        self.episodes_per_minute = self.episodes as f64 * 60.0 / self.seconds;
        self.accuracy /= self.episodes.max(1) as f64;
    }
}

/// Both sides and the ratios (ours / theirs: above 1 means agentrt is faster).
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub machine: String,
    pub workload: String,
    pub ours: SideTotals,
    pub transformers: SideTotals,
    pub peer_versions: serde_json::Value,
    pub ratio_tokens_per_s: f64,
    pub ratio_episodes_per_minute: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.steps > 0, "--steps must be at least 1");
    let mut workload = Workload::load(&args.workload, &args.peer)?;
    let config = &workload.config;
    anyhow::ensure!(config.rollout.sampler == "local", "rollout.sampler = {:?}: the benchmark measures the local sampler", config.rollout.sampler);
    let r = &config.rollout;
    let description = format!(
        "{} steps x {} questions x {} rollouts, up to {} turns of {} tokens, temperature {}, top_k {}, top_p {}, model {}, env {}",
        args.steps,
        r.batch_size,
        r.num_rollouts,
        r.episode.max_turns,
        r.episode.max_new_tokens,
        r.episode.temperature,
        r.episode.top_k,
        r.episode.top_p,
        config.model.name,
        config.env.name.as_str()
    );
    eprintln!("workload: {description}");
    let mut peer = args.workload.start_peer(&args.peer, &workload.model_path)?;
    let peer_versions = peer.versions.clone();
    let batches: Vec<Vec<Question>> = (1..=args.steps).map(|step| workload.step_batch(step)).collect();
    let (config, policy) = (&workload.config, &workload.policy);

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (ours, theirs) = runtime.block_on(async {
        let sandbox = Arc::new(args.workload.tools.build_for(&config.env, config.rollout.episode.limits()).await?);
        let environment = agentrt_environments::Environment::build(&config.env, &config.rollout.episode, sandbox.clone())?;
        let (params, runner) = (environment.sampling(), environment.runner(sandbox));
        let mut ours = SideTotals { name: "agentrt (candle, shared prefixes)".into(), ..SideTotals::default() };
        let mut theirs =
            SideTotals { name: format!("transformers {} generate", peer_versions["transformers"].as_str().unwrap_or("?")), ..SideTotals::default() };
        // One warm-up turn on each side, not measured (first-touch allocations, torch's lazy init).
        let warm = [workload.first_question().clone()];
        play(&runner, &LocalPolicy::new(policy, SamplingParams { max_tokens: 4, ..params.clone() }, 0), &warm).await?;
        let warm_peer = PeerPolicy::new(policy, &mut peer, SamplingParams { max_tokens: 4, ..params.clone() }, 0);
        play(&runner, &warm_peer, &warm).await?;
        drop(warm_peer);
        for (step, batch) in (1..).zip(&batches) {
            let seed = agentrt_trainer::sample_seed(config.run.seed, step, 0);
            let local = LocalPolicy::new(policy, params.clone(), seed);
            let (played, secs) = play(&runner, &local, batch).await?;
            ours.add(&played, secs);
            let remote = PeerPolicy::new(policy, &mut peer, params.clone(), seed);
            let (played_peer, secs_peer) = play(&runner, &remote, batch).await?;
            theirs.add(&played_peer, secs_peer);
            eprintln!(
                "step {step}/{}: agentrt {:.1} s ({} tokens), transformers {:.1} s ({} tokens)",
                args.steps,
                secs,
                played.episodes.iter().map(|e| e.model_tokens()).sum::<usize>(),
                secs_peer,
                played_peer.episodes.iter().map(|e| e.model_tokens()).sum::<usize>()
            );
        }
        anyhow::Ok((ours, theirs))
    })?;
    peer.stop();
    let (mut ours, mut theirs) = (ours, theirs);
    ours.finish();
    theirs.finish();
    let comparison = Comparison {
        machine: agentrt_kernels::describe(),
        workload: description,
        ratio_tokens_per_s: ours.tokens_per_s / theirs.tokens_per_s,
        ratio_episodes_per_minute: ours.episodes_per_minute / theirs.episodes_per_minute,
        ours,
        transformers: theirs,
        peer_versions,
    };
    if args.workload.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
        return Ok(());
    }
    print_table(&comparison);
    Ok(())
}

async fn play(runner: &EpisodeRunner, policy: &dyn TurnPolicy, batch: &[Question]) -> anyhow::Result<(agentrt_rollout::RolloutBatch, f64)> {
    let t = Instant::now();
    let played = runner.run(policy, batch).await?;
    Ok((played, t.elapsed().as_secs_f64()))
}

fn print_table(c: &Comparison) {
    println!("rollouts of the training workload, same questions, same episode loop, sampler side by side");
    println!("{}", c.machine);
    println!("workload: {}", c.workload);
    println!("peer: torch {} with {} threads", c.peer_versions["torch"].as_str().unwrap_or("?"), c.peer_versions["threads"]);
    println!();
    println!("{:<40} {:>9} {:>8} {:>8} {:>10} {:>10} {:>9} {:>11}", "", "episodes", "replies", "tokens", "seconds", "sampling s", "tokens/s", "episodes/min");
    for s in [&c.ours, &c.transformers] {
        println!(
            "{:<40} {:>9} {:>8} {:>8} {:>10.1} {:>10.1} {:>9.1} {:>11.2}",
            s.name, s.episodes, s.replies, s.tokens_sampled, s.seconds, s.generate_seconds, s.tokens_per_s, s.episodes_per_minute
        );
    }
    println!();
    println!("ratio (agentrt / transformers): tokens/s {:.2}x, episodes/min {:.2}x", c.ratio_tokens_per_s, c.ratio_episodes_per_minute);
}

/// The peer as a [`TurnPolicy`]: conversations keep their token traces as a [`LocalPolicy`] builds them,
/// so the peer is handed exactly the ids our sampler would read, and its ids go back into the trace.
struct PeerPolicy<'a> {
    traces: LocalPolicy<'a>,
    policy: &'a Policy,
    peer: Mutex<&'a mut Peer>,
    params: SamplingParams,
    seed: Mutex<u64>,
}

impl<'a> PeerPolicy<'a> {
    fn new(policy: &'a Policy, peer: &'a mut Peer, params: SamplingParams, seed: u64) -> PeerPolicy<'a> {
        PeerPolicy { traces: LocalPolicy::new(policy, params.clone(), seed), policy, peer: Mutex::new(peer), params, seed: Mutex::new(seed) }
    }
}

#[async_trait]
impl TurnPolicy for PeerPolicy<'_> {
    fn name(&self) -> String {
        "transformers generate".into()
    }

    fn begin(&self, c: &mut Conversation) -> Result<(), RolloutError> {
        self.traces.begin(c)
    }

    async fn reply(&self, conversations: &[&Conversation]) -> Result<Vec<Reply>, RolloutError> {
        let prompts = Conversation::trace_ids(conversations)?;
        let eos = &self.policy.tokenizer.eos_ids;
        let seed = {
            let mut s = self.seed.lock().expect("seed lock");
            *s = s.wrapping_add(1);
            *s
        };
        let request = serde_json::json!({
            "prompts": prompts,
            "max_new_tokens": self.params.max_tokens,
            "temperature": self.params.temperature,
            "top_k": self.params.top_k,
            "top_p": self.params.top_p,
            "stop": self.params.stop,
            "eos_ids": eos,
            "seed": seed,
        });
        let answer = tokio::task::block_in_place(|| self.peer.lock().expect("peer lock").ask(&request))
            .map_err(|e| RolloutError::Invalid(format!("transformers peer: {e:#}")))?;
        let completions = answer["completions"].as_array().ok_or_else(|| RolloutError::Invalid(format!("transformers peer: no completions in {answer}")))?;
        if completions.len() != prompts.len() {
            return Err(RolloutError::Invalid(format!("transformers peer: {} completions for {} prompts", completions.len(), prompts.len())));
        }
        completions
            .iter()
            .map(|c| {
                let ids: Vec<u32> = serde_json::from_value(c["ids"].clone()).map_err(|e| RolloutError::Invalid(format!("transformers peer: ids: {e}")))?;
                let finish = match c["finish"].as_str() {
                    Some("eos") => Finish::EndOfTurn,
                    Some("stop") => Finish::Stop,
                    Some("length") => Finish::Length,
                    other => return Err(RolloutError::Invalid(format!("transformers peer: finish {other:?}"))),
                };
                let body = if finish == Finish::EndOfTurn { &ids[..ids.len().saturating_sub(1)] } else { &ids[..] };
                let text = self.policy.tokenizer.decode(body).map_err(|e| RolloutError::Invalid(format!("transformers peer: decode: {e}")))?;
                // The peer does not return log-probs; the trace needs one per id and nothing here trains on them.
                Ok(Reply { text, logprobs: vec![0.0; ids.len()], token_ids: ids, finish, counted_tokens: None })
            })
            .collect()
    }

    fn push_reply(&self, c: &mut Conversation, reply: &Reply) -> Result<(), RolloutError> {
        self.traces.push_reply(c, reply)
    }

    fn push_tool_turn(&self, c: &mut Conversation, output: &str) -> Result<(), RolloutError> {
        self.traces.push_tool_turn(c, output)
    }
}
