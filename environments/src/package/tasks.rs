//! A package's tasks file: JSON Lines, one task a line. A task has an `id` (a string or a number), the
//! `question` the model is asked, a `split`, and whatever its grader reads (`answer` or `answers` for the
//! built-in graders; any field for a grader component, which gets the whole row).

use agentrt_rollout::{Question, RolloutError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Every task of a package, in file order, with its row.
pub struct TaskRows {
    path: PathBuf,
    tasks: Vec<(Question, serde_json::Value)>,
    by_id: HashMap<String, usize>,
}

impl TaskRows {
    /// Reads `path`. A line that is not a JSON object, lacks `id` or `question`, or repeats an id is an
    /// error naming the file and the line.
    pub fn read(path: &Path) -> Result<TaskRows, RolloutError> {
        let text = std::fs::read_to_string(path).map_err(|e| RolloutError::Invalid(format!("the tasks file {}: {e}", path.display())))?;
        let mut rows = TaskRows { path: path.to_path_buf(), tasks: Vec::new(), by_id: HashMap::new() };
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = || format!("{} line {}", path.display(), i + 1);
            let row: serde_json::Value = serde_json::from_str(line).map_err(|e| RolloutError::Invalid(format!("{}: not JSON: {e}", at())))?;
            let question = question_of(&row).map_err(|e| RolloutError::Invalid(format!("{}: {e}", at())))?;
            if rows.by_id.insert(question.id.clone(), rows.tasks.len()).is_some() {
                return Err(RolloutError::Invalid(format!("{}: the id {:?} is given twice", at(), question.id)));
            }
            rows.tasks.push((question, row));
        }
        if rows.tasks.is_empty() {
            return Err(RolloutError::Invalid(format!("the tasks file {} holds no tasks", path.display())));
        }
        Ok(rows)
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tasks of `split` (`all`: every one), in file order.
    pub fn questions(&self, split: &str) -> Vec<Question> {
        self.tasks.iter().map(|(q, _)| q).filter(|q| split == "all" || q.split.as_deref() == Some(split)).cloned().collect()
    }

    /// The row of task `id`.
    pub fn row(&self, id: &str) -> Option<&serde_json::Value> {
        self.by_id.get(id).map(|&i| &self.tasks[i].1)
    }
}

/// A row as the rollout's question: its id, question and split, and its answers (`answer`, a string or a
/// number, or `answers`, a list of them) where it gives them.
fn question_of(row: &serde_json::Value) -> Result<Question, String> {
    let object = row.as_object().ok_or("a task is a JSON object")?;
    let id = match object.get("id") {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        _ => return Err("`id` (a string or a number) is missing".into()),
    };
    let question = match object.get("question") {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => return Err(format!("task {id}: `question` (the text the model is asked) is missing")),
    };
    let split = match object.get("split") {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(format!("task {id}: `split` is {other}, not a string")),
    };
    let answer_text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        other => Err(format!("task {id}: an answer is {other}, not a string or a number")),
    };
    let answers = match (object.get("answer"), object.get("answers")) {
        (Some(_), Some(_)) => return Err(format!("task {id}: give `answer` or `answers`, not both")),
        (Some(a), None) => vec![answer_text(a)?],
        (None, Some(serde_json::Value::Array(list))) => list.iter().map(answer_text).collect::<Result<_, _>>()?,
        (None, Some(other)) => return Err(format!("task {id}: `answers` is {other}, not a list")),
        (None, None) => Vec::new(),
    };
    Ok(Question { id, question, answers, page: None, split })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(text: &str) -> Result<TaskRows, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        std::fs::write(&path, text).unwrap();
        TaskRows::read(&path).map_err(|e| e.to_string())
    }

    #[test]
    fn tasks_are_read_with_their_answers_and_rows_by_split() {
        let r = rows("{\"id\": 1, \"question\": \"2+2?\", \"answer\": 4, \"split\": \"train\", \"units\": \"apples\"}\n\n{\"id\": \"b\", \"question\": \"Capital?\", \"answers\": [\"Paris\", \"paris\"], \"split\": \"test\"}\n").unwrap();
        let train = r.questions("train");
        assert_eq!((train.len(), train[0].id.as_str(), train[0].answers.clone()), (1, "1", vec!["4".to_string()]));
        assert_eq!(r.questions("test")[0].answers, vec!["Paris", "paris"]);
        assert_eq!(r.questions("all").len(), 2);
        assert_eq!(r.row("1").unwrap()["units"], "apples", "the whole row is kept for the grader");
    }

    #[test]
    fn a_bad_row_is_an_error_naming_the_line() {
        for (text, expected) in [
            ("{\"question\": \"q\"}\n", "line 1: `id`"),
            ("{\"id\": 1, \"question\": \"q\"}\n{\"id\": 1, \"question\": \"r\"}\n", "line 2: the id \"1\" is given twice"),
            ("{\"id\": 1}\n", "line 1: task 1: `question`"),
            ("[1]\n", "line 1: a task is a JSON object"),
            ("{\"id\": 1, \"question\": \"q\", \"answer\": 1, \"answers\": [1]}\n", "not both"),
            ("{\"id\": 1, \"question\": \"q\", \"split\": 3}\n", "`split` is 3"),
            ("", "holds no tasks"),
            ("{oops\n", "line 1: not JSON"),
        ] {
            let error = rows(text).err().expect(text);
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }
}
