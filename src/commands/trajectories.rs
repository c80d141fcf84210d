//! `agentrt trajectories`: training conversations for supervised fine-tuning, from two sources that write
//! the same output. `synth` plays every training question with the synthesising policy (an episode the
//! model could have written from what it saw); `sample` lets any policy play `k` episodes per question and
//! keeps those the judge marks correct (rejection sampling). Both go through the same `EpisodeRunner`,
//! sandbox and judge as `agentrt eval`, and through one gate, `agentrt_rollout::TrajectorySet`.

use crate::policy_options::{apply_episode_flags, PolicyOptions};
use crate::sandbox_options::ToolOptions;
use agentrt_environments::wiki::{check_visible, SynthesizingPolicy, WikiSection};
use agentrt_environments::Environment;
use agentrt_progress::Progress;
use agentrt_rollout::{Episode, Offered, Question, TrajectorySet, TurnPolicy};
use agentrt_trainer::TrainConfig;
use anyhow::Context;
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `agentrt trajectories`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt trajectories synth --limit 500 --out data/sft/synth.jsonl\n  \
    agentrt trajectories sample --model qwen2.5-coder-0.5b --k 4 --temperature 1 --limit 200 --out data/sft/qwen.jsonl\n  \
    agentrt trajectories sample --adapter runs/RUN/checkpoint-10 --k 8 --out data/sft/self.jsonl\n  \
    agentrt trajectories sample --policy openai:qwen2.5:7b@http://localhost:11434/v1 --k 2 --out data/sft/qwen7b.jsonl\n\n\
    Two sources, one output. Each line of OUT is one kept conversation,\n  \
    {\"messages\": [{\"role\": \"system\"|\"user\"|\"assistant\"|\"tool\", \"content\": ...}, ...], \"question_id\", \"source\", \"reward\", \"tool_calls\"}\n\
    (the chat form TRL and OpenAI fine-tuning read), exactly as the episode's conversation holds it: the\n\
    system prompt, the demonstration when shown, the question, every reply and tool output. Only episodes\n\
    the judge marks correct are kept (for synth, also only those whose every program literal is a tool key,\n\
    words of the question or earlier tool output, and whose answer a tool output held); identical message\n\
    lists are written once. OUT.manifest.json records the source, the command line, every setting, the\n\
    counts (played, kept, rejected by the judge or the check, duplicates dropped), the yield, the seed,\n\
    the model and the time. Both files are written atomically.\n\n\
    synth needs the index (`agentrt index`), or --fixture for the three-page test corpus.")]
pub struct Args {
    #[command(subcommand)]
    pub source: Source,
}

/// Where trajectories come from.
#[derive(clap::Subcommand)]
pub enum Source {
    /// Synthesised from the training data: each question played by a scripted program (`--style`) that
    /// uses only the question's words and ids and text the episode has seen (the gold page and answer only
    /// choose among them); episodes that miss the gold page or never read the answer are dropped.
    #[command(after_help = "Examples:\n  agentrt trajectories synth --limit 500 --out data/sft/synth.jsonl\n  \
        agentrt trajectories synth --style passages --split dev --out /tmp/dev.jsonl   # the program's yield on dev")]
    Synth(Box<SynthArgs>),
    /// Rejection sampling: any policy (local model, adapter, endpoint) plays k episodes per question; the
    /// ones the judge marks correct are kept and the yield (kept / played) reported.
    #[command(after_help = "Examples:\n  agentrt trajectories sample --adapter runs/RUN/checkpoint-10 --k 8 --out data/sft/self.jsonl\n  \
        agentrt trajectories sample --policy openai:qwen2.5:7b@http://localhost:11434/v1 --k 2 --out data/sft/qwen7b.jsonl")]
    Sample(Box<SampleArgs>),
}

