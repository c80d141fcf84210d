//! `agentrt eval --env code`: pass@k on code tasks. Each task is played `--num-generations` times
//! through the same episode loop as training; every sample's code runs against each of the task's tests
//! in the sandbox. OUTPUT_DIR gets `tasks.jsonl` (a line per task as it finishes: its samples, how many
//! passed, each one's first failure), `samples.jsonl` (every reply with its test results) and, at the
//! end, `results.json` and `results.md`. A run stopped midway goes on with `--resume`. `--regrade DIR`
//! grades an earlier run's replies again, under this run's test limits, without sampling (as HumanEval's
//! `evaluate_functional_correctness` grades a samples file).

use super::episode_args::EpisodeArgs;
use crate::policy_options::LoadedPolicy;
use agentrt_environments::code::answer::{extract_code, solution};
use agentrt_environments::code::tasks::CodeTask;
use agentrt_environments::Environment;
use agentrt_eval::{CodeMetrics, TaskResult};
use agentrt_progress::Progress;
use agentrt_rollout::{seeded_subset, Episode, Question};
use agentrt_trainer::TrainConfig;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

const TASKS: &str = "tasks.jsonl";
const SAMPLES: &str = "samples.jsonl";
const SETTINGS: &str = "settings.json";

pub fn run(args: &EpisodeArgs, loaded: &LoadedPolicy, config: &TrainConfig) -> anyhow::Result<()> {
    let n = super::episode_args::samples_per_question(args)?;
    let env = &config.env;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (sandbox, environment) = runtime.block_on(async {
        let sandbox = Arc::new(args.tools.build_for(env, config.rollout.episode.limits()).await?);
        anyhow::Ok((sandbox.clone(), Environment::build(&config.env, &config.rollout.episode, sandbox)?))
    })?;
    let split = args.split.clone().unwrap_or_else(|| environment.package.splits.eval.clone());
    let mut questions = seeded_subset(environment.questions(&split)?, args.num_samples.unwrap_or(0), args.seed);
    questions.sort_by_key(|q| task_number(&q.id));

    // What decides the samples; a resumed run must match it.
    let settings = serde_json::json!({
        "policy": loaded.name,
        "tasks": env.code.tasks,
        "split": split,
        "num_samples": args.num_samples.unwrap_or(0),
        "num_generations": n,
        "temperature": environment.spec.temperature,
        "top_k": environment.spec.top_k,
        "max_new_tokens": environment.spec.max_new_tokens,
        "seed": args.seed,
        "reasoning_format": env.code.reasoning_format,
        "limits": environment.spec.limits(),
        "max_tests_per_problem": env.code.max_tests_per_problem,
    });
    let dir = &args.output_dir;
    let done = prepare_output(dir, &settings, args.resume, args.force)?;
    let todo: Vec<Question> = questions.iter().filter(|q| !done.contains(&q.id)).cloned().collect();

    let tasks_per_batch = (args.batch_size / n).max(1);
    runtime.block_on(async {
        let runner = environment.runner(sandbox);
        let policy = args.policy.turn_policy(loaded, args.seed, &environment)?;
        let progress = Progress::new("eval code", "tasks", questions.len() as u64, done.len() as u64);
        let mut passed = 0usize;
        for (b, chunk) in todo.chunks(tasks_per_batch).enumerate() {
            let batch: Vec<Question> = chunk.iter().flat_map(|q| std::iter::repeat_n(q.clone(), n)).collect();
            // The count is of tasks, which end with their batch; the samples' ends show meanwhile.
            let mut ended = 0;
            let played = runner
                .run_observed(policy.as_ref(), &batch, &mut |_| {
                    ended += 1;
                    progress.set_message(format!("{ended}/{} samples of this batch played", batch.len()));
                })
                .await?;
            let mut task_lines = String::new();
            let mut sample_lines = String::new();
            for (q, episodes) in chunk.iter().zip(played.episodes.chunks(n)) {
                let refs: Vec<&Episode> = episodes.iter().collect();
                let result = TaskResult::of(&q.id, &refs);
                passed += result.correct;
                task_lines.push_str(&serde_json::to_string(&result)?);
                task_lines.push('\n');
                for (i, e) in episodes.iter().enumerate() {
                    let reply = e.turns.first().map_or("", |t| t.reply.as_str());
                    sample_lines.push_str(&sample_line(task_of(&environment, &q.id)?, i, reply, env.code.reasoning_format, e.reward, e.tests.as_ref())?);
                }
            }
            // Samples first: a task line promises its samples are written.
            append(&dir.join(SAMPLES), &sample_lines)?;
            append(&dir.join(TASKS), &task_lines)?;
            let finished = done.len() + (b * tasks_per_batch + chunk.len()).min(todo.len());
            progress.set(finished as u64, format!("{passed} of this run's samples passed"));
        }
        progress.finish_and_clear();
        anyhow::Ok(())
    })?;

    let ids: Vec<String> = questions.iter().map(|q| q.id.clone()).collect();
    write_results(dir, &ids, &settings, &loaded.name, &format!("the {split} split of {}", env.code.tasks), &environment.package.name)
}

