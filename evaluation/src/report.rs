//! What `agentrt eval` writes, and `agentrt eval compare`.

use crate::metrics::{difference_interval, Mean, Metrics, Rate};
use crate::paired::TRANSCRIPTS;
use crate::EvalError;
use agentrt_charts::{write_bar_chart, Bar, BarChart};
use agentrt_rollout::Episode;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file of an evaluation's info and metrics, which [`read_results`] and [`compare`] read back.
pub const RESULTS_JSON: &str = "results.json";
/// The file of the evaluation's markdown table.
pub const RESULTS_MD: &str = "results.md";
/// The file of the evaluation's bar chart (accuracy, search hits, programs run, failures).
pub const RESULTS_PNG: &str = "results.png";

/// What was evaluated, recorded beside the numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalInfo {
    /// The policy: a model (and adapter), a baseline, or an endpoint.
    pub policy: String,
    /// The answer judge, as specified (`rule`, `rule:THRESHOLD`, `openai:MODEL@BASE_URL`...).
    pub judge: String,
    /// The questions: split and file.
    pub questions: String,
    /// The seed that picked the questions and drove sampling.
    pub seed: u64,
    /// The most turns an episode was allowed.
    pub max_turns: usize,
    /// The system prompt every episode was sent, as sent (plug-in tools listed); empty in results written
    /// before it was recorded.
    #[serde(default)]
    pub system_prompt: String,
    /// The worked turns shown before every question (`(role, content)`), as sent; none when no
    /// demonstration was shown.
    #[serde(default)]
    pub demonstration: Vec<(String, String)>,
    /// Questions whose gold page the search index did not hold (their searches were not scored).
    #[serde(default)]
    pub gold_pages_missing: usize,
}

