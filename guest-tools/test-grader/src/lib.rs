//! A grader component (the `agentrt:tools/grader` world) for the tests. It grades the answer's last word
//! that is a number against the task's `answer`, to a relative tolerance of 1e-6, as one reward part
//! `number`.
//!
//! A task may ask it to misbehave, so the tests can check that the host bounds a grader: `"misbehave":
//! "loop"` spins forever, `"allocate"` grows memory without bound, `"panic"` traps. Without that field it
//! is an honest grader.

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "agentrt:tools/grader",
    });
}

use bindings::exports::agentrt::tools::grading::{AnswerGrade, Guest, RewardPart};

struct TestGrader;

/// The last word of `text` that reads as a number, trailing stops and tags stripped.
fn last_number(text: &str) -> Option<f64> {
    text.split(|c: char| c.is_whitespace() || c == '<' || c == '>').rev().find_map(|w| w.trim_end_matches(['.', ',']).parse().ok())
}

impl Guest for TestGrader {
    fn grade(task: String, answer: String) -> Result<AnswerGrade, String> {
        let task: serde_json::Value = serde_json::from_str(&task).map_err(|e| format!("the task is not JSON: {e}"))?;
        match task.get("misbehave").and_then(|m| m.as_str()) {
            Some("loop") => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Some("allocate") => {
                let mut kept: Vec<Vec<u8>> = Vec::new();
                loop {
                    kept.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&kept);
                }
            }
            Some("panic") => panic!("asked to panic"),
            _ => {}
        }
        let gold = match task.get("answer") {
            Some(serde_json::Value::Number(n)) => n.as_f64(),
            Some(serde_json::Value::String(s)) => last_number(s),
            _ => None,
        }
        .ok_or_else(|| "the task has no numeric `answer`".to_string())?;
        let correct = last_number(&answer).is_some_and(|x| (x - gold).abs() <= 1e-6 * gold.abs().max(1.0));
        Ok(AnswerGrade { parts: vec![RewardPart { name: "number".into(), value: if correct { 1.0 } else { 0.0 } }], correct })
    }
}

bindings::export!(TestGrader with_types_in bindings);
