//! Who reads: pages files (JSON Lines or Parquet) into [`Page`]s, with errors that name file and line.

use crate::error::SearchError;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One page of the corpus, as the pages file gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Stable id, e.g. `1973_oil_crisis`; the id `search_pages` returns and `view_sections` takes.
    pub id: String,
    /// Human title, e.g. `1973 oil crisis`.
    pub title: String,
    /// Markdown body; usually starts with `# Title`.
    pub content: String,
}

/// The pages of a file plus the sha256 of its bytes (what the manifest records).
#[derive(Debug, Clone)]
pub struct Corpus {
    /// Where the pages came from.
    pub path: PathBuf,
    /// The pages in file order.
    pub pages: Vec<Page>,
    /// sha256 of the file's bytes, lowercase hex.
    pub sha256: String,
}

/// sha256 of a file, lowercase hex, read in one pass.
pub fn file_sha256(path: &Path) -> Result<String, SearchError> {
    let bytes = std::fs::read(path).map_err(|e| SearchError::io(path, e))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// Read a pages file, choosing the format by extension: `.jsonl`/`.json`/`.ndjson` or `.parquet`.
pub fn read_pages(path: &Path) -> Result<Corpus, SearchError> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let bytes = std::fs::read(path).map_err(|e| SearchError::io(path, e))?;
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let pages = match ext.as_str() {
        "jsonl" | "json" | "ndjson" => parse_jsonl(path, &bytes)?,
        "parquet" => parse_parquet(path, bytes)?,
        _ => return Err(SearchError::UnknownFormat { path: path.to_path_buf(), what: "pages" }),
    };
    if pages.is_empty() {
        return Err(SearchError::NoRecords {
            path: path.to_path_buf(),
            what: "pages",
            expected: "one page a line, {\"id\": ..., \"title\": ..., \"content\": ...} (docs/your-data.md)",
        });
    }
    Ok(Corpus { path: path.to_path_buf(), pages, sha256 })
}

#[derive(Deserialize)]
struct RawPage {
    id: Option<String>,
    title: Option<String>,
    content: Option<String>,
}

/// Parse JSON Lines bytes; `path` is only used in error messages. Blank lines are skipped.
pub fn parse_jsonl(path: &Path, bytes: &[u8]) -> Result<Vec<Page>, SearchError> {
    let bad = |line: usize, message: String| SearchError::BadRecord { path: path.to_path_buf(), line, message };
    let mut pages = UniquePages::default();
    for (line_no, text) in crate::json_lines::lines(path, bytes)? {
        let raw: RawPage = serde_json::from_str(text).map_err(|e| bad(line_no, format!("malformed JSON: {e}")))?;
        let page = complete(raw).map_err(|field| bad(line_no, format!("missing field {field:?}")))?;
        pages.push(page, path, line_no)?;
    }
    Ok(pages.pages)
}

/// Pages in the order read, each id once.
#[derive(Default)]
struct UniquePages {
    pages: Vec<Page>,
    /// The line (or row) each id was read at.
    first_line: HashMap<String, usize>,
}

impl UniquePages {
    /// Adds `page`, read at `line` of `path`; a page whose id was read before is an error naming both lines.
    fn push(&mut self, page: Page, path: &Path, line: usize) -> Result<(), SearchError> {
        if let Some(&first_line) = self.first_line.get(&page.id) {
            return Err(SearchError::DuplicatePage { path: path.to_path_buf(), line, first_line, id: page.id });
        }
        self.first_line.insert(page.id.clone(), line);
        self.pages.push(page);
        Ok(())
    }
}

fn complete(raw: RawPage) -> Result<Page, &'static str> {
    let id = raw.id.filter(|s| !s.trim().is_empty()).ok_or("id")?;
    let title = raw.title.ok_or("title")?;
    let content = raw.content.ok_or("content")?;
    Ok(Page { id, title, content })
}

