//! Questions from JSON Lines or Parquet: `question`, `answer` or `answers`, and optionally `id`, `page`
//! (the gold page id) and `split`. The bundled `data/wiki/questions.jsonl` has all of them.

use crate::error::RolloutError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One question with its accepted answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// The file's `id` (a non-string id as its JSON text), or `line-N` when it has none; scripted policies and trajectories key on it.
    pub id: String,
    /// The question text the agent must answer.
    pub question: String,
    /// Every accepted answer (the judge takes them as aliases); never empty.
    pub answers: Vec<String>,
    /// The gold page id, when known (search quality is measured against it).
    pub page: Option<String>,
    /// The split it belongs to (`train`, `dev`...); [`read_questions`] can keep only one.
    pub split: Option<String>,
}

impl Question {
    /// Whether `text` holds one of the answers as a whole word, ASCII case folded: what a reader of that
    /// text could answer with (the ceiling of a program's printed output).
    pub fn answered_in(&self, text: &str) -> bool {
        self.answers.iter().any(|a| find_word_ci(text, a).is_some())
    }
}

#[derive(Deserialize)]
struct Row {
    id: Option<serde_json::Value>,
    question: Option<String>,
    answer: Option<String>,
    #[serde(default)]
    answers: Vec<String>,
    page: Option<String>,
    split: Option<String>,
}

impl Row {
    fn into_question(self, line: usize) -> Result<Question, String> {
        let question = self.question.filter(|q| !q.trim().is_empty()).ok_or("missing or empty field `question`")?;
        let mut answers: Vec<String> = self.answer.into_iter().chain(self.answers).filter(|a| !a.trim().is_empty()).collect();
        let mut seen = std::collections::HashSet::new();
        answers.retain(|a| seen.insert(a.clone()));
        if answers.is_empty() {
            return Err("no `answer` or `answers`".into());
        }
        let id = match self.id {
            None | Some(serde_json::Value::Null) => format!("line-{line}"),
            Some(serde_json::Value::String(s)) => s,
            Some(other) => other.to_string(),
        };
        Ok(Question { id, question, answers, page: self.page, split: self.split })
    }
}

/// The character index of `needle` in `hay`, ASCII case folded, at an occurrence not inside a longer word (`air` is not found in `repair`).
pub fn find_word_ci(hay: &str, needle: &str) -> Option<usize> {
    let needle = needle.trim().to_ascii_lowercase();
    if needle.is_empty() {
        return None;
    }
    let lower = hay.to_ascii_lowercase();
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric());
    let mut from = 0;
    while let Some(b) = lower[from..].find(&needle).map(|b| b + from) {
        let e = b + needle.len();
        if !alnum(lower[..b].chars().next_back()) && !alnum(lower[e..].chars().next()) {
            return Some(lower[..b].chars().count());
        }
        from = b + lower[b..].chars().next().map_or(1, char::len_utf8);
    }
    None
}

/// `items` in a seeded random order: the one order `agentrt eval --num-samples N --seed S` takes its first
/// N questions from, and training's held-out evaluation slice (`run.eval_skip`) skips them in.
pub fn seeded_order<T>(mut items: Vec<T>, seed: u64) -> Vec<T> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    items.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    items
}

/// The first `n` of [`seeded_order`] (all of `items`, in their own order, when `n` is 0 or more than there are).
pub fn seeded_subset<T>(items: Vec<T>, n: usize, seed: u64) -> Vec<T> {
    if n > 0 && n < items.len() {
        let mut items = seeded_order(items, seed);
        items.truncate(n);
        items
    } else {
        items
    }
}

/// Reads questions (`.jsonl`/`.json`/`.ndjson` or `.parquet`), keeping those of `split` when given. A bad
/// row is an error that names the file and the line (the row, for Parquet).
pub fn read_questions(path: &Path, split: Option<&str>) -> Result<Vec<Question>, RolloutError> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let all = match ext.as_str() {
        "jsonl" | "json" | "ndjson" => read_jsonl(path)?,
        "parquet" => read_parquet(path)?,
        _ => return Err(RolloutError::Malformed { path: path.into(), reason: "unknown questions format (expected .jsonl or .parquet)".into() }),
    };
    Ok(match split {
        Some(s) => all.into_iter().filter(|q| q.split.as_deref() == Some(s)).collect(),
        None => all,
    })
}

fn read_jsonl(path: &Path) -> Result<Vec<Question>, RolloutError> {
    let text = std::fs::read_to_string(path).map_err(|e| RolloutError::Io { path: path.into(), source: e })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |reason: String| RolloutError::BadQuestion { path: path.into(), line: i + 1, reason };
        let row: Row = serde_json::from_str(line).map_err(|e| bad(format!("malformed JSON: {e}")))?;
        out.push(row.into_question(i + 1).map_err(bad)?);
    }
    Ok(out)
}

