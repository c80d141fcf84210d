//! Every metric of `agentrt eval`, pinned: a scripted policy replays fixed programs against the fixture
//! tools in the real sandbox, the rule judge grades, and each number is asserted exactly.

use agentrt_environments::wiki::RandomPolicy;
use agentrt_eval::{compare, read_results, write_report, EvalInfo, Metrics, Rate};
use agentrt_rollout::{EpisodeOutcome, EpisodeRunner, EpisodeSpec, Question, ScriptedPolicy};
use std::collections::HashMap;

/// Four dev questions about the fixture pages: (id, question, answer, gold page).
const FIXTURE_QUESTIONS: [(&str, &str, &str, &str); 4] = [
    ("broncos", "Who did the Broncos defeat in Super Bowl 50?", "Carolina Panthers", "denver_broncos"),
    ("capital", "What is the capital of France?", "Paris", "paris"),
    ("discoverer", "Who discovered oxygen?", "Carl Wilhelm Scheele", "oxygen"),
    ("symbol", "What is the chemical symbol of oxygen?", "O", "oxygen"),
];

fn fixture_questions() -> Vec<Question> {
    FIXTURE_QUESTIONS
        .iter()
        .map(|&(id, question, answer, page)| Question {
            id: id.into(),
            question: question.into(),
            answers: vec![answer.into()],
            page: Some(page.into()),
            split: Some("dev".into()),
        })
        .collect()
}

fn program(code: &str) -> String {
    format!("Let me look.\n```python\n{code}\n```")
}

async fn runner(max_turns: usize) -> EpisodeRunner {
    agentrt_environments::testing::fixture_runner(EpisodeSpec { max_turns, ..EpisodeSpec::default() }).await
}