impl EvalInfo {
    /// What was evaluated, with nothing recorded of the prompt (as [`EvalInfo::with_prompt`] adds).
    pub fn new(policy: impl Into<String>, judge: impl Into<String>, questions: impl Into<String>, seed: u64, max_turns: usize) -> EvalInfo {
        EvalInfo {
            policy: policy.into(),
            judge: judge.into(),
            questions: questions.into(),
            seed,
            max_turns,
            system_prompt: String::new(),
            demonstration: Vec::new(),
            gold_pages_missing: 0,
        }
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> EvalError + '_ {
    move |e| EvalError::Io { path: path.to_path_buf(), source: e }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), EvalError> {
    agentrt_assets::write_atomic(path, bytes).map_err(io(path))
}

/// `results.json`: the headline numbers at the top level, then everything.
pub fn results_json(info: &EvalInfo, m: &Metrics) -> serde_json::Value {
    serde_json::json!({
        "accuracy": m.accuracy.value,
        "avg_tool_calls": m.tool_calls.value,
        "answer_f1": m.answer_f1.value,
        "search_hit_rate": m.search_hit_rate.value,
        "num_questions": m.num_questions,
        "info": info,
        "metrics": m,
    })
}

fn pct(r: &Rate) -> String {
    if r.total == 0 {
        return "n/a (none to count)".into();
    }
    format!("{:.1}% [{:.1}, {:.1}] ({}/{})", 100.0 * r.value, 100.0 * r.ci95.0, 100.0 * r.ci95.1, r.successes, r.total)
}

fn mean(m: &Mean, digits: usize) -> String {
    format!("{:.d$} [{:.d$}, {:.d$}]", m.value, m.ci95.0, m.ci95.1, d = digits)
}

/// The markdown table of one evaluation.
pub fn markdown(info: &EvalInfo, m: &Metrics) -> String {
    let mut s = format!(
        "# Evaluation: {}\n\nquestions: {} ({}), judge: {}, max turns: {}, seed: {}\n\n",
        info.policy, m.num_questions, info.questions, info.judge, info.max_turns, info.seed
    );
    if info.gold_pages_missing > 0 {
        s.push_str(&format!("{} questions name a gold page the search index does not hold: their searches are not scored.\n\n", info.gold_pages_missing));
    }
    s.push_str("| metric | value (95% CI) |\n|---|---|\n");
    let mut row = |k: &str, v: String| s.push_str(&format!("| {k} | {v} |\n"));
    row("accuracy", pct(&m.accuracy));
    row("mean reward", format!("{:.3}", m.mean_reward));
    row("answer F1", mean(&m.answer_f1, 3));
    row("avg tool calls", mean(&m.tool_calls, 2));
    for (tool, v) in &m.avg_tool_calls_by_tool {
        row(&format!("avg calls: {tool}"), format!("{v:.2}"));
    }
    row("avg turns", format!("{:.2}", m.avg_turns));
    row("avg model tokens", format!("{:.1}", m.avg_model_tokens));
    row("searched", pct(&m.searched));
    row("search hit rate (gold in first search)", pct(&m.search_hit_rate));
    row("mean gold rank", m.mean_gold_rank.map_or("-".into(), |r| format!("{r:.2}")));
    if let (Some(p), Some(x)) = (&m.answer_printed, &m.extraction) {
        row("gold answer printed (ceiling)", pct(p));
        row("correct where printed (extraction)", pct(x));
    }
    row("replies with a program (of replies not answering)", pct(&m.program_replies));
    row("replies with a runnable program (of replies not answering)", pct(&m.runnable_program_replies));
    if let Some(r) = &m.runnable_programs {
        row("programs that ran (of programs)", pct(r));
    }
    if let Some(r) = &m.read_more {
        row("read on: a second program (of episodes with one)", pct(r));
    }
    if let Some(d) = &m.diversity {
        row("distinct samples", pct(&d.unique_samples));
        row("mean pairwise Jaccard of samples", format!("{:.3}", d.mean_jaccard));
        if let Some(j) = d.mean_jaccard_within_question {
            row("mean pairwise Jaccard within a question", format!("{j:.3}"));
        }
        let why = format!("Jaccard > {} or distinct < {:.0}%", d.thresholds.max_jaccard, d.thresholds.min_unique * 100.0);
        row("degenerate (template collapse)", format!("{} ({why})", if d.degenerate { "**yes**" } else { "no" }));
    }
    for (k, r) in &m.pass_at {
        row(&format!("pass@{k} (over {} questions)", r.total), format!("{:.1}% [{:.1}, {:.1}]", 100.0 * r.value, 100.0 * r.ci95.0, 100.0 * r.ci95.1));
    }
    for (k, r) in &m.outcomes {
        row(&format!("outcome: {k}"), pct(r));
    }
    for (k, r) in &m.program_errors {
        row(&format!("program error: {k}"), pct(r));
    }
    s
}

/// The evaluation as TensorBoard events, at step 0, replacing any from an earlier evaluation into this
/// directory: every metric as a scalar (`metrics/accuracy/value`, ...) and each episode's replies as text.
fn write_events(dir: &Path, info: &EvalInfo, metrics: &Metrics, episodes: &[Episode]) -> Result<(), EvalError> {
    let path = agentrt_tensorboard::event_file(dir);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&path)(e)),
        _ => {}
    }
    agentrt_tensorboard::append_scalars(dir, 0, &results_json(info, metrics)).map_err(io(&path))?;
    let transcripts: Vec<(String, String)> = episodes
        .iter()
        .map(|e| {
            let replies: Vec<String> = e.turns.iter().map(|t| format!("```\n{}\n```", t.reply)).collect();
            (format!("transcripts/{}", e.question.id), format!("**{}** ({:?})\n\n{}", e.question.question, e.outcome, replies.join("\n")))
        })
        .collect();
    agentrt_tensorboard::append_texts(dir, 0, &transcripts).map_err(io(&path))
}