/// The code task `id` of `environment` (the program each sample's tests run, for a reference run outside
/// the sandbox: bench/humaneval_cpython.py).
fn task_of<'a>(environment: &'a Environment, id: &str) -> anyhow::Result<&'a CodeTask> {
    environment.code_task(id).ok_or_else(|| anyhow::anyhow!("task {id}: not a code task of this environment"))
}

/// Sample `i` of `task` as a line of `samples.jsonl`: its reply, the program its tests ran (the task's
/// prompt with the reply's code; none when the reply held no code), its reward and each test's result.
fn sample_line(
    task: &CodeTask,
    i: usize,
    reply: &str,
    reasoning_format: bool,
    reward: f32,
    tests: Option<&agentrt_rollout::TestRun>,
) -> anyhow::Result<String> {
    let solution = extract_code(reply, reasoning_format).ok().map(|code| solution(task, &code));
    let line = serde_json::json!({"task_id": task.id, "sample": i, "reply": reply, "solution": solution, "reward": reward, "tests": tests});
    Ok(serde_json::to_string(&line)? + "\n")
}

/// `results.json` and `results.md` of the tasks `ids` from `dir`'s `tasks.jsonl`, printed too.
fn write_results(dir: &Path, ids: &[String], settings: &serde_json::Value, policy: &str, what: &str, env: &str) -> anyhow::Result<()> {
    let results = read_task_results(&dir.join(TASKS))?;
    let wanted: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
    let results: Vec<TaskResult> = results.into_iter().filter(|r| wanted.contains(r.task_id.as_str())).collect();
    anyhow::ensure!(results.len() == ids.len(), "{} holds {} of the {} tasks", dir.join(TASKS).display(), results.len(), ids.len());
    let metrics = CodeMetrics::of(&results).map_err(|e| anyhow::anyhow!("{}: {e}", dir.join(TASKS).display()))?;
    let json = serde_json::json!({ "env": env, "settings": settings, "metrics": metrics });
    agentrt_assets::write_atomic(&dir.join("results.json"), serde_json::to_string_pretty(&json)?.as_bytes())?;
    let md = metrics.markdown(policy, what);
    agentrt_assets::write_atomic(&dir.join("results.md"), md.as_bytes())?;
    print!("{md}");
    println!("\nwritten to {}", dir.display());
    Ok(())
}

/// A reply of an earlier run, as its `samples.jsonl` holds it.
#[derive(serde::Deserialize)]
struct StoredSample {
    task_id: String,
    sample: usize,
    reply: String,
}

