//! `agentrt eval`: a policy on questions, through the same episode loop as training (`agentrt eval
//! --split dev ...`); `agentrt eval retrieval` measures the search index alone; `agentrt eval compare`
//! puts two evaluations side by side.

use crate::policy_options::{apply_episode_flags, LoadedPolicy, PolicyOptions};
use crate::sandbox_options::ToolOptions;
use agentrt_eval::{write_report, DegeneracyThresholds, EvalInfo, Metrics};
use agentrt_progress::Progress;
use agentrt_search::{evaluate, read_questions, QueryEncoder, Recall, WikiIndex};
use agentrt_trainer::{RunConfig, TrainConfig};
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `agentrt eval`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
#[command(after_help = "Examples:\n  agentrt eval --split dev --num-samples 50 --output-dir eval/zero-shot\n  \
    agentrt eval --split dev --num-samples 50 --baseline random --output-dir eval/random\n  \
    agentrt eval --env code --model qwen2.5-coder-0.5b --num-generations 10 --temperature 0.2 --output-dir eval/he\n  \
    agentrt eval --regrade eval/he --set env.test_fuel=4000000000 --output-dir eval/he-more-fuel\n  \
    agentrt eval --adapter runs/RUN/checkpoint-10 --output-dir eval/trained\n  \
    agentrt eval --adapter runs/RUN/checkpoint-10 --adapter-scales 1,0 --output-dir eval/retain-only\n  \
    agentrt eval --policy openai:qwen2.5:7b@http://localhost:11434/v1 --output-dir eval/qwen7b\n  \
    agentrt eval compare eval/zero-shot eval/trained\n  \
    agentrt eval table zero-shot=eval/zero-shot trained=eval/trained --out accuracy.png\n  \
    agentrt eval retrieval --split dev\n  \
    agentrt eval extraction --model qwen2.5-coder-0.5b --num-samples 300 --output-dir eval/extract-qwen\n\n\
    An adapter is played as it was trained: its agent.json gives the base model, system prompt,\n\
    demonstration, turns, reply length, observation size and sandbox limits, unless a flag says otherwise.\n\
    With --config (a training config), episodes run exactly as `agentrt train --config` plays them.\n\n\
    OUTPUT_DIR gets results.json (accuracy, avg_tool_calls, answer_f1, search_hit_rate, num_questions and every metric\n\
    with its 95% interval), results.md, results.png and transcripts.jsonl (every turn, program, tool\n\
    output and verdict).")]
pub struct Args {
    #[command(subcommand)]
    pub what: Option<What>,
    #[command(flatten)]
    pub episodes: EpisodeArgs,
}

/// What else to evaluate.
#[derive(clap::Subcommand)]
pub enum What {
    /// Recall@1/5/10 of the gold page for BM25, vectors and hybrid search.
    Retrieval(RetrievalArgs),
    /// A model's answers from each question's gold section, no tools: how well it extracts the span.
    Extraction(crate::commands::eval_extraction::Args),
    /// Two evaluation output directories side by side.
    Compare(CompareArgs),
    /// Several evaluations in one markdown table (each metric with its 95% interval, accuracy against the
    /// first row), and their accuracies as a PNG bar chart.
    Table(TableArgs),
}