/// Settings both sources share.
#[derive(clap::Args)]
pub struct CommonArgs {
    /// Which questions: train, dev or all.
    #[arg(long, default_value = "train")]
    pub split: String,
    /// Questions (JSON Lines or Parquet with question, answer or answers, page).
    #[arg(long, default_value = agentrt_search::DEFAULT_QUESTIONS_FILE)]
    pub questions: PathBuf,
    /// Questions to play: a seeded random subset of the split (0: all, in file order).
    #[arg(long, default_value_t = 0)]
    pub limit: usize,
    /// Seeds the subset (and, for sample, the sampling).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The JSON Lines file to write (default: trajectories-<source>.jsonl); the manifest goes beside it.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// `rule`, `rule:0.5` or `openai:MODEL@BASE_URL`.
    #[arg(long, default_value = "rule")]
    pub judge: String,
    /// Replies per episode at most (the answer included). Default: 4, or for sample with an adapter its
    /// `agent.json`'s.
    #[arg(long)]
    pub max_turns: Option<usize>,
    /// `short`, `full`, or the system prompt's own text (`{plugins}` marks where plug-in tools are
    /// listed). Default: `full` for synth (it states the tools and the program format that the
    /// trajectories teach), `short` for sample (as `agentrt eval`).
    #[arg(long)]
    pub system_prompt: Option<String>,
    /// The worked episode shown before each question: `true` (the built-in one), `false`, or a JSON Lines
    /// file of turns. Default: false for synth (the trajectories themselves are the demonstrations), true
    /// for sample (as `agentrt eval`).
    #[arg(long, value_name = "true|false|FILE")]
    pub demonstration: Option<agentrt_environments::wiki::Demonstration>,
    /// Questions played at once.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    #[command(flatten)]
    pub tools: ToolOptions,
}

/// Arguments of `agentrt trajectories synth`.
#[derive(clap::Args)]
pub struct SynthArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// `find` (the default): one program that prints the best passages search_passages finds for the
    /// question, as many as fit in the observation limit; then the answer (one tool call; ceiling 96.0%
    /// on dev, 92.2% over train and dev).
    /// `scan`: one program that reads on by itself: the top hit's best section, and when
    /// it lacks more than a third of the question's words, the sentences richest in them from the next
    /// two hits' sections, within the observation limit; then the answer (two or four tool calls, 87.4%
    /// dev ceiling).
    /// `read`: a program that searches with the question and prints the top hit's best section, then
    /// the answer; when that section holds none, a second program printing the next two hits'
    /// sections first (two or five tool calls, two or three replies). `passages`: one program that
    /// reads each top hit's best section and prints the sentences holding most of the question's
    /// words, then the answer (four tool calls). `browse`: search, list a page's sections, read one,
    /// answer (three programs).
    #[arg(long, default_value = "find")]
    pub style: agentrt_environments::wiki::SynthStyle,
    /// A program of your own instead of a style: a Python file with `{question}` where the question goes
    /// (it is quoted there as a string literal). Each question is played with it once, then answered with
    /// the first gold answer it printed; the yield (on `--split dev`) is that program's ceiling.
    #[arg(long, value_name = "FILE", conflicts_with = "style")]
    pub program: Option<PathBuf>,
}

/// Arguments of `agentrt trajectories sample`.
#[derive(clap::Args)]
pub struct SampleArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Episodes played per question.
    #[arg(long, default_value_t = 4)]
    pub k: usize,
    /// Sampling temperature (0 is greedy: with k > 1 its episodes repeat and are dropped as duplicates).
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,
    /// The environment played: `wiki` (the default: the questions of --questions), `code`, or the folder
    /// of an environment package (its own tasks, prompt and grader; --questions and --judge do not
    /// apply).
    #[arg(long, value_name = "NAME|DIR")]
    pub env: Option<String>,
    #[command(flatten)]
    pub policy: PolicyOptions,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.source {
        Source::Synth(a) => synth(*a),
        Source::Sample(a) => sample(*a),
    }
}

/// The split's questions, a seeded subset when `--limit` says so.
fn questions(c: &CommonArgs) -> anyhow::Result<Vec<Question>> {
    let split = if c.split == "all" { None } else { Some(c.split.as_str()) };
    let questions = agentrt_rollout::read_questions(&c.questions, split)?;
    anyhow::ensure!(!questions.is_empty(), "no questions of split {:?} in {}", c.split, c.questions.display());
    Ok(limited(questions, c))
}

/// `questions`, a seeded random subset of `--limit` of them when it says so.
fn limited(mut questions: Vec<Question>, c: &CommonArgs) -> Vec<Question> {
    use agentrt_policy::rand::seq::SliceRandom;
    use agentrt_policy::rand::SeedableRng;
    if c.limit > 0 && c.limit < questions.len() {
        questions.shuffle(&mut agentrt_policy::rand::rngs::StdRng::seed_from_u64(c.seed));
        questions.truncate(c.limit);
    }
    questions
}

