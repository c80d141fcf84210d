//! Who reads questions files: the one reader of the wiki questions (`data/wiki/questions.jsonl`) and of
//! any other questions file, for retrieval evaluation here and for episodes (`agentrt_rollout` re-exports
//! it with its own error type). JSON Lines or Parquet; each row has `question`, `answer` and/or
//! `answers`, and optionally `id`, `page` (the gold page id) and `split`. The bundled file has all of
//! them.
//!
//! A bad row is an error naming the file, the line (the row, for Parquet) and the field that is missing or
//! of the wrong type; nothing is skipped quietly, and a row with no `split` is an error when a split is
//! asked for (it is in none).

use crate::error::SearchError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// The bundled wiki questions, relative to the repository root: every command's default (and
/// `trainer/default.toml`'s `env.wiki.questions`, which a test holds to it).
pub const DEFAULT_QUESTIONS_FILE: &str = "data/wiki/questions.jsonl";

/// One question with its accepted answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// The file's `id` (a numeric id as its JSON text), or `line-N` when it has none; scripted policies and trajectories key on it.
    pub id: String,
    /// The question text the agent must answer (and retrieval's query).
    pub question: String,
    /// Every accepted answer (the judge takes them as aliases); never empty.
    pub answers: Vec<String>,
    /// The gold page id, when known (retrieval evaluation measures where it ranks, and needs it).
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

/// Reads questions (`.jsonl`/`.json`/`.ndjson` or `.parquet`), keeping those of `split` when given. A bad
/// row is an error that names the file, the line (the row, for Parquet) and the field; so is a row with no
/// `split` when `split` is given.
pub fn read_questions(path: &Path, split: Option<&str>) -> Result<Vec<Question>, SearchError> {
    // The bundled questions are found from any folder (see `agentrt_assets::data_file`).
    let found = agentrt_assets::data_file(path, "--questions FILE (or the config's env.wiki.questions)")
        .map_err(|source| SearchError::Io { path: path.to_path_buf(), source })?;
    let path = found.as_path();
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let all = match ext.as_str() {
        "jsonl" | "json" | "ndjson" => read_jsonl(path)?,
        "parquet" => read_parquet(path)?,
        _ => return Err(SearchError::UnknownFormat { path: path.to_path_buf(), what: "questions" }),
    };
    check_rows(path, &all)?;
    let Some(split) = split else { return Ok(all.into_iter().map(|r| r.question).collect()) };
    let mut kept = Vec::new();
    for ReadRow { line, question: q, .. } in all {
        match q.split.as_deref() {
            Some(s) if s == split => kept.push(q),
            Some(_) => {}
            None => {
                return Err(SearchError::BadRecord {
                    path: path.to_path_buf(),
                    line,
                    message: format!("no `split`, so the question is in no split (split {split:?} was asked for; ask for `all` to read every row)"),
                })
            }
        }
    }
    Ok(kept)
}

/// A question as read, with its 1-based line (the row, for Parquet) and whether the file named its `id`.
struct ReadRow {
    line: usize,
    question: Question,
    named: bool,
}

/// What holds for a whole file: it has a question, and no two rows share an id (scripted policies,
/// trajectories and paired comparisons key on them). Rows without an `id` are named by their line, with
/// a warning: such names change when the file is edited.
fn check_rows(path: &Path, rows: &[ReadRow]) -> Result<(), SearchError> {
    if rows.is_empty() {
        return Err(SearchError::NoRecords {
            path: path.to_path_buf(),
            what: "questions",
            expected: "one question a line, {\"id\": ..., \"question\": ..., \"answer\": ... or \"answers\": [...], \"page\": ..., \"split\": ...} (docs/your-data.md)",
        });
    }
    let mut first_line = std::collections::HashMap::new();
    for r in rows {
        if let Some(first) = first_line.insert(r.question.id.as_str(), r.line) {
            return Err(SearchError::BadRecord {
                path: path.to_path_buf(),
                line: r.line,
                message: format!("duplicate question id {:?} (first seen on line {first}): ids must be unique", r.question.id),
            });
        }
    }
    let unnamed: Vec<&ReadRow> = rows.iter().filter(|r| !r.named).collect();
    if let Some(first) = unnamed.first() {
        tracing::warn!(
            "{}: {} of {} questions have no `id` and are named by their line (`{}`, ...): give each an `id` so that transcripts, trajectories and comparisons keep naming the same question when the file changes",
            path.display(),
            unnamed.len(),
            rows.len(),
            first.question.id
        );
    }
    Ok(())
}