/// Arguments of `agentrt eval compare`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt eval compare eval/zero-shot eval/trained\n  \
    agentrt eval --split dev --num-samples 200 --output-dir eval/a && agentrt eval --adapter runs/RUN/checkpoint-10 --split dev --num-samples 200 --output-dir eval/b && agentrt eval compare eval/a eval/b\n\n\
    Prints every metric of A and B and the difference B - A (accuracy with Newcombe's interval). When both\n\
    played the same questions (same --split, --num-samples and --seed), also the difference question by\n\
    question: a paired bootstrap 95% interval and McNemar's exact test.")]
pub struct CompareArgs {
    /// The first evaluation (an `agentrt eval` OUTPUT_DIR, holding results.json and transcripts.jsonl): the reference.
    pub a: PathBuf,
    /// The second evaluation, compared with A (differences are B - A).
    pub b: PathBuf,
}

/// Arguments of `agentrt eval table`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt eval table zero-shot=eval/zero-shot trained=eval/trained\n  \
    agentrt eval table base=eval/base sft=eval/sft rl=eval/rl --out accuracy.png\n\n\
    One row per evaluation: accuracy (Wilson interval), the accuracy minus the first row's (Newcombe's\n\
    interval), gold answer printed, extraction, answer F1 and tool calls (bootstrap intervals), search hit\n\
    rate and programs run (of programs written). A row of other questions than the first is named below.")]
pub struct TableArgs {
    /// `LABEL=OUTPUT_DIR` of each evaluation, the reference first.
    #[arg(required = true)]
    pub rows: Vec<String>,
    /// Write the accuracies as a bar chart to this PNG.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Arguments of an episode evaluation.
#[derive(clap::Args)]
pub struct EpisodeArgs {
    /// The environment: `wiki` (questions about the corpus) or `code` (HumanEval-format tasks, graded by
    /// their tests in the sandbox; reports pass@k). Default: the config's `env.name`, else wiki.
    #[arg(long, value_name = "NAME")]
    pub env: Option<String>,
    /// Which questions: train, dev or all for the wiki (default dev); train, test or all for code
    /// (default all: the whole of HumanEval, as published pass@k numbers use).
    #[arg(long)]
    pub split: Option<String>,
    /// Questions (JSON Lines or Parquet with question, answer or answers, page), or code tasks with --env
    /// code. Default: data/wiki/questions.jsonl, or the config's `env.tasks` (data/humaneval/HumanEval.jsonl).
    #[arg(long)]
    pub questions: Option<PathBuf>,
    /// Questions to evaluate (a seeded random subset of the split; 0: all). Default: 50 for the wiki, all
    /// tasks for code.
    #[arg(long)]
    pub num_samples: Option<usize>,
    /// Code: samples per task (pass@k is reported for k = 1, 5, 10 up to this). More than 1 needs
    /// --temperature above 0 (Chen et al.: 0.2 for pass@1, 0.8 for pass@10 and beyond).
    #[arg(long, default_value_t = 1)]
    pub num_generations: usize,
    /// Code: go on with the tasks OUTPUT_DIR/tasks.jsonl does not hold yet (same settings), instead of
    /// refusing to overwrite it.
    #[arg(long)]
    pub resume: bool,
    /// Overwrite the evaluation OUTPUT_DIR already holds (an OUTPUT_DIR with results or transcripts is
    /// refused without it).
    #[arg(long, conflicts_with = "resume")]
    pub force: bool,
    /// Code (implies --env code): grade the replies of an earlier run (its OUTPUT_DIR) again under this
    /// run's test limits (`env.test_fuel`, `env.test_timeout_ms`) and reward, without loading a model; the
    /// new grades go to --output-dir. Tasks, split, reply format and sampling settings are the earlier run's.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["resume", "questions", "num_samples", "split"])]
    pub regrade: Option<PathBuf>,
    /// Seeds which questions `--num-samples` picks and the sampling (with --temperature above 0); two
    /// evaluations with the same seed play the same questions, as `eval compare` pairs them.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `rule`, `rule:0.5` or `openai:MODEL@BASE_URL`. Default: the config's `rollout.judge`, else rule.
    #[arg(long)]
    pub judge: Option<String>,
    /// A training config (TOML, as `agentrt train --config`): its `[rollout]` turns, observation size,
    /// sandbox limits, system prompt and demonstration are played exactly as training plays them,
    /// instead of the adapter's `agent.json`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override a key of that config (or of the training defaults): `--set rollout.max_turns=2`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Replies per episode at most. Default: the config, else the adapter's `agent.json`, else training's (3).
    #[arg(long)]
    pub max_turns: Option<usize>,
    /// `short`, `full`, or the system prompt's own text (as `rollout.system_prompt` in training).
    /// Default: the config, else the adapter's `agent.json`, else `short`.
    #[arg(long)]
    pub system_prompt: Option<String>,
    /// Leave out the worked episode shown before every question (training shows it unless
    /// `rollout.demonstration = false`; evaluate the way the model was trained).
    #[arg(long)]
    pub no_demonstration: bool,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Episodes played at once.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Flag the samples as degenerate (template collapse) above this mean pairwise Jaccard similarity.
    #[arg(long, default_value_t = DegeneracyThresholds::default().max_jaccard)]
    pub max_jaccard: f64,
    /// Flag the samples as degenerate below this share of distinct samples.
    #[arg(long, default_value_t = DegeneracyThresholds::default().min_unique)]
    pub min_unique: f64,
    /// Where results go.
    #[arg(long, default_value = "eval-out")]
    pub output_dir: PathBuf,
    #[command(flatten)]
    pub policy: PolicyOptions,
    #[command(flatten)]
    pub tools: ToolOptions,
}

/// Arguments of `agentrt eval retrieval`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt eval retrieval --split dev\n  \
    agentrt eval retrieval --split train --json\n\n\
    Each question is sent to search_pages as the query; a hit is the question's gold `page` among the\n\
    top k. Fusion variants (reciprocal rank fusion, weighted sums) are listed below the three modes.")]
pub struct RetrievalArgs {
    /// Which questions: train, dev, or all.
    #[arg(long, default_value = "dev")]
    pub split: String,
    /// Questions file (JSON Lines with question, page, split).
    #[arg(long, default_value = agentrt_search::DEFAULT_QUESTIONS_FILE)]
    pub questions: PathBuf,
    /// Use at most this many questions.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// What embeds the questions: distilled (the default, as search_pages does) or full.
    #[arg(long, env = "AGENTRT_QUERY_ENCODER", default_value_t = QueryEncoder::default())]
    pub query_encoder: QueryEncoder,
    /// Where the index lives (default: $AGENTRT_CACHE/index).
    #[arg(long, env = "AGENTRT_INDEX_DIR")]
    pub index_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        Some(What::Retrieval(a)) => retrieval(a),
        Some(What::Extraction(a)) => crate::commands::eval_extraction::run(a),
        Some(What::Table(a)) => {
            let rows = a
                .rows
                .iter()
                .map(|r| r.split_once('=').map(|(l, d)| (l.to_string(), PathBuf::from(d))).ok_or_else(|| anyhow::anyhow!("{r:?}: expected LABEL=OUTPUT_DIR")))
                .collect::<anyhow::Result<Vec<_>>>()?;
            print!("{}", agentrt_eval::table(&rows, a.out.as_deref())?);
            Ok(())
        }
        Some(What::Compare(a)) => {
            print!("{}", agentrt_eval::compare(&a.a, &a.b)?);
            Ok(())
        }
        None => episodes(args.episodes),
    }
}

