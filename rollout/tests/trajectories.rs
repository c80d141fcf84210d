//! A trajectory set keeps only the episodes the judge marks correct and the check passes, once each, and
//! says what it dropped in its manifest: played on the real sandbox over the fixture tools.

use agentrt_environments::testing::fixture_runner;
use agentrt_rollout::{EpisodeSpec, Offered, Question, ScriptedPolicy, Trajectory, TrajectoryCounts, TrajectorySet};
use std::collections::HashMap;

fn question(id: &str, text: &str, answer: &str) -> Question {
    Question { id: id.into(), question: text.into(), answers: vec![answer.into()], page: None, split: Some("train".into()) }
}

/// Wrong episodes (a wrong answer, no answer at all) never reach the file; correct ones do, once;
/// the manifest counts each kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_episode_never_reaches_the_output() {
    let runner = fixture_runner(EpisodeSpec { max_turns: 4, ..EpisodeSpec::default() }).await;
    let search = "```python\nhits = search_pages(\"Super Bowl 50\")\nfor h in hits:\n    print(h[\"page_id\"], \"|\", h[\"title\"])\n```";
    let scripts: HashMap<String, Vec<String>> = [
        ("right", vec![search.to_string(), "<answer>Denver Broncos</answer>".to_string()]),
        ("right-again", vec![search.to_string(), "<answer>Denver Broncos</answer>".to_string()]),
        ("wrong", vec![search.to_string(), "<answer>Carolina Panthers</answer>".to_string()]),
        ("silent", vec!["I do not know.".to_string()]),
        ("refused", vec!["<answer>Denver Broncos</answer>".to_string()]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let q = "Which team won Super Bowl 50?";
    let questions = vec![
        question("right", q, "Denver Broncos"),
        question("right-again", q, "Denver Broncos"),
        question("wrong", q, "Denver Broncos"),
        question("silent", q, "Denver Broncos"),
        question("refused", q, "Denver Broncos"),
    ];
    let batch = runner.run(&ScriptedPolicy::new(scripts), &questions).await.unwrap();
    let mut set = TrajectorySet::new("sample");
    let offered: Vec<Offered> =
        batch.episodes.iter().map(|e| set.offer(e, |e| if e.question.id == "refused" { Err("refused by the check".into()) } else { Ok(()) })).collect();
    assert_eq!(
        offered,
        vec![Offered::Kept, Offered::Duplicate, Offered::RejectedByJudge, Offered::RejectedByJudge, Offered::RejectedByCheck("refused by the check".into())]
    );
    let counts = set.counts();
    assert_eq!(counts, TrajectoryCounts { played: 5, kept: 1, rejected_by_judge: 2, rejected_by_check: 1, duplicates_dropped: 1 });
    assert!((counts.yield_rate() - 0.2).abs() < 1e-12);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.jsonl");
    let manifest = set.write(&out, serde_json::json!({"seed": 3})).unwrap();
    assert_eq!(manifest, dir.path().join("t.jsonl.manifest.json"));
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<Trajectory> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].question_id, "right");
    let roles: Vec<&str> = lines[0].messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    assert_eq!(lines[0].messages.last().unwrap().content, "<answer>Denver Broncos</answer>");
    assert!(!text.contains("Carolina Panthers") && !text.contains("I do not know"), "{text}");
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    assert_eq!(m["seed"], 3);
    assert_eq!(m["source"], "sample");
    assert_eq!(m["counts"]["played"], 5);
    assert_eq!(m["counts"]["kept"], 1);
    assert_eq!(m["counts"]["duplicates_dropped"], 1);
    assert_eq!(m["yield"], 0.2);
    assert_eq!(m["mean_tool_calls_kept"], 1.0);
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".tmp")));
}
