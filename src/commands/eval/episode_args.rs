//! The flags of an episode evaluation (`agentrt eval` without a subcommand) and what they play: a
//! training config, as `agentrt train` would play it.

use crate::policy_options::{apply_episode_flags, LoadedPolicy, PolicyOptions};
use crate::sandbox_options::ToolOptions;
use agentrt_eval::DegeneracyThresholds;
use agentrt_trainer::{RunConfig, TrainConfig};
use std::path::PathBuf;

/// Arguments of an episode evaluation.
#[derive(clap::Args)]
pub struct EpisodeArgs {
    /// The environment: `wiki` (questions about the corpus), `code` (HumanEval-format tasks, graded by
    /// their tests in the sandbox; reports pass@k), or the folder of an environment package (its
    /// `environment.toml`; `agentrt env new`, docs/environments.md). Default: the config's `env.name`,
    /// else wiki.
    #[arg(long, value_name = "NAME|DIR")]
    pub env: Option<String>,
    /// Which questions: train, dev or all for the wiki (default dev); train, test or all for code
    /// (default all: the whole of HumanEval, as published pass@k numbers use).
    #[arg(long)]
    pub split: Option<String>,
    /// Questions (JSON Lines or Parquet with question, answer or answers, page), or code tasks with --env
    /// code. Default: the config's `env.wiki.questions` (data/wiki/questions.jsonl) or `env.code.tasks`
    /// (data/humaneval/HumanEval.jsonl).
    #[arg(long)]
    pub questions: Option<PathBuf>,
    /// Questions to evaluate (a seeded random subset of the split; 0: all). Default: 50 for the wiki, all
    /// tasks for code.
    #[arg(long)]
    pub num_samples: Option<usize>,
    /// Samples per question or task: code reports pass@k for k = 1, 5, 10 up to this; the wiki reports
    /// pass@k for k = 1, 2, 4, … up to this (the gap from pass@1 is what RL can take) beside the usual
    /// metrics over every sample. More than 1 needs --temperature above 0 (Chen et al.: 0.2 for pass@1,
    /// 0.8 for pass@10 and beyond; wiki training samples at 1).
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
    /// run's test limits (`env.code.test_fuel`, `env.code.test_timeout_ms`) and reward, without loading a model; the
    /// new grades go to --output-dir. Tasks, split, reply format and sampling settings are the earlier run's.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["resume", "questions", "num_samples", "split"])]
    pub regrade: Option<PathBuf>,
    /// Seeds which questions `--num-samples` picks and the sampling (with --temperature above 0); two
    /// evaluations with the same seed play the same questions, as `eval compare` pairs them.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `rule`, `rule:0.5` or `openai:MODEL@BASE_URL`. Default: the config's `env.wiki.judge`, else rule.
    #[arg(long)]
    pub judge: Option<String>,
    /// A training config (TOML, as `agentrt train --config`): its `[rollout]` turns, observation size and
    /// sandbox limits and its `[env.wiki]` system prompt and demonstration are played exactly as training plays them,
    /// instead of the adapter's `agent.json`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override a key of that config (or of the training defaults): `--set rollout.max_turns=2`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Replies per episode at most. Default: the config, else the adapter's `agent.json`, else training's (3).
    #[arg(long)]
    pub max_turns: Option<usize>,
    /// `short`, `full`, or the system prompt's own text (as `env.wiki.system_prompt` in training), where
    /// `{plugins}` marks where the plug-in tools (--tool) are listed (at the end when it is missing).
    /// Default: the config, else the adapter's `agent.json`, else `short`.
    #[arg(long)]
    pub system_prompt: Option<String>,
    /// Leave out the worked episode shown before every question (training shows it unless
    /// `env.wiki.demonstration = false`; evaluate the way the model was trained). Same as
    /// `--demonstration false`.
    #[arg(long, conflicts_with = "demonstration")]
    pub no_demonstration: bool,
    /// The worked episode shown before every question: `true` (the built-in one, on the bundled corpus),
    /// `false`, or a JSON Lines file of turns for your own corpus (docs/your-data.md). Default: the config,
    /// else the adapter's `agent.json`, else `true`.
    #[arg(long, value_name = "true|false|FILE")]
    pub demonstration: Option<agentrt_environments::wiki::Demonstration>,
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

/// The files an evaluation writes into OUTPUT_DIR, any of which says it holds one already.
const EARLIER_RESULTS: [&str; 4] = [agentrt_eval::RESULTS_JSON, agentrt_eval::TRANSCRIPTS, "tasks.jsonl", "samples.jsonl"];

/// `--num-generations`, checked: at least 1, and more than 1 only when sampling (greedy repeats would be
/// one sample N times).
pub(super) fn samples_per_question(args: &EpisodeArgs) -> anyhow::Result<usize> {
    let n = args.num_generations;
    anyhow::ensure!(n >= 1, "--num-generations must be at least 1");
    anyhow::ensure!(
        n == 1 || args.temperature > 0.0,
        "--num-generations {n} with --temperature 0 draws the same greedy sample {n} times: set a temperature (Chen et al. use 0.2 for pass@1, 0.8 for pass@10 and beyond; wiki training samples at 1)"
    );
    Ok(n)
}

/// Refuses an OUTPUT_DIR that holds an earlier evaluation, unless `--force` overwrites it or `--resume`
/// goes on with it: checked before the model loads, so a typo costs nothing.
pub(super) fn refuse_earlier_results(args: &EpisodeArgs) -> anyhow::Result<()> {
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

/// What eval plays, as a training config: the one given (`--config`, `--set`) as `agentrt train` plays
/// it; without one, the training defaults played as the adapter was trained (its `agent.json`); then the
/// flags over both (`--env`, `--questions`, turns, prompt, demonstration, judge, sampling). `loaded` is
/// `None` where no policy plays (`--regrade`).
pub(super) fn played_config(args: &EpisodeArgs, loaded: Option<&LoadedPolicy>) -> anyhow::Result<TrainConfig> {
    let given = args.config.is_some() || !args.set.is_empty();
    let mut config = if given { TrainConfig::from_layers(args.config.as_deref(), &args.set)? } else { TrainConfig::default() };
    if let Some(name) = &args.env {
        config.env.select(name).map_err(anyhow::Error::msg)?;
    }
    if let Some(q) = &args.questions {
        // The file of questions, or of tasks for an environment with its own.
        anyhow::ensure!(
            agentrt_environments::BUILT_IN.contains(&config.env.name.as_str()),
            "--questions: the environment package {} names its tasks in its environment.toml",
            config.env.name
        );
        config.env.wiki.questions = q.display().to_string();
        config.env.code.tasks = q.display().to_string();
    }
    if let Some(loaded) = loaded {
        config = args.policy.played(config, given, loaded, args.temperature)?;
    }
    let demonstration = if args.no_demonstration { Some(false.into()) } else { args.demonstration.clone() };
    apply_episode_flags(&mut config, args.max_turns, args.system_prompt.as_ref(), demonstration, args.judge.as_ref());
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_environments::{AgentSettings, Environment};
    use clap::Parser;
    use std::sync::Arc;

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
            "[rollout]\nmax_turns = 2\nmax_observation_chars = 640\nfuel = 12345678\nmemory_mib = 48\ntimeout_ms = 900\nmax_host_calls = 7\n\
             temperature = 0.0\n\n[env.wiki]\nsystem_prompt = \"full\"\ndemonstration = false\n",
        )
        .unwrap();
        let config = TrainConfig::from_layers(Some(&file), &[]).unwrap();
        let path = file.to_str().unwrap();
        let played = played_config(&parse(&["--config", path]), None).unwrap();
        assert_eq!(played, config, "eval --config plays the config as train does");

        // An adapter saved by that run plays the same in eval without the config: its agent.json holds the
        // spec and the prompt, and the measurement's judge and sampling are eval's (greedy, top-k 50: the
        // defaults here).
        AgentSettings::new("smollm2-135m", &config.rollout.episode, &config.env.wiki).write(dir.path()).unwrap();
        let trained = AgentSettings::read(dir.path()).unwrap().unwrap();
        assert_eq!(trained.spec, config.rollout.episode, "agent.json round-trips the spec");
        let loaded = LoadedPolicy { local: None, trained: Some(trained), name: "test".into() };
        let by_adapter = played_config(&parse(&[]), Some(&loaded)).unwrap();
        assert_eq!((&by_adapter.rollout.episode, &by_adapter.env.wiki), (&config.rollout.episode, &config.env.wiki));

        // --set layers over the config as in train; flags go over everything.
        let set = played_config(&parse(&["--config", path, "--set", "rollout.max_host_calls=3"]), None).unwrap();
        assert_eq!(set.rollout.episode.limits().max_host_calls, 3);
        let flagged = played_config(&parse(&["--config", path, "--max-turns", "5", "--system-prompt", "short"]), Some(&loaded)).unwrap();
        assert_eq!((flagged.rollout.episode.max_turns, flagged.env.wiki.system_prompt.as_str()), (5, "short"));

        // Without a config or an adapter: the training defaults, greedy, with the environment's reply length.
        let plain = LoadedPolicy { local: None, trained: None, name: "test".into() };
        let mut defaults = TrainConfig::default();
        defaults.rollout.episode.temperature = 0.0;
        assert_eq!(played_config(&parse(&[]), Some(&plain)).unwrap(), defaults);
        let code = played_config(&parse(&["--env", agentrt_environments::code::NAME]), Some(&plain)).unwrap();
        assert_eq!(code.rollout.episode.max_new_tokens, code.env.package().unwrap().default_max_new_tokens());
    }