fn episodes(args: EpisodeArgs) -> anyhow::Result<()> {
    if let Some(from) = &args.regrade {
        let config = played_config(&args, None)?;
        anyhow::ensure!(
            args.env.is_none() || config.env.grades_with_tests(),
            "--regrade grades the replies of an environment graded by tests (code): drop --env or pass --env code"
        );
        return crate::commands::eval_code::regrade(&args, from, &config);
    }
    refuse_earlier_results(&args)?;
    let loaded = args.policy.load()?;
    let config = played_config(&args, Some(&loaded))?;
    if config.env.grades_with_tests() {
        return crate::commands::eval_code::run(&args, &loaded, &config);
    }
    anyhow::ensure!(args.num_generations == 1 && !args.resume, "--num-generations and --resume are for environments graded by tests (--env code)");
    let split = args.split.clone().unwrap_or_else(|| config.env.default_eval_split().into());

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (environment, episodes) = runtime.block_on(async {
        let sandbox = Arc::new(args.tools.build_for(&config.env, config.rollout.episode.limits()).await?);
        let environment = agentrt_trainer::environment(&config, sandbox.clone())?;
        let questions = agentrt_rollout::seeded_subset(environment.questions(&split)?, args.num_samples.unwrap_or(50), args.seed);
        let runner = environment.runner(sandbox);
        let policy = args.policy.turn_policy(&loaded, args.seed, &environment)?;
        let progress = Progress::new("eval", "questions", questions.len() as u64, 0);
        let mut all = Vec::with_capacity(questions.len());
        for chunk in questions.chunks(args.batch_size.max(1)) {
            let batch = runner.run(policy.as_ref(), chunk).await?;
            all.extend(batch.episodes);
            let correct = all.iter().filter(|e| e.outcome == agentrt_rollout::EpisodeOutcome::Correct).count();
            progress.set(all.len() as u64, format!("accuracy {:.3}", correct as f64 / all.len() as f64));
        }
        progress.finish_and_clear();
        anyhow::Ok((environment, all))
    })?;
    let mut policy_name = loaded.name.clone();
    if !environment.demonstration.is_empty() && !args.policy.is_random() {
        policy_name.push_str(", shown the worked demonstration");
    }
    let metrics = Metrics::from_episodes_with(&episodes, DegeneracyThresholds { max_jaccard: args.max_jaccard, min_unique: args.min_unique });
    let info = EvalInfo {
        policy: policy_name,
        judge: environment.spec.judge.clone(),
        questions: format!("{} split of {}", split, config.data.questions),
        seed: args.seed,
        max_turns: environment.spec.max_turns,
    };
    write_report(&args.output_dir, &info, &metrics, &episodes)?;
    print!("{}", agentrt_eval::report_markdown(&info, &metrics));
    print_samples(&episodes, 3);
    println!("\nwritten to {}", args.output_dir.display());
    Ok(())
}