/// `--regrade FROM`: every reply of FROM/samples.jsonl graded again under `config`'s test limits and
/// reward; the tasks, split, reply format and sampling settings are FROM's.
pub fn regrade(args: &EpisodeArgs, from: &Path, config: &TrainConfig) -> anyhow::Result<()> {
    let dir = &args.output_dir;
    anyhow::ensure!(
        std::fs::canonicalize(from).ok() != std::fs::canonicalize(dir).ok(),
        "--regrade {}: write the new grades to another --output-dir (the replies stay where they are)",
        from.display()
    );
    let saved = from.join(SETTINGS);
    let source: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&saved).map_err(|e| anyhow::anyhow!("{}: {e}", saved.display()))?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", saved.display()))?;
    let text = |key: &str| source[key].as_str().map(String::from).ok_or_else(|| anyhow::anyhow!("{}: no string `{key}`", saved.display()));
    let mut config = config.clone();
    config.env = config.env.as_code();
    config.env.code.tasks = text("tasks")?;
    config.env.code.reasoning_format =
        source["reasoning_format"].as_bool().ok_or_else(|| anyhow::anyhow!("{}: no bool `reasoning_format`", saved.display()))?;
    let env = &config.env;

    // The replies, by task in the source's order; every task must have samples 0..n.
    let path = from.join(SAMPLES);
    let mut by_task: Vec<(String, Vec<String>)> = Vec::new();
    for (i, line) in std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?.lines().enumerate() {
        let s: StoredSample = serde_json::from_str(line).map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1))?;
        match by_task.last_mut() {
            Some((id, replies)) if *id == s.task_id => {
                anyhow::ensure!(
                    s.sample == replies.len(),
                    "{}:{}: sample {} of {} after {} samples",
                    path.display(),
                    i + 1,
                    s.sample,
                    s.task_id,
                    replies.len()
                );
                replies.push(s.reply);
            }
            _ => {
                anyhow::ensure!(s.sample == 0, "{}:{}: {} starts at sample {}", path.display(), i + 1, s.task_id, s.sample);
                anyhow::ensure!(!by_task.iter().any(|(id, _)| *id == s.task_id), "{}:{}: {} appears twice", path.display(), i + 1, s.task_id);
                by_task.push((s.task_id, vec![s.reply]));
            }
        }
    }
    anyhow::ensure!(!by_task.is_empty(), "{}: no samples", path.display());

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let environment = runtime.block_on(async {
        let sandbox = Arc::new(args.tools.build_for(env, config.rollout.episode.limits()).await?);
        anyhow::Ok(Environment::build(&config.env, &config.rollout.episode, sandbox)?)
    })?;
    let mut settings = source.clone();
    settings["limits"] = serde_json::to_value(environment.spec.limits())?;
    settings["max_tests_per_problem"] = env.code.max_tests_per_problem.into();
    settings["regraded_from"] = from.display().to_string().into();
    prepare_output(dir, &settings, false, args.force)?;
    let questions: std::collections::HashMap<String, Question> = environment.questions("all")?.into_iter().map(|q| (q.id.clone(), q)).collect();

    runtime.block_on(async {
        let grader = &environment.grader;
        let progress = Progress::new("regrade", "tasks", by_task.len() as u64, 0);
        let mut passed = 0usize;
        for (done, (id, replies)) in by_task.iter().enumerate() {
            let question = questions.get(id).ok_or_else(|| anyhow::anyhow!("{}: task {id} is not in {}", path.display(), env.code.tasks))?;
            let items: Vec<(&Question, &str)> = replies.iter().map(|r| (question, r.as_str())).collect();
            let grades = grader.grade(&items).await?;
            let runs: Vec<_> = grades.iter().map(|g| g.tests.as_ref()).collect();
            let result = TaskResult::of_runs(id, &runs);
            passed += result.correct;
            let mut sample_lines = String::new();
            for (i, (reply, grade)) in replies.iter().zip(&grades).enumerate() {
                sample_lines.push_str(&sample_line(task_of(&environment, id)?, i, reply, env.code.reasoning_format, grade.reward, grade.tests.as_ref())?);
            }
            append(&dir.join(SAMPLES), &sample_lines)?;
            append(&dir.join(TASKS), &format!("{}\n", serde_json::to_string(&result)?))?;
            progress.set(done as u64 + 1, format!("{passed} samples passed"));
        }
        progress.finish_and_clear();
        anyhow::Ok(())
    })?;
    let ids: Vec<String> = by_task.into_iter().map(|(id, _)| id).collect();
    let policy = text("policy")?;
    let split = text("split")?;
    write_results(dir, &ids, &settings, &format!("{policy} (regraded)"), &format!("the {split} split of {}", env.code.tasks), &environment.package.name)
}

/// `HumanEval/12` sorts as 12, so tasks run and are written in their order.
fn task_number(id: &str) -> (u64, String) {
    (id.rsplit('/').next().and_then(|n| n.parse().ok()).unwrap_or(u64::MAX), id.to_string())
}

/// Makes `dir` ready and returns the tasks already done: none for a fresh run (an existing
/// `tasks.jsonl` is refused unless resuming or `force`d, which starts it again); with `resume`, those of
/// `tasks.jsonl`, after checking that the saved settings are these.
fn prepare_output(dir: &Path, settings: &serde_json::Value, resume: bool, force: bool) -> anyhow::Result<BTreeSet<String>> {
    std::fs::create_dir_all(dir)?;
    let saved = dir.join(SETTINGS);
    let tasks = dir.join(TASKS);
    if resume && saved.exists() {
        let old: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&saved)?).map_err(|e| anyhow::anyhow!("{}: {e}", saved.display()))?;
        anyhow::ensure!(&old == settings, "--resume: {} was written with other settings:\n  saved: {old}\n  now:   {settings}", saved.display());
        let done = if tasks.exists() { read_task_results(&tasks)?.into_iter().map(|t| t.task_id).collect() } else { BTreeSet::new() };
        // Samples of a task whose line was not written are dropped with the partial batch: they are drawn again.
        eprintln!("resuming {}: {} tasks done", dir.display(), done.len());
        return Ok(done);
    }
    anyhow::ensure!(
        force || !tasks.exists(),
        "{} exists: pass --resume to go on with it, --force to overwrite it, or choose another --output-dir",
        tasks.display()
    );
    agentrt_assets::write_atomic(&saved, serde_json::to_string_pretty(settings)?.as_bytes())?;
    for f in [TASKS, SAMPLES, "results.json", "results.md"] {
        let p = dir.join(f);
        if p.exists() {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(BTreeSet::new())
}

/// The per-task results an earlier run wrote to OUTPUT_DIR's `tasks.jsonl` (not the code tasks
/// themselves: `agentrt_environments::code::tasks::read_tasks` reads those).
fn read_task_results(path: &Path) -> anyhow::Result<Vec<TaskResult>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1)))
        .collect()
}

fn append(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    f.write_all(text.as_bytes()).and_then(|_| f.sync_data()).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