/// Writes results.json, results.md, results.png and transcripts.jsonl into `dir` (created).
pub fn write_report(dir: &Path, info: &EvalInfo, metrics: &Metrics, episodes: &[Episode]) -> Result<Vec<PathBuf>, EvalError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut lines = String::new();
    for e in episodes {
        lines.push_str(&serde_json::to_string(e).map_err(|e| EvalError::Invalid(e.to_string()))?);
        lines.push('\n');
    }
    let paths = [dir.join(TRANSCRIPTS), dir.join(RESULTS_MD), dir.join(RESULTS_JSON), dir.join(RESULTS_PNG)];
    write_atomic(&paths[0], lines.as_bytes())?;
    write_atomic(&paths[1], markdown(info, metrics).as_bytes())?;
    write_atomic(&paths[2], serde_json::to_string_pretty(&results_json(info, metrics)).expect("serialises").as_bytes())?;
    let bar = |label: &str, r: &Rate| Bar { label: label.into(), value: r.value, interval: Some(r.ci95) };
    let mut bars = vec![bar("accuracy", &metrics.accuracy), bar("search hit", &metrics.search_hit_rate)];
    // Programs that ran of the programs written: an answer reply is no program, so it is not counted (a
    // share of replies would read as half the programs failing when half the replies answered).
    if let Some(r) = metrics.runnable_programs.as_ref().filter(|r| r.total > 0) {
        bars.push(bar("programs run", r));
    }
    for (k, r) in &metrics.outcomes {
        if k != "correct" {
            let label = match k.as_str() {
                "wrong_answer" => "wrong",
                "no_answer" => "no answer",
                "max_turns" => "max turns",
                other => other,
            };
            bars.push(bar(label, r));
        }
    }
    let chart = BarChart { title: format!("{} (n={})", info.policy, metrics.num_questions), y_label: "fraction (95% CI)".into(), bars };
    write_bar_chart(&paths[3], &chart).map_err(|e| EvalError::Invalid(format!("{}: {e}", paths[3].display())))?;
    write_events(dir, info, metrics, episodes)?;
    Ok(paths.to_vec())
}

/// Several evaluations in one table, each named by its label: accuracy, answer F1, tool calls, search hit
/// rate and programs run (of programs written), each with its 95% interval, and each row's accuracy minus the first
/// row's with its interval ([`difference_interval`]); when `png` is given, their accuracies as a bar chart
/// with the intervals. An evaluation of other questions than the first row's is named in a note.
pub fn table(rows: &[(String, std::path::PathBuf)], png: Option<&Path>) -> Result<String, EvalError> {
    if rows.is_empty() {
        return Err(EvalError::Invalid("no evaluations to tabulate".into()));
    }
    let read: Vec<(String, EvalInfo, Metrics)> =
        rows.iter().map(|(label, dir)| read_results(dir).map(|(i, m)| (label.clone(), i, m))).collect::<Result<_, _>>()?;
    let pc = |r: &Rate| format!("{:.1}% [{:.1}, {:.1}]", 100.0 * r.value, 100.0 * r.ci95.0, 100.0 * r.ci95.1);
    let mut s = String::from(
        "| policy | questions | accuracy | vs first row | gold printed | extraction | answer F1 | tool calls | search hit rate | programs run |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let first = &read[0].2.accuracy;
    let mut notes = String::new();
    for (i, (label, info, m)) in read.iter().enumerate() {
        let (lo, hi) = difference_interval(first, &m.accuracy);
        let delta = if i == 0 { "-".to_string() } else { format!("{:+.1} [{:+.1}, {:+.1}]", 100.0 * (m.accuracy.value - first.value), 100.0 * lo, 100.0 * hi) };
        let optional = |r: &Option<Rate>| r.as_ref().map_or("-".to_string(), pc);
        s.push_str(&format!(
            "| {label} | {} | {} | {delta} | {} | {} | {} | {} | {} | {} |\n",
            m.num_questions,
            pc(&m.accuracy),
            optional(&m.answer_printed),
            optional(&m.extraction),
            mean(&m.answer_f1, 3),
            mean(&m.tool_calls, 2),
            pc(&m.search_hit_rate),
            // Results written before programs were counted apart give the share of replies.
            pc(m.runnable_programs.as_ref().unwrap_or(&m.runnable_program_replies))
        ));
        if info.questions != read[0].1.questions || info.seed != read[0].1.seed {
            notes.push_str(&format!("\n{label}: other questions ({}, seed {}) than the first row.", info.questions, info.seed));
        }
    }
    s.push_str(&notes);
    if let Some(png) = png {
        let bars = read.iter().map(|(label, _, m)| Bar { label: label.clone(), value: m.accuracy.value, interval: Some(m.accuracy.ci95) }).collect();
        let chart = BarChart { title: format!("accuracy on {}", read[0].1.questions), y_label: "accuracy (95% CI)".into(), bars };
        write_bar_chart(png, &chart).map_err(|e| EvalError::Invalid(format!("{}: {e}", png.display())))?;
    }
    Ok(s)
}

/// Reads a `results.json` back.
pub fn read_results(dir: &Path) -> Result<(EvalInfo, Metrics), EvalError> {
    let p = dir.join(RESULTS_JSON);
    let text = std::fs::read_to_string(&p).map_err(io(&p))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| EvalError::Malformed { path: p.clone(), reason: format!("not JSON: {e}") })?;
    let info = serde_json::from_value(v["info"].clone()).map_err(|e| EvalError::Malformed { path: p.clone(), reason: format!("`info`: {e}") })?;
    let m = serde_json::from_value(v["metrics"].clone()).map_err(|e| EvalError::Malformed { path: p.clone(), reason: format!("`metrics`: {e}") })?;
    Ok((info, m))
}