/// The files an evaluation writes into OUTPUT_DIR, any of which says it holds one already.
const EARLIER_RESULTS: [&str; 4] = [agentrt_eval::RESULTS_JSON, agentrt_eval::TRANSCRIPTS, "tasks.jsonl", "samples.jsonl"];

/// Refuses an OUTPUT_DIR that holds an earlier evaluation, unless `--force` overwrites it or `--resume`
/// goes on with it: checked before the model loads, so a typo costs nothing.
fn refuse_earlier_results(args: &EpisodeArgs) -> anyhow::Result<()> {
    if args.force || args.resume {
        return Ok(());
    }
    if let Some(file) = EARLIER_RESULTS.iter().map(|f| args.output_dir.join(f)).find(|p| p.exists()) {
        anyhow::bail!(
            "--output-dir {} holds an earlier evaluation ({} exists): pass --force to overwrite it, choose another --output-dir, \
             or (--env code) pass --resume to go on with a stopped run",
            args.output_dir.display(),
            file.display()
        );
    }
    Ok(())
}

/// A few samples to look at beside the diversity numbers: the first reply of `n` episodes spread over
/// the set, each cut to a few lines.
fn print_samples(episodes: &[agentrt_rollout::Episode], n: usize) {
    if episodes.is_empty() {
        return;
    }
    println!("\nsamples (first reply of {} episodes):", n.min(episodes.len()));
    for e in agentrt_eval::spread(episodes, n) {
        println!("- [{}] {}", e.question.id, agentrt_eval::preview(e.turns.first().map_or("", |t| t.reply.as_str()), 4));
    }
}