fn settings(c: &CommonArgs, wiki: &WikiSection, environment: &Environment) -> serde_json::Value {
    serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "seed": c.seed,
        "settings": {
            "split": c.split,
            "questions": c.questions.display().to_string(),
            "limit": c.limit,
            "judge": c.judge,
            "max_turns": environment.spec.max_turns,
            "max_observation_chars": environment.spec.max_observation_chars,
            "limits": environment.spec.limits(),
            "system_prompt": wiki.system_prompt,
            "demonstration": wiki.demonstration,
            "tools": if c.tools.fixture { "fixture".to_string() } else { c.tools.index_dir.clone().unwrap_or_else(agentrt_search::default_index_dir).display().to_string() },
        },
    })
}

/// Plays every question `k` times in batches, offers each episode to `set` (refused ones are counted, and
/// those the check refuses also reported), with a progress line.
async fn play(
    runner: &agentrt_rollout::EpisodeRunner,
    policy: &dyn TurnPolicy,
    questions: &[Question],
    k: usize,
    batch_size: usize,
    set: &mut TrajectorySet,
    check: &dyn Fn(&Episode) -> Result<(), String>,
) -> anyhow::Result<()> {
    let progress = Progress::new("trajectories", "questions", questions.len() as u64, 0);
    let mut done = 0;
    for chunk in questions.chunks(batch_size.max(1)) {
        let repeated: Vec<Question> = chunk.iter().flat_map(|q| std::iter::repeat_n(q.clone(), k)).collect();
        let batch = runner.run(policy, &repeated).await?;
        for e in &batch.episodes {
            if let Offered::RejectedByCheck(why) = set.offer(e, check) {
                tracing::warn!("question {}: dropped by the check: {why}", e.question.id);
            }
        }
        done += chunk.len();
        let c = set.counts();
        progress.set(done as u64, format!("kept {} of {} played ({:.1}%)", c.kept, c.played, 100.0 * c.yield_rate()));
    }
    progress.finish_and_clear();
    Ok(())
}

fn finish(set: &TrajectorySet, out: &std::path::Path, manifest: serde_json::Value) -> anyhow::Result<()> {
    let manifest_path = set.write(out, manifest)?;
    let c = set.counts();
    println!(
        "{}: kept {} of {} episodes played (yield {:.3}); rejected by the judge {}, by the check {}; duplicates dropped {}",
        out.display(),
        c.kept,
        c.played,
        c.yield_rate(),
        c.rejected_by_judge,
        c.rejected_by_check,
        c.duplicates_dropped
    );
    let n = set.trajectories().len().max(1) as f64;
    println!("mean tool calls per kept episode {:.2}", set.trajectories().iter().map(|t| t.tool_calls).sum::<usize>() as f64 / n);
    println!("manifest: {}", manifest_path.display());
    Ok(())
}

fn synth(args: SynthArgs) -> anyhow::Result<()> {
    let c = &args.common;
    let template = args.program.as_ref().map(|p| std::fs::read_to_string(p).with_context(|| format!("--program {}", p.display()))).transpose()?;
    let questions = questions(c)?;
    // Synth's own defaults: the full prompt (it states what the trajectories teach), no demonstration
    // (the trajectories are the demonstrations), four replies (up to three tool calls and the answer).
    let full = "full".to_string();
    let mut config = TrainConfig::default();
    apply_episode_flags(
        &mut config,
        Some(c.max_turns.unwrap_or(4)),
        Some(c.system_prompt.as_ref().unwrap_or(&full)),
        Some(c.demonstration.clone().unwrap_or(false.into())),
        Some(&c.judge),
    );
    let out = c.out.clone().unwrap_or_else(|| PathBuf::from("trajectories-synth.jsonl"));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (environment, set) = runtime.block_on(async {
        let host = c.tools.tool_host()?;
        let sandbox = Arc::new(c.tools.build_with(config.rollout.episode.limits(), host.clone()).await?);
        let environment = Environment::build(&config.env, &config.rollout.episode, sandbox.clone())?;
        // The synthesiser plays toward each question's gold page: one the index lacks cannot be played.
        let mut questions = questions;
        environment.check_index(&mut questions).await?;
        let runner = environment.runner(sandbox);
        let policy = match &template {
            Some(t) => SynthesizingPolicy::with_program(t, host, &questions).map_err(|e| anyhow::anyhow!("--program: {e}"))?,
            None => SynthesizingPolicy::new(args.style, host, &questions),
        };
        let fixed = policy.fixed_literals();
        let mut set = TrajectorySet::new("synth");
        play(&runner, &policy, &questions, 1, c.batch_size, &mut set, &|e| check_visible(e, &fixed)).await?;
        anyhow::Ok((environment, set))
    })?;
    let mut manifest = settings(c, &config.env.wiki, &environment);
    manifest["model"] = serde_json::Value::Null;
    let style = match args.style {
        agentrt_environments::wiki::SynthStyle::Find => "synthesised, find (one program: the best passages search_passages finds for the question, as many as fit in the observation limit; answer as printed)",
        agentrt_environments::wiki::SynthStyle::Scan => "synthesised, scan (one program: the top hit's best section, and when it lacks more than a third of the question's words, the sentences richest in them from the next two hits' sections, within the observation limit; answer as printed)",
        agentrt_environments::wiki::SynthStyle::Read => "synthesised, read (search with the question, print the top hit's best section; answer with the shortest gold span printed, or first print the next two hits' sections when it holds no answer or lacks the question's key word)",
        agentrt_environments::wiki::SynthStyle::Passages => "synthesised, passages (one program: search with the question, read the top hits' best sections, print the sentences holding most of its words; answer as printed)",
        agentrt_environments::wiki::SynthStyle::Browse => "synthesised, browse (search with the question's words, open the gold page among the hits, read a listed section, answer as read)",
    };
    manifest["policy"] = match &args.program {
        Some(p) => format!("synthesised, a program of the user's ({}), then the first gold answer it printed", p.display()),
        None => style.to_string(),
    }
    .into();
    manifest["settings"]["style"] = if args.program.is_some() { "program".to_string() } else { format!("{:?}", args.style).to_lowercase() }.into();
    manifest["k"] = 1.into();
    finish(&set, &out, manifest)
}

