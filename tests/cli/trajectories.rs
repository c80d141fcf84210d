//! `agentrt trajectories` end to end on the fixture tools: synthesised and rejection-sampled trajectories
//! in the chat form with their manifest, and bad input named by file and line.

use crate::common::{agentrt, read_json, read_jsonl, run_ok};
use std::path::{Path, PathBuf};

fn questions(dir: &Path) -> PathBuf {
    let p = dir.join("questions.jsonl");
    let rows = [
        r#"{"id": "q1", "question": "Which team won Super Bowl 50?", "answer": "Denver Broncos", "page": "denver_broncos", "split": "train"}"#,
        r#"{"id": "q2", "question": "Who discovered oxygen in the 1770s?", "answer": "Carl Wilhelm Scheele", "page": "oxygen", "split": "train"}"#,
        r#"{"id": "q3", "question": "What is the melting point of gold?", "answer": "1064", "page": "gold", "split": "train"}"#,
        r#"{"id": "q4", "question": "Which sub-tribe inhabited the Paris area?", "answer": "Parisii", "page": "paris", "split": "dev"}"#,
    ];
    std::fs::write(&p, rows.join("\n")).unwrap();
    p
}

fn manifest(out: &Path) -> serde_json::Value {
    let mut p = out.as_os_str().to_owned();
    p.push(".manifest.json");
    read_json(&PathBuf::from(p))
}