/// A row's fields, before the checks every format shares.
struct Row {
    id: Option<String>,
    question: Option<String>,
    answer: Option<String>,
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
            return Err("no `answer` or `answers` (a non-empty answer is needed)".into());
        }
        let id = self.id.unwrap_or_else(|| format!("line-{line}"));
        Ok(Question { id, question, answers, page: self.page, split: self.split })
    }

    /// The fields of one JSON object, each checked for its type (`null` is absent, except for `answers`).
    fn of_json(value: Value) -> Result<Row, String> {
        let Value::Object(mut fields) = value else { return Err(format!("not a JSON object but {}", kind(&value))) };
        let mut text = |name: &str| match fields.remove(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(format!("field `{name}` must be a string, not {}", kind(&other))),
        };
        let question = text("question")?;
        let answer = text("answer")?;
        let page = text("page")?;
        let split = text("split")?;
        let id = match fields.remove("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(other) => return Err(format!("field `id` must be a string or a number, not {}", kind(&other))),
        };
        let answers = match fields.remove("answers") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, a)| match a {
                    Value::String(s) => Ok(s),
                    other => Err(format!("`answers[{i}]` must be a string, not {}", kind(&other))),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(format!("field `answers` must be a list of strings, not {}", kind(&other))),
        };
        Ok(Row { id, question, answer, answers, page, split })
    }
}

/// How a JSON value is named in an error.
fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// Every question of a JSON Lines file, with its 1-based line; blank lines are skipped.
fn read_jsonl(path: &Path) -> Result<Vec<ReadRow>, SearchError> {
    let bytes = std::fs::read(path).map_err(|e| SearchError::io(path, e))?;
    let mut out = Vec::new();
    for (line, text) in crate::json_lines::lines(path, &bytes)? {
        let bad = |message: String| SearchError::BadRecord { path: path.to_path_buf(), line, message };
        let value: Value = serde_json::from_str(text).map_err(|e| bad(format!("malformed JSON: {e}")))?;
        let row = Row::of_json(value).map_err(bad)?;
        let named = row.id.is_some();
        out.push(ReadRow { line, question: row.into_question(line).map_err(bad)?, named });
    }
    Ok(out)
}

/// Every question of a Parquet file, with its 1-based row. String columns may be Utf8, LargeUtf8 or
/// Utf8View; `id` may also be an integer column; `answers` is a list of strings.
#[cfg(feature = "parquet")]
fn read_parquet(path: &Path) -> Result<Vec<ReadRow>, SearchError> {
    use arrow_array::{
        Array, Int32Array, Int64Array, LargeListArray, LargeStringArray, ListArray, RecordBatch, StringArray, StringViewArray, UInt32Array, UInt64Array,
    };
    use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

    let bad = |line: usize, message: String| SearchError::BadRecord { path: path.to_path_buf(), line, message };
    let bytes = bytes::Bytes::from(std::fs::read(path).map_err(|e| SearchError::io(path, e))?);
    let reader: ParquetRecordBatchReader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| bad(0, format!("not a Parquet file: {e}")))?
        .build()
        .map_err(|e| bad(0, format!("cannot read Parquet: {e}")))?;

    /// Row `r` of the column `name` as text: `Ok(None)` when the column is absent or the value null, an
    /// error naming the column when its type is not a string (or, where `integers`, an integer).
    fn text(batch: &RecordBatch, name: &str, r: usize, integers: bool) -> Result<Option<String>, String> {
        let Some(col) = batch.column_by_name(name) else { return Ok(None) };
        if col.is_null(r) {
            return Ok(None);
        }
        let any = col.as_any();
        let value = if let Some(a) = any.downcast_ref::<StringArray>() {
            a.value(r).to_string()
        } else if let Some(a) = any.downcast_ref::<LargeStringArray>() {
            a.value(r).to_string()
        } else if let Some(a) = any.downcast_ref::<StringViewArray>() {
            a.value(r).to_string()
        } else if let (true, Some(a)) = (integers, any.downcast_ref::<Int64Array>()) {
            a.value(r).to_string()
        } else if let (true, Some(a)) = (integers, any.downcast_ref::<Int32Array>()) {
            a.value(r).to_string()
        } else if let (true, Some(a)) = (integers, any.downcast_ref::<UInt64Array>()) {
            a.value(r).to_string()
        } else if let (true, Some(a)) = (integers, any.downcast_ref::<UInt32Array>()) {
            a.value(r).to_string()
        } else {
            return Err(format!("column `{name}` must hold strings{}, not {}", if integers { " or integers" } else { "" }, col.data_type()));
        };
        Ok(Some(value))
    }

    /// Row `r` of the `answers` column: a list of strings (null items skipped), empty when absent or null.
    fn answers(batch: &RecordBatch, r: usize) -> Result<Vec<String>, String> {
        let Some(col) = batch.column_by_name("answers") else { return Ok(Vec::new()) };
        if col.is_null(r) {
            return Ok(Vec::new());
        }
        let not_strings = || format!("column `answers` must be a list of strings, not {}", col.data_type());
        let items = if let Some(list) = col.as_any().downcast_ref::<ListArray>() {
            list.value(r)
        } else if let Some(list) = col.as_any().downcast_ref::<LargeListArray>() {
            list.value(r)
        } else {
            return Err(not_strings());
        };
        let any = items.as_any();
        let strings: Vec<Option<&str>> = if let Some(a) = any.downcast_ref::<StringArray>() {
            a.iter().collect()
        } else if let Some(a) = any.downcast_ref::<LargeStringArray>() {
            a.iter().collect()
        } else if let Some(a) = any.downcast_ref::<StringViewArray>() {
            a.iter().collect()
        } else {
            return Err(not_strings());
        };
        Ok(strings.into_iter().flatten().map(str::to_string).collect())
    }

    let mut out = Vec::new();
    let mut row = 0;
    for batch in reader {
        let batch = batch.map_err(|e| bad(row + 1, format!("cannot decode Parquet batch: {e}")))?;
        if batch.column_by_name("question").is_none() {
            return Err(bad(row + 1, "no `question` column".into()));
        }
        for r in 0..batch.num_rows() {
            row += 1;
            let read = || -> Result<ReadRow, String> {
                let read = Row {
                    id: text(&batch, "id", r, true)?,
                    question: text(&batch, "question", r, false)?,
                    answer: text(&batch, "answer", r, false)?,
                    answers: answers(&batch, r)?,
                    page: text(&batch, "page", r, false)?,
                    split: text(&batch, "split", r, false)?,
                };
                let named = read.id.is_some();
                Ok(ReadRow { line: row, question: read.into_question(row)?, named })
            };
            out.push(read().map_err(|m| bad(row, m))?);
        }
    }
    Ok(out)
}