#[cfg(feature = "parquet")]
fn parse_parquet(path: &Path, bytes: Vec<u8>) -> Result<Vec<Page>, SearchError> {
    use arrow_array::{Array, LargeStringArray, RecordBatch, StringArray, StringViewArray};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    // Rows are numbered from 1 in messages, like lines.
    let bad = |line: usize, message: String| SearchError::BadRecord { path: path.to_path_buf(), line, message };
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes)).map_err(|e| bad(0, format!("not a Parquet file: {e}")))?;
    let reader = builder.build().map_err(|e| bad(0, format!("cannot read Parquet: {e}")))?;

    fn column<'a>(batch: &'a RecordBatch, name: &str) -> Option<Box<dyn Fn(usize) -> Option<&'a str> + 'a>> {
        let col = batch.column_by_name(name)?;
        if let Some(a) = col.as_any().downcast_ref::<StringArray>() {
            return Some(Box::new(move |i| if a.is_null(i) { None } else { Some(a.value(i)) }));
        }
        if let Some(a) = col.as_any().downcast_ref::<LargeStringArray>() {
            return Some(Box::new(move |i| if a.is_null(i) { None } else { Some(a.value(i)) }));
        }
        if let Some(a) = col.as_any().downcast_ref::<StringViewArray>() {
            return Some(Box::new(move |i| if a.is_null(i) { None } else { Some(a.value(i)) }));
        }
        None
    }

    let mut pages = UniquePages::default();
    let mut row = 0usize;
    for batch in reader {
        let batch = batch.map_err(|e| bad(row + 1, format!("cannot decode Parquet batch: {e}")))?;
        let mut cols = Vec::new();
        for name in ["id", "title", "content"] {
            match column(&batch, name) {
                Some(c) => cols.push(c),
                None => return Err(bad(row + 1, format!("missing string column {name:?}"))),
            }
        }
        for i in 0..batch.num_rows() {
            row += 1;
            let raw = RawPage { id: cols[0](i).map(str::to_owned), title: cols[1](i).map(str::to_owned), content: cols[2](i).map(str::to_owned) };
            let page = complete(raw).map_err(|field| bad(row, format!("row {row}: missing field {field:?}")))?;
            pages.push(page, path, row)?;
        }
    }
    Ok(pages.pages)
}

#[cfg(not(feature = "parquet"))]
fn parse_parquet(path: &Path, _bytes: Vec<u8>) -> Result<Vec<Page>, SearchError> {
    Err(SearchError::BadRecord { path: path.to_path_buf(), line: 0, message: "this build has no Parquet support (cargo feature `parquet`)".into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pages_and_skips_blank_lines() {
        let data = b"{\"id\":\"a\",\"title\":\"A\",\"content\":\"# A\\n\\nx\"}\n\n{\"id\":\"b\",\"title\":\"B\",\"content\":\"y\"}\n";
        let pages = parse_jsonl(Path::new("p.jsonl"), data).unwrap();
        assert_eq!(pages.len(), 2);
        assert_eq!(pages[1].id, "b");
    }

    #[test]
    fn malformed_line_is_named() {
        let data = b"{\"id\":\"a\",\"title\":\"A\",\"content\":\"x\"}\n{\"id\": \"b\", \n";
        let err = parse_jsonl(Path::new("p.jsonl"), data).unwrap_err().to_string();
        assert!(err.starts_with("p.jsonl:2: malformed JSON"), "{err}");
    }

    #[test]
    fn missing_field_is_named() {
        let data = b"{\"id\":\"a\",\"content\":\"x\"}\n";
        let err = parse_jsonl(Path::new("p.jsonl"), data).unwrap_err().to_string();
        assert_eq!(err, "p.jsonl:1: missing field \"title\"");
    }

    #[test]
    fn duplicate_id_is_named() {
        let data = b"{\"id\":\"a\",\"title\":\"A\",\"content\":\"x\"}\n{\"id\":\"a\",\"title\":\"A\",\"content\":\"x\"}\n";
        let err = parse_jsonl(Path::new("p.jsonl"), data).unwrap_err().to_string();
        assert!(err.contains("p.jsonl:2: duplicate page id \"a\" (first seen on line 1)"), "{err}");
    }
}