/// What eval plays, as a training config: the one given (`--config`, `--set`) as `agentrt train` plays
/// it; without one, the training defaults played as the adapter was trained (its `agent.json`); then the
/// flags over both (`--env`, `--questions`, turns, prompt, demonstration, judge, sampling). `loaded` is
/// `None` where no policy plays (`--regrade`).
fn played_config(args: &EpisodeArgs, loaded: Option<&LoadedPolicy>) -> anyhow::Result<TrainConfig> {
    let given = args.config.is_some() || !args.set.is_empty();
    let mut config = if given { TrainConfig::from_layers(args.config.as_deref(), &args.set)? } else { TrainConfig::default() };
    if let Some(name) = &args.env {
        config.env.select(name).map_err(anyhow::Error::msg)?;
    }
    if let Some(q) = &args.questions {
        // The file of questions, or of tasks for an environment with its own.
        config.data.questions = q.display().to_string();
        config.env.tasks = q.display().to_string();
    }
    if let Some(loaded) = loaded {
        config = args.policy.played(config, given, loaded, args.temperature);
    }
    apply_episode_flags(&mut config.rollout.episode, args.max_turns, args.system_prompt.as_ref(), args.no_demonstration.then_some(false), args.judge.as_ref());
    Ok(config)
}

fn retrieval(args: RetrievalArgs) -> anyhow::Result<()> {
    let dir = args.index_dir.unwrap_or_else(agentrt_search::default_index_dir);
    let index = WikiIndex::open_with(&dir, args.query_encoder)?;
    let split = if args.split == "all" { None } else { Some(args.split.as_str()) };
    let mut qs = read_questions(&args.questions, split)?;
    if let Some(n) = args.limit {
        qs.truncate(n);
    }
    anyhow::ensure!(!qs.is_empty(), "no questions of split {:?} in {}", args.split, args.questions.display());
    let progress = Progress::new("retrieval", "questions", qs.len() as u64, 0);
    let report = evaluate(&index, &qs, &mut |d| progress.set_position(d as u64))?;
    progress.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("retrieval on {} {} questions (gold = the question's page; {} query encoder)\n", report.questions, args.split, args.query_encoder);
    let table = |rows: &[Recall]| {
        println!("{:<22} {:>9} {:>9} {:>9}", "mode", "recall@1", "recall@5", "recall@10");
        for r in rows {
            println!("{:<22} {:>9.3} {:>9.3} {:>9.3}", r.mode, r.at1, r.at5, r.at10);
        }
    };
    table(report.modes.as_slice());
    println!("\nfusion variants (hybrid = {:?}):", agentrt_search::Fusion::DEFAULT);
    table(report.fusions.as_slice());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Eval {
        #[command(flatten)]
        args: EpisodeArgs,
    }

    fn parse(flags: &[&str]) -> EpisodeArgs {
        Eval::try_parse_from(std::iter::once("eval").chain(flags.iter().copied())).expect("valid eval flags").args
    }

    /// One config, evaluated by `eval` and played by `train`, gives identical episodes; and an adapter
    /// trained with it (its agent.json) plays the same in `eval` without the config.
    #[test]
    fn eval_and_train_play_the_same_spec_from_one_config() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("train.toml");
        std::fs::write(
            &file,
            "[rollout]\nmax_turns = 2\nmax_observation_chars = 640\nsystem_prompt = \"full\"\ndemonstration = false\n\
             fuel = 12345678\nmemory_mib = 48\ntimeout_ms = 900\nmax_host_calls = 7\ntemperature = 0.0\n",
        )
        .unwrap();
        let config = TrainConfig::from_layers(Some(&file), &[]).unwrap();
        let path = file.to_str().unwrap();
        let played = played_config(&parse(&["--config", path]), None).unwrap();
        assert_eq!(played, config, "eval --config plays the config as train does");

        // An adapter saved by that run plays the same in eval without the config: its agent.json holds the
        // spec, and the measurement's judge and sampling are eval's (greedy, top-k 50: the defaults here).
        config.rollout.episode.write_agent_file(dir.path(), "smollm2-135m").unwrap();
        let (_, trained) = agentrt_rollout::EpisodeSpec::read_agent_file(dir.path()).unwrap().unwrap();
        assert_eq!(trained, config.rollout.episode, "agent.json round-trips the spec");
        let loaded = LoadedPolicy { local: None, trained: Some(trained), name: "test".into() };
        let by_adapter = played_config(&parse(&[]), Some(&loaded)).unwrap();
        assert_eq!(by_adapter.rollout.episode, config.rollout.episode);

        // --set layers over the config as in train; flags go over everything.
        let set = played_config(&parse(&["--config", path, "--set", "rollout.max_host_calls=3"]), None).unwrap();
        assert_eq!(set.rollout.episode.limits().max_host_calls, 3);
        let flagged = played_config(&parse(&["--config", path, "--max-turns", "5", "--system-prompt", "short"]), Some(&loaded)).unwrap();
        assert_eq!((flagged.rollout.episode.max_turns, flagged.rollout.episode.system_prompt.as_str()), (5, "short"));

        // Without a config or an adapter: the training defaults, greedy, with the environment's reply length.
        let plain = LoadedPolicy { local: None, trained: None, name: "test".into() };
        let mut defaults = TrainConfig::default();
        defaults.rollout.episode.temperature = 0.0;
        assert_eq!(played_config(&parse(&[]), Some(&plain)).unwrap(), defaults);
        let code = played_config(&parse(&["--env", agentrt_environments::code::NAME]), Some(&plain)).unwrap();
        assert_eq!(code.rollout.episode.max_new_tokens, code.env.default_max_new_tokens());
    }

    /// The whole environment (prompt, demonstration, episode spec, reply format, stop strings, grader) that
    /// `eval --config` builds is the one `train` builds from the same config, for the wiki and for code.
    #[test]
    fn eval_and_train_build_the_same_environment_from_one_config() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        runtime.block_on(async {
            let sandbox = Arc::new(
                agentrt_runtime::Sandbox::new(agentrt_runtime::SandboxConfig::default(), Arc::new(agentrt_runtime::FixtureTools::default())).await.unwrap(),
            );
            for set in [
                vec!["rollout.max_turns=2", "rollout.judge=rule:0.5"],
                vec!["env.name=code", "env.reasoning_format=true", "env.test_fuel=1234567", "env.test_timeout_ms=2500", "rollout.memory_mib=48"],
            ] {
                let set: Vec<String> = set.into_iter().map(String::from).collect();
                let config = TrainConfig::from_layers(None, &set).unwrap();
                let trained = agentrt_trainer::environment(&config, sandbox.clone()).unwrap().settings();
                let mut flags = vec![];
                for s in &set {
                    flags.extend(["--set", s.as_str()]);
                }
                let evaluated = agentrt_trainer::environment(&played_config(&parse(&flags), None).unwrap(), sandbox.clone()).unwrap().settings();
                assert_eq!(evaluated, trained);
                if config.env.grades_with_tests() {
                    assert_eq!((trained.spec.max_turns, trained.reply_format), (1, "final_answer"));
                    let limits = trained.spec.limits();
                    assert_eq!((limits.fuel, limits.timeout, limits.memory_bytes), (1234567, std::time::Duration::from_millis(2500), 48 << 20));
                    assert!(trained.grader.contains("reasoning format") && trained.system_prompt.contains("<reasoning>"), "{trained:?}");
                } else {
                    assert_eq!(trained.grader, "rule(f1>=0.5)");
                }
                // `--env code` over the wiki defaults is the code environment of the defaults.
                let by_flag =
                    agentrt_trainer::environment(&played_config(&parse(&["--env", agentrt_environments::code::NAME]), None).unwrap(), sandbox.clone())
                        .unwrap()
                        .settings();
                let code = TrainConfig::from_layers(None, &["env.name=code".to_string()]).unwrap();
                assert_eq!(by_flag, agentrt_trainer::environment(&code, sandbox.clone()).unwrap().settings());
            }
        });
    }
}