    /// The whole environment (prompt, demonstration, episode spec, reply format, stop strings, grader) that
    /// `eval --config` builds is the one `train` builds from the same config, for the wiki and for code.
    #[test]
    fn eval_and_train_build_the_same_environment_from_one_config() {
        let build = |config: &TrainConfig, sandbox: &Arc<agentrt_runtime::Sandbox>| Environment::build(&config.env, &config.rollout.episode, sandbox.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        runtime.block_on(async {
            let sandbox = Arc::new(
                agentrt_runtime::Sandbox::new(agentrt_runtime::SandboxConfig::default(), Arc::new(agentrt_runtime::FixtureTools::default())).await.unwrap(),
            );
            for set in [
                vec!["rollout.max_turns=2", "env.wiki.judge=rule:0.5"],
                vec!["env.name=code", "env.code.reasoning_format=true", "env.code.test_fuel=1234567", "env.code.test_timeout_ms=2500", "rollout.memory_mib=48"],
            ] {
                let set: Vec<String> = set.into_iter().map(String::from).collect();
                let config = TrainConfig::from_layers(None, &set).unwrap();
                let trained = build(&config, &sandbox).unwrap().settings();
                let mut flags = vec![];
                for s in &set {
                    flags.extend(["--set", s.as_str()]);
                }
                let evaluated = build(&played_config(&parse(&flags), None).unwrap(), &sandbox).unwrap().settings();
                assert_eq!(evaluated, trained);
                if config.env.package().unwrap().grades_with_tests() {
                    assert_eq!((trained.spec.max_turns, trained.reply_format), (1, "final_answer"));
                    let limits = trained.spec.limits();
                    assert_eq!((limits.fuel, limits.timeout, limits.memory_bytes), (1234567, std::time::Duration::from_millis(2500), 48 << 20));
                    assert!(trained.grader.contains("reasoning format") && trained.system_prompt.contains("<reasoning>"), "{trained:?}");
                } else {
                    assert_eq!(trained.grader, "rule(f1>=0.5)");
                }
                // `--env code` over the wiki defaults is the code environment of the defaults.
                let by_flag = build(&played_config(&parse(&["--env", agentrt_environments::code::NAME]), None).unwrap(), &sandbox).unwrap().settings();
                let code = TrainConfig::from_layers(None, &["env.name=code".to_string()]).unwrap();
                assert_eq!(by_flag, build(&code, &sandbox).unwrap().settings());
            }
        });
    }
}