fn sample(args: SampleArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.k >= 1, "--k must be at least 1");
    let c = &args.common;
    // A package names its own tasks; the wiki's come from --questions.
    let questions = if args.env.is_some() { None } else { Some(questions(c)?) };
    let loaded = args.policy.load()?;
    // An adapter plays as it was trained; without one, four replies as synth, and the random baseline
    // without the demonstration (it reads none).
    let mut config = TrainConfig::default();
    if let Some(env) = &args.env {
        config.env.select(env).map_err(anyhow::Error::msg)?;
    }
    let mut config = args.policy.played(config, false, &loaded, args.temperature)?;
    apply_episode_flags(
        &mut config,
        c.max_turns.or(loaded.trained.is_none().then_some(4)),
        c.system_prompt.as_ref(),
        c.demonstration.clone().or(args.policy.is_random().then_some(false.into())),
        Some(&c.judge),
    );
    let out = c.out.clone().unwrap_or_else(|| PathBuf::from("trajectories-sample.jsonl"));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (environment, set) = runtime.block_on(async {
        let sandbox = Arc::new(c.tools.build_for(&config.env, config.rollout.episode.limits()).await?);
        let environment = Environment::build(&config.env, &config.rollout.episode, sandbox.clone())?;
        let mut questions = match questions {
            Some(questions) => questions,
            None => limited(environment.questions(&c.split)?, c),
        };
        environment.check_index(&mut questions).await?;
        let runner = environment.runner(sandbox);
        let policy = args.policy.turn_policy(&loaded, c.seed, &environment)?;
        let mut set = TrajectorySet::new("sample");
        play(&runner, policy.as_ref(), &questions, args.k, c.batch_size, &mut set, &|_| Ok(())).await?;
        anyhow::Ok((environment, set))
    })?;
    let mut manifest = settings(c, &config.env.wiki, &environment);
    if args.env.is_some() {
        // A package's episodes: its tasks, prompt and grader, not the wiki's.
        manifest["environment"] = environment.package.name.clone().into();
        manifest["settings"]["questions"] = environment.package.tasks.path().display().to_string().into();
        manifest["settings"]["judge"] = environment.grader.name().into();
        manifest["settings"]["system_prompt"] = environment.system_prompt.clone().into();
    }
    manifest["model"] = loaded.name.clone().into();
    manifest["k"] = args.k.into();
    manifest["settings"]["temperature"] = environment.spec.temperature.into();
    manifest["settings"]["top_k"] = environment.spec.top_k.into();
    manifest["settings"]["max_new_tokens"] = environment.spec.max_new_tokens.into();
    manifest["settings"]["adapter"] = args.policy.adapter.as_ref().map(|p| p.display().to_string()).into();
    finish(&set, &out, manifest)
}