#[cfg(not(feature = "parquet"))]
fn read_parquet(path: &Path) -> Result<Vec<ReadRow>, SearchError> {
    Err(SearchError::BadRecord { path: path.to_path_buf(), line: 0, message: "this build has no Parquet support (cargo feature `parquet`)".into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.jsonl");
        std::fs::write(&p, text).unwrap();
        (dir, p)
    }

    fn error(text: &str, split: Option<&str>) -> String {
        let (_dir, p) = file(text);
        read_questions(&p, split).unwrap_err().to_string()
    }

    #[test]
    fn answers_are_found_as_whole_words_case_folded() {
        assert_eq!(find_word_ci("repair the air", "Air"), Some(11));
        assert_eq!(find_word_ci("repair", "air"), None);
        let q = Question { id: "q".into(), question: "?".into(), answers: vec!["air".into(), "Denver Broncos".into()], page: None, split: None };
        assert!(q.answered_in("The DENVER BRONCOS won"));
        assert!(!q.answered_in("a repair shop"));
    }

    #[test]
    fn bad_rows_name_file_line_and_field() {
        let ok = "{\"question\": \"a?\", \"answer\": \"b\"}\n";
        let cases = [
            ("{\"question\": \"c?\"}", "no `answer` or `answers`"),
            ("{\"answer\": \"c\"}", "missing or empty field `question`"),
            ("{\"question\": \" \", \"answer\": \"c\"}", "missing or empty field `question`"),
            ("{not json", "malformed JSON"),
            ("[1, 2]", "not a JSON object but a list"),
            ("{\"question\": \"c?\", \"answer\": \"c\", \"page\": 3}", "field `page` must be a string, not the number 3"),
            ("{\"question\": \"c?\", \"answer\": 4}", "field `answer` must be a string"),
            ("{\"question\": \"c?\", \"answers\": \"c\"}", "field `answers` must be a list of strings, not the string \"c\""),
            ("{\"question\": \"c?\", \"answers\": [\"c\", 5]}", "`answers[1]` must be a string, not the number 5"),
            ("{\"question\": \"c?\", \"answer\": \"c\", \"id\": true}", "field `id` must be a string or a number, not the boolean true"),
            ("{\"question\": \"c?\", \"answer\": \"c\", \"split\": [\"dev\"]}", "field `split` must be a string, not a list"),
        ];
        for (row, want) in cases {
            let e = error(&format!("{ok}\n{row}\n"), None);
            assert!(e.contains("q.jsonl:3:") && e.contains(want), "{row}: {e}");
        }
        let (_dir, p) = file("");
        std::fs::write(&p, [ok.as_bytes(), b"\xff\xfe\n"].concat()).unwrap();
        let e = read_questions(&p, None).unwrap_err().to_string();
        assert!(e.contains("q.jsonl:2:") && e.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn a_row_without_a_split_is_an_error_only_when_a_split_is_asked_for() {
        let text = "{\"question\": \"a?\", \"answer\": \"b\", \"split\": \"dev\"}\n{\"question\": \"c?\", \"answer\": \"d\"}\n";
        let e = error(text, Some("dev"));
        assert!(e.contains("q.jsonl:2:") && e.contains("no `split`"), "{e}");
        let (_dir, p) = file(text);
        assert_eq!(read_questions(&p, None).unwrap().len(), 2);
    }

    #[test]
    fn answer_and_answers_merge_without_duplicates_and_ids_default_to_the_line() {
        let (_dir, p) = file(
            "{\"id\": 7, \"question\": \"a?\", \"answer\": \"b\", \"answers\": [\"b\", \"c\"], \"split\": \"dev\", \"extra\": 1}\n\n{\"question\": \"d?\", \"answers\": [\"e\"], \"page\": null, \"split\": \"train\"}\n",
        );
        let q = read_questions(&p, Some("dev")).unwrap();
        assert_eq!(q, vec![Question { id: "7".into(), question: "a?".into(), answers: vec!["b".into(), "c".into()], page: None, split: Some("dev".into()) }]);
        let all = read_questions(&p, None).unwrap();
        assert_eq!((all[1].id.as_str(), all[1].page.as_deref()), ("line-3", None));
        assert!(read_questions(&p, Some("test")).unwrap().is_empty());
    }

    #[test]
    fn an_unknown_extension_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.csv");
        std::fs::write(&p, "question,answer\n").unwrap();
        let e = read_questions(&p, None).unwrap_err().to_string();
        assert!(e.contains("q.csv") && e.contains("unknown questions format"), "{e}");
    }

    #[cfg(feature = "parquet")]
    #[test]
    fn parquet_questions_are_read_and_bad_rows_named() {
        use arrow_array::builder::{ListBuilder, StringBuilder};
        use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.parquet");
        let write = |columns: Vec<(&str, ArrayRef)>| {
            let batch = RecordBatch::try_from_iter(columns).unwrap();
            let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), None).unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
        };
        let mut answers = ListBuilder::new(StringBuilder::new());
        answers.append_value([Some("b"), Some("c")]);
        answers.append_value([Some("e")]);
        write(vec![
            ("id", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
            ("question", Arc::new(StringArray::from(vec!["a?", "d?"])) as ArrayRef),
            ("answers", Arc::new(answers.finish()) as ArrayRef),
            ("split", Arc::new(StringArray::from(vec!["dev", "train"])) as ArrayRef),
        ]);
        let q = read_questions(&path, Some("dev")).unwrap();
        assert_eq!(q, vec![Question { id: "1".into(), question: "a?".into(), answers: vec!["b".into(), "c".into()], page: None, split: Some("dev".into()) }]);

        write(vec![
            ("question", Arc::new(StringArray::from(vec!["a?", "d?"])) as ArrayRef),
            ("answer", Arc::new(StringArray::from(vec![Some("b"), None])) as ArrayRef),
        ]);
        let e = read_questions(&path, None).unwrap_err().to_string();
        assert!(e.contains("q.parquet:2:") && e.contains("no `answer`"), "{e}");

        write(vec![
            ("question", Arc::new(StringArray::from(vec!["a?"])) as ArrayRef),
            ("answer", Arc::new(StringArray::from(vec!["b"])) as ArrayRef),
            ("page", Arc::new(Int64Array::from(vec![3])) as ArrayRef),
        ]);
        let e = read_questions(&path, None).unwrap_err().to_string();
        assert!(e.contains("q.parquet:1:") && e.contains("column `page` must hold strings"), "{e}");
    }

    #[test]
    fn bundled_questions_load() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/wiki/questions.jsonl");
        let dev = read_questions(&p, Some("dev")).unwrap();
        assert_eq!(dev.len(), 952);
        assert!(dev.iter().all(|q| q.page.is_some() && !q.answers.is_empty() && q.split.as_deref() == Some("dev")));
        assert_eq!(read_questions(&p, None).unwrap().len(), 8313);
    }
}