#[test]
fn synth_writes_the_reachable_train_questions_with_a_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let q = questions(dir.path());
    let out = dir.path().join("synth.jsonl");
    run_ok(["trajectories", "synth", "--style", "browse", "--fixture", "--questions", q.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let kept = read_jsonl(&out);
    let ids: Vec<&str> = kept.iter().map(|t| t["question_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["q1", "q2"]);
    for t in &kept {
        let roles: Vec<&str> = t["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles[..2], ["system", "user"], "the full prompt, no demonstration: {roles:?}");
        assert_eq!(roles.last(), Some(&"assistant"));
        assert!(roles.iter().all(|r| ["system", "user", "assistant", "tool"].contains(r)));
        assert_eq!(t["source"], "synth");
        assert!(t["tool_calls"].as_u64().unwrap() <= 3);
    }
    assert!(kept[0]["messages"][0]["content"].as_str().unwrap().contains("view_sections(page_id)"));
    let m = manifest(&out);
    assert_eq!(m["source"], "synth");
    assert_eq!(m["counts"]["played"], 3);
    assert_eq!(m["counts"]["kept"], 2);
    assert_eq!(m["counts"]["rejected_by_judge"], 1);
    assert_eq!(m["settings"]["system_prompt"], "full");
    assert_eq!(m["settings"]["demonstration"], false);
    assert_eq!(m["settings"]["style"], "browse");
    assert!(m["command"].as_str().unwrap().contains("trajectories synth"));
    assert!(m["time_utc"].as_str().unwrap().ends_with('Z'));

    // The passages style: one program, then the answer as the printed sentences spell it. The fixture's
    // Super Bowl sentence says "Broncos", not "Denver Broncos", so only q2 is kept.
    let out = dir.path().join("passages.jsonl");
    run_ok(["trajectories", "synth", "--fixture", "--style", "passages", "--questions", q.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let kept = read_jsonl(&out);
    let ids: Vec<&str> = kept.iter().map(|t| t["question_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["q2"]);
    let messages = kept[0]["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    assert!(messages[2]["content"].as_str().unwrap().contains("read_section(hit[\"section_id\"])"), "{}", messages[2]);
    assert_eq!(messages[4]["content"], "<answer>Carl Wilhelm Scheele</answer>");
    assert_eq!(manifest(&out)["settings"]["style"], "passages");

    // The read style: the top hit's best section printed whole, then the answer as it spells it (or the
    // next hits' sections first): every kept conversation starts with the same program.
    for t in &synth_kept(dir.path(), &q, Some("read")) {
        let messages = t["messages"].as_array().unwrap();
        let question = messages[1]["content"].as_str().unwrap();
        assert_eq!(messages[2]["content"], format!("```python\nhits = search_pages({question:?})\nprint(read_section(hits[0][\"section_id\"]))\n```"));
        assert!(messages.last().unwrap()["content"].as_str().unwrap().starts_with("<answer>"));
        assert!(t["tool_calls"].as_u64().unwrap() == 2 || t["tool_calls"].as_u64().unwrap() == 5, "{t}");
    }

    // The scan style: one program that reads on by itself (the top hit's best section, then, when it lacks
    // the question's words, the sentences of the next hits richest in them), the same for every question
    // but its first line, then the answer: two tool calls, or four when it read on.
    for t in &synth_kept(dir.path(), &q, Some("scan")) {
        let (program, _, _) = one_program_then_answer(t);
        assert!(program.contains("read_section(hits[0][\"section_id\"])") && program.contains("for hit in hits[1:3]:"), "{program}");
        assert!(t["tool_calls"].as_u64().unwrap() == 2 || t["tool_calls"].as_u64().unwrap() == 4, "{t}");
    }

    // The default style, find: one program that prints the best passages search_passages finds, as many as
    // fit, the same for every question but its first line; one tool call, then the answer as printed.
    for t in &synth_kept(dir.path(), &q, None) {
        let (program, printed, answer) = one_program_then_answer(t);
        assert!(program.contains("for passage in search_passages(question, k=20):"), "{program}");
        assert_eq!(t["tool_calls"].as_u64(), Some(1), "{t}");
        assert!(!answer.is_empty() && printed.contains(answer), "{answer:?} is not in what the program printed: {printed}");
        assert!(printed.chars().count() <= 1500, "{printed}");
    }
}

/// The conversations `trajectories synth --fixture` keeps with `style` (the default when `None`): at least
/// one, and the manifest names the style.
fn synth_kept(dir: &Path, questions: &Path, style: Option<&str>) -> Vec<serde_json::Value> {
    let name = style.unwrap_or("find");
    let out = dir.join(format!("{name}.jsonl"));
    let mut args = vec!["trajectories", "synth", "--fixture", "--questions", questions.to_str().unwrap(), "--out", out.to_str().unwrap()];
    if let Some(style) = style {
        args.extend(["--style", style]);
    }
    run_ok(args);
    let kept = read_jsonl(&out);
    assert!(!kept.is_empty(), "{name}: nothing kept");
    assert_eq!(manifest(&out)["settings"]["style"], name);
    kept
}

/// A conversation of one program that quotes the question on its first line, its output, then the answer:
/// the program, what it printed and the answer.
fn one_program_then_answer(t: &serde_json::Value) -> (&str, &str, &str) {
    let messages = t["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    let question = messages[1]["content"].as_str().unwrap();
    let program = messages[2]["content"].as_str().unwrap();
    assert!(program.starts_with(&format!("```python\nquestion = {question:?}\n")), "{program}");
    let answer = messages[4]["content"].as_str().unwrap();
    assert!(answer.starts_with("<answer>") && answer.ends_with("</answer>"), "{answer}");
    (program, messages[3]["content"].as_str().unwrap(), answer.trim_start_matches("<answer>").trim_end_matches("</answer>"))
}

#[test]
fn sample_keeps_only_judged_correct_episodes_and_reports_the_yield() {
    let dir = tempfile::tempdir().unwrap();
    let q = questions(dir.path());
    let out = dir.path().join("sample.jsonl");
    let (q, out_file) = (q.to_str().unwrap(), out.to_str().unwrap());
    let stdout = run_ok(["trajectories", "sample", "--fixture", "--baseline", "random", "--k", "6", "--seed", "3", "--questions", q, "--out", out_file]);
    let m = manifest(&out);
    let c = &m["counts"];
    assert_eq!(c["played"], 18);
    let kept = c["kept"].as_u64().unwrap();
    assert_eq!(kept + c["rejected_by_judge"].as_u64().unwrap() + c["duplicates_dropped"].as_u64().unwrap(), 18);
    assert_eq!(read_jsonl(&out).len() as u64, kept);
    assert!(read_jsonl(&out).iter().all(|t| t["reward"].as_f64().unwrap() > 0.5));
    assert_eq!(m["model"], "random baseline");
    assert_eq!(m["k"], 6);
    assert!((m["yield"].as_f64().unwrap() - kept as f64 / 18.0).abs() < 1e-9);
    assert!(stdout.contains("yield"));
}

#[test]
fn a_bad_questions_line_is_named_with_its_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("bad.jsonl");
    std::fs::write(&q, "{\"question\": \"a?\", \"answer\": \"b\", \"split\": \"train\"}\n{\"question\": \"c?\", \"split\": \"train\"}\n").unwrap();
    let o = agentrt()
        .args(["trajectories", "synth", "--fixture", "--questions", q.to_str().unwrap(), "--out", dir.path().join("o.jsonl").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.jsonl:2") && err.contains("answer"), "{err}");
    assert!(!dir.path().join("o.jsonl").exists());
}