/// Two evaluations side by side, as a markdown table with the difference B - A.
pub fn compare(a: &Path, b: &Path) -> Result<String, EvalError> {
    let (ia, ma) = read_results(a)?;
    let (ib, mb) = read_results(b)?;
    let mut s = format!("A: {} ({})\nB: {} ({})\n\n| metric | A | B | B - A |\n|---|---|---|---|\n", a.display(), ia.policy, b.display(), ib.policy);
    let (lo, hi) = difference_interval(&ma.accuracy, &mb.accuracy);
    // Each row's difference; the accuracy's comes with its interval.
    let mut row = |k: &str, x: f64, y: f64, interval: &str| s.push_str(&format!("| {k} | {x:.3} | {y:.3} | {:+.3}{interval} |\n", y - x));
    row("questions", ma.num_questions as f64, mb.num_questions as f64, "");
    row("accuracy", ma.accuracy.value, mb.accuracy.value, &format!(" [{lo:+.3}, {hi:+.3}]"));
    let mut num = |k: &str, x: f64, y: f64| row(k, x, y, "");
    num("mean reward", ma.mean_reward, mb.mean_reward);
    num("answer F1", ma.answer_f1.value, mb.answer_f1.value);
    if let (Some(pa), Some(pb), Some(xa), Some(xb)) = (&ma.answer_printed, &mb.answer_printed, &ma.extraction, &mb.extraction) {
        num("gold answer printed", pa.value, pb.value);
        num("extraction (correct where printed)", xa.value, xb.value);
    }
    num("avg tool calls", ma.tool_calls.value, mb.tool_calls.value);
    num("avg turns", ma.avg_turns, mb.avg_turns);
    num("avg model tokens", ma.avg_model_tokens, mb.avg_model_tokens);
    num("search hit rate", ma.search_hit_rate.value, mb.search_hit_rate.value);
    if let (Some(ra), Some(rb)) = (&ma.runnable_programs, &mb.runnable_programs) {
        num("programs run (of programs written)", ra.value, rb.value);
    }
    num("replies with a runnable program (of replies not answering)", ma.runnable_program_replies.value, mb.runnable_program_replies.value);
    for k in ma.outcomes.keys().chain(mb.outcomes.keys()).collect::<std::collections::BTreeSet<_>>() {
        let get = |m: &Metrics| m.outcomes.get(k).map_or(0.0, |r| r.value);
        num(&format!("outcome: {k}"), get(&ma), get(&mb));
    }
    s.push_str("\nThe accuracy interval above is Newcombe's, which treats A and B as independent samples.\n");
    // On the same questions, the paired comparison is the one to read; other questions have none.
    match crate::paired(a, b) {
        Ok(p) => s.push_str(&format!(
            "Question by question ({} questions): right in both {}, in A only {}, in B only {}, in neither {}. \
             B - A = {:+.3}, paired 95% interval [{:+.3}, {:+.3}] (bootstrap over the questions, {} resamples); \
             McNemar's exact p = {:.4}.\n",
            p.questions,
            p.both,
            p.only_a,
            p.only_b,
            p.neither,
            p.difference,
            p.ci95.0,
            p.ci95.1,
            crate::BOOTSTRAP_RESAMPLES,
            p.mcnemar_p
        )),
        Err(e) => s.push_str(&format!("No paired comparison: {e}\n")),
    }
    Ok(s)
}