/// Each question's replies: broncos searches, reads and answers right; capital's program fails and it
/// answers wrong; discoverer replies with neither a program nor an answer; symbol writes programs until
/// its turns run out.
fn scripts() -> HashMap<String, Vec<String>> {
    [
        (
            "broncos",
            vec![
                program("hits = search_pages(\"Super Bowl 50\")\nprint(read_section(\"denver_broncos:super-bowl-50\"))"),
                "<answer>the Carolina Panthers</answer>".into(),
            ],
        ),
        ("capital", vec![program("print(undefined_name)"), "<answer>Lyon</answer>".into()]),
        ("discoverer", vec!["I do not know.".into()]),
        ("symbol", vec![program("search_pages(\"Paris capital\")"), program("view_sections(\"oxygen\")"), program("print(1)")]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_episodes_give_exact_metrics() {
    let questions = fixture_questions();
    let runner = runner(3).await;
    let batch = runner.run(&ScriptedPolicy::new(scripts()), &questions).await.unwrap();
    let e = &batch.episodes;
    assert_eq!(
        e.iter().map(|e| e.outcome).collect::<Vec<_>>(),
        vec![EpisodeOutcome::Correct, EpisodeOutcome::WrongAnswer, EpisodeOutcome::NoAnswer, EpisodeOutcome::MaxTurns]
    );
    assert!(e[0].turns[0].observation.as_deref().unwrap().contains("24-10"), "{:?}", e[0].turns[0]);
    assert!(e[1].turns[0].observation.as_deref().unwrap().contains("NameError: name 'undefined_name' is not defined"), "{:?}", e[1].turns[0]);

    let m = Metrics::from_episodes(e);
    assert_eq!(m.num_questions, 4);
    assert_eq!(m.accuracy, Rate::new(1, 4));
    assert_eq!(m.mean_reward, 0.25);
    assert_eq!(m.tool_calls.value, 1.0);
    assert_eq!(
        m.avg_tool_calls_by_tool,
        [("read_section".to_string(), 0.25), ("search_pages".into(), 0.5), ("view_sections".into(), 0.25)].into_iter().collect()
    );
    assert_eq!(m.avg_turns, 2.0);
    assert_eq!(m.avg_model_tokens, 0.0);
    assert_eq!(m.searched, Rate::new(2, 4));
    assert_eq!(m.search_hit_rate, Rate::new(1, 2));
    assert_eq!(m.mean_gold_rank, Some(1.0));
    // Of the 6 replies that did not answer (the two answers are not program turns): 5 programs, 4 ran.
    assert_eq!(m.program_replies, Rate::new(5, 6));
    assert_eq!(m.runnable_program_replies, Rate::new(4, 6));
    for (k, n) in [("correct", 1), ("wrong_answer", 1), ("no_answer", 1), ("max_turns", 1)] {
        assert_eq!(m.outcomes[k], Rate::new(n, 4), "{k}");
    }
    assert_eq!(m.program_errors, [("unknown-tool".to_string(), Rate::new(1, 5))].into_iter().collect());

    let dir = tempfile::tempdir().unwrap();
    let info = EvalInfo::new("scripted", "rule", "fixture", 0, 3);
    write_report(dir.path(), &info, &m, e).unwrap();
    // TensorBoard events beside the report (their format is checked by TensorBoard's reader in
    // bench/tensorboard_check.sh); a second report replaces them instead of appending.
    let events = dir.path().join(agentrt_tensorboard::EVENT_FILE);
    let size = std::fs::metadata(&events).expect("write_report writes TensorBoard events").len();
    write_report(dir.path(), &info, &m, e).unwrap();
    assert_eq!(std::fs::metadata(&events).unwrap().len(), size);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap()).unwrap();
    assert_eq!(
        (json["accuracy"].as_f64(), json["avg_tool_calls"].as_f64(), json["search_hit_rate"].as_f64(), json["num_questions"].as_u64()),
        (Some(0.25), Some(1.0), Some(0.5), Some(4))
    );
    // serde_json reads floats back to within an ulp; the counts must come back exactly.
    let back = read_results(dir.path()).unwrap().1;
    assert_eq!((back.accuracy.successes, back.accuracy.total, back.outcomes.len(), back.program_errors.len()), (1, 4, 4, 1));
    let transcripts = std::fs::read_to_string(dir.path().join("transcripts.jsonl")).unwrap();
    assert_eq!(transcripts.lines().count(), 4);
    assert!(transcripts.contains("\"program\":\"print(undefined_name)\\n\""), "{transcripts}");
    let table = compare(dir.path(), dir.path()).unwrap();
    assert!(table.contains("| accuracy | 0.250 | 0.250 | +0.000 [-0.494, +0.494] |"), "{table}");
    assert!(table.contains("| answer F1 |"), "{table}");
}

/// The runner tells as each episode plays its last turn, in the order they end (discoverer at its first
/// reply, broncos and capital at their second, symbol when its third program has run), each once, and the
/// batch it plays is the one `run` plays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_tells_as_each_episode_finishes_and_plays_the_same_batch() {
    let questions = fixture_questions();
    let runner = runner(3).await;
    let mut finished = Vec::new();
    let observed = runner.run_observed(&ScriptedPolicy::new(scripts()), &questions, &mut |i| finished.push(i)).await.unwrap();
    assert_eq!(finished, [2, 0, 1, 3], "the order the episodes ended in");
    let plain = runner.run(&ScriptedPolicy::new(scripts()), &questions).await.unwrap();
    let played = |b: &agentrt_rollout::RolloutBatch| {
        b.episodes.iter().map(|e| (e.outcome, e.turns.iter().map(|t| (t.reply.clone(), t.observation.clone())).collect::<Vec<_>>())).collect::<Vec<_>>()
    };
    assert_eq!(played(&observed), played(&plain));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_baseline_reads_then_answers_from_what_it_read() {
    let questions = vec![fixture_questions().remove(0)];
    let batch = runner(4).await.run(&RandomPolicy::new(5), &questions).await.unwrap();
    let ep = &batch.episodes[0];
    assert_eq!(ep.turns.len(), 2, "{:?}", ep.turns);
    assert!(ep.turns[0].program_error.is_none(), "{:?}", ep.turns[0]);
    let read = ep.turns[0].observation.clone().unwrap();
    let answer = ep.final_answer.clone().unwrap();
    assert!(!answer.is_empty() && read.contains(&answer), "answer {answer:?} is not a span of {read:?}");
}

/// Template collapse is flagged: a policy that writes the same reply to every question is degenerate,
/// a policy whose replies follow the question is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collapsed_policy_is_flagged_degenerate_and_a_normal_one_is_not() {
    let questions = fixture_questions();
    let runner = runner(3).await;
    let collapsed: HashMap<String, Vec<String>> = questions.iter().map(|q| (q.id.clone(), vec!["<answer>Paris</answer>".to_string()])).collect();
    let batch = runner.run(&ScriptedPolicy::new(collapsed), &questions).await.unwrap();
    let m = Metrics::from_episodes(&batch.episodes);
    assert_eq!(m.accuracy, Rate::new(1, 4), "collapse can still score");
    let d = m.diversity.unwrap();
    assert!(d.degenerate && d.unique_samples == Rate::new(1, 4) && d.mean_jaccard == 1.0, "{d:?}");

    let normal: HashMap<String, Vec<String>> = [
        ("broncos", program("print(read_section(\"denver_broncos:super-bowl-50\"))")),
        ("capital", "<answer>Paris</answer>".to_string()),
        ("discoverer", program("hits = search_pages(\"who discovered oxygen\")\nprint(hits[0][\"title\"])")),
        ("symbol", "The symbol is <answer>O</answer>".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), vec![v, "<answer>I am not sure</answer>".to_string()]))
    .collect();
    let batch = runner.run(&ScriptedPolicy::new(normal), &questions).await.unwrap();
    let d = Metrics::from_episodes(&batch.episodes).diversity.unwrap();
    assert!(!d.degenerate && d.unique_samples == Rate::new(4, 4) && d.mean_jaccard < 0.7, "{d:?}");
}