fn read_parquet(path: &Path) -> Result<Vec<Question>, RolloutError> {
    use arrow_array::{Array, LargeStringArray, ListArray, RecordBatch, StringArray};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let malformed = |reason: String| RolloutError::Malformed { path: path.into(), reason };
    let bytes = bytes::Bytes::from(std::fs::read(path).map_err(|e| RolloutError::Io { path: path.into(), source: e })?);
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| malformed(format!("not a readable Parquet file: {e}")))?
        .build()
        .map_err(|e| malformed(e.to_string()))?;

    fn strings(batch: &RecordBatch, name: &str, row: usize) -> Option<String> {
        let col = batch.column_by_name(name)?;
        if col.is_null(row) {
            return None;
        }
        if let Some(a) = col.as_any().downcast_ref::<StringArray>() {
            return Some(a.value(row).to_string());
        }
        if let Some(a) = col.as_any().downcast_ref::<LargeStringArray>() {
            return Some(a.value(row).to_string());
        }
        None
    }
    let mut out = Vec::new();
    let mut row_number = 0;
    for batch in reader {
        let batch = batch.map_err(|e| malformed(format!("reading a record batch: {e}")))?;
        if batch.column_by_name("question").is_none() {
            return Err(malformed("no `question` column".into()));
        }
        for r in 0..batch.num_rows() {
            row_number += 1;
            let answers = match batch.column_by_name("answers") {
                Some(col) if !col.is_null(r) => match col.as_any().downcast_ref::<ListArray>() {
                    Some(list) => {
                        let values = list.value(r);
                        match values.as_any().downcast_ref::<StringArray>() {
                            Some(s) => (0..s.len()).filter(|&i| !s.is_null(i)).map(|i| s.value(i).to_string()).collect(),
                            None => {
                                return Err(RolloutError::BadQuestion {
                                    path: path.into(),
                                    line: row_number,
                                    reason: "`answers` is not a list of strings".into(),
                                })
                            }
                        }
                    }
                    None => return Err(RolloutError::BadQuestion { path: path.into(), line: row_number, reason: "`answers` is not a list column".into() }),
                },
                _ => Vec::new(),
            };
            let row = Row {
                id: strings(&batch, "id", r).map(serde_json::Value::String),
                question: strings(&batch, "question", r),
                answer: strings(&batch, "answer", r),
                answers,
                page: strings(&batch, "page", r),
                split: strings(&batch, "split", r),
            };
            out.push(row.into_question(row_number).map_err(|reason| RolloutError::BadQuestion { path: path.into(), line: row_number, reason })?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_found_as_whole_words_case_folded() {
        assert_eq!(find_word_ci("repair the air", "Air"), Some(11));
        assert_eq!(find_word_ci("repair", "air"), None);
        let q = Question { id: "q".into(), question: "?".into(), answers: vec!["air".into(), "Denver Broncos".into()], page: None, split: None };
        assert!(q.answered_in("The DENVER BRONCOS won"));
        assert!(!q.answered_in("a repair shop"));
    }

    #[test]
    fn bad_rows_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.jsonl");
        std::fs::write(&p, "{\"question\": \"a?\", \"answer\": \"b\"}\n{\"question\": \"c?\"}\n").unwrap();
        let e = read_questions(&p, None).unwrap_err().to_string();
        assert!(e.contains("q.jsonl:2") && e.contains("answer"), "{e}");
        std::fs::write(&p, "{\"question\": \"a?\", \"answer\": \"b\"}\n{not json\n").unwrap();
        let e = read_questions(&p, None).unwrap_err().to_string();
        assert!(e.contains("q.jsonl:2") && e.contains("malformed JSON"), "{e}");
    }

    #[test]
    fn answer_and_answers_merge_without_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.jsonl");
        std::fs::write(&p, "{\"id\": 7, \"question\": \"a?\", \"answer\": \"b\", \"answers\": [\"b\", \"c\"], \"split\": \"dev\"}\n").unwrap();
        let q = read_questions(&p, Some("dev")).unwrap();
        assert_eq!(q[0].answers, vec!["b", "c"]);
        assert_eq!(q[0].id, "7");
        assert!(read_questions(&p, Some("train")).unwrap().is_empty());
    }

    #[test]
    fn bundled_questions_load() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/wiki/questions.jsonl");
        let dev = read_questions(&p, Some("dev")).unwrap();
        assert_eq!(dev.len(), 952);
        assert!(dev.iter().all(|q| q.page.is_some() && !q.answers.is_empty()));
    }
}
