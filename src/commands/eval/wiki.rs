//! `agentrt eval` on the wiki: accuracy, answer F1 and tool use over a seeded subset of a split, with the
//! transcripts and a report.

use super::episode_args::EpisodeArgs;
use crate::policy_options::LoadedPolicy;
use agentrt_environments::Environment;
use agentrt_eval::{write_report, DegeneracyThresholds, EvalInfo, Metrics};
use agentrt_progress::Progress;
use agentrt_trainer::TrainConfig;
use std::sync::Arc;

pub fn run(args: &EpisodeArgs, loaded: &LoadedPolicy, config: &TrainConfig) -> anyhow::Result<()> {
    anyhow::ensure!(!args.resume, "--resume is for environments graded by tests (--env code)");
    let n = super::episode_args::samples_per_question(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (environment, split, episodes, gold_pages_missing) = runtime.block_on(async {
        let sandbox = Arc::new(args.tools.build_for(&config.env, config.rollout.episode.limits()).await?);
        let environment = Environment::build(&config.env, &config.rollout.episode, sandbox.clone())?;
        let split = args.split.clone().unwrap_or_else(|| environment.package.splits.eval.clone());
        let mut questions = agentrt_rollout::seeded_subset(environment.questions(&split)?, args.num_samples.unwrap_or(50), args.seed);
        let pages_missing = environment.check_index(&mut questions).await?;
        let runner = environment.runner(sandbox);
        let policy = args.policy.turn_policy(loaded, args.seed, &environment)?;
        // Counted by episode as each ends, not by batch: a batch is all of a small evaluation, and a bar that
        // moved only when the batch was graded showed nothing for its whole run.
        let progress = Progress::new("eval", "episodes", (questions.len() * n) as u64, 0);
        let mut all = Vec::with_capacity(questions.len() * n);
        // A question's n samples share a batch (and so its prompt's prefill).
        for chunk in questions.chunks((args.batch_size / n).max(1)) {
            let repeated: Vec<_> = chunk.iter().flat_map(|q| std::iter::repeat_n(q.clone(), n)).collect();
            let batch = runner.run_observed(policy.as_ref(), &repeated, &mut |_| progress.inc(1)).await?;
            all.extend(batch.episodes);
            let correct = all.iter().filter(|e| e.outcome == agentrt_rollout::EpisodeOutcome::Correct).count();
            progress.set(all.len() as u64, format!("accuracy {:.3} over {} graded", correct as f64 / all.len() as f64, all.len()));
        }
        progress.finish_and_clear();
        anyhow::Ok((environment, split, all, pages_missing))
    })?;
    let mut policy_name = loaded.name.clone();
    if !environment.demonstration.is_empty() && !args.policy.is_random() {
        policy_name.push_str(", shown the worked demonstration");
    }
    let metrics = Metrics::from_episodes_with(&episodes, DegeneracyThresholds { max_jaccard: args.max_jaccard, min_unique: args.min_unique });
    let info = EvalInfo {
        system_prompt: environment.system_prompt.clone(),
        demonstration: environment.settings().demonstration,
        gold_pages_missing,
        ..EvalInfo::new(
            policy_name,
            judged_by(&environment),
            format!("{} split of {}", split, environment.package.tasks.path().display()),
            args.seed,
            environment.spec.max_turns,
        )
    };
    write_report(&args.output_dir, &info, &metrics, &episodes)?;
    print!("{}", agentrt_eval::report_markdown(&info, &metrics));
    print_samples(&episodes, 3);
    println!("\nwritten to {}", args.output_dir.display());
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

/// Who graded, as the report says it: a judge's spec (`rule`, `openai:MODEL@URL`), else the grader's name.
fn judged_by(environment: &Environment) -> String {
    match &environment.package.grader {
        agentrt_environments::GraderChoice::Judge { spec, .. } => spec.clone(),
        _ => environment.grader.name(),
    }
}
