//! The one error type of the crate.

use std::path::PathBuf;

/// Everything that can go wrong while reading pages, building, opening or querying an index.
///
/// Messages are written for two readers: a person at the command line (they name the file, the line, and
/// what to do) and the policy model, which sees `UnknownPage` / `UnknownSection` as a tool error.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// A pages file could not be read at all.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The pages or questions file.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line of a JSON Lines pages or questions file (or a Parquet row) is not a valid record.
    #[error("{path}:{line}: {message}")]
    BadRecord {
        /// The pages or questions file.
        path: PathBuf,
        /// 1-based line (or Parquet row); 0 when the whole file is unreadable.
        line: usize,
        /// What is wrong with the record.
        message: String,
    },
    /// A pages or questions file has an extension we do not read.
    #[error("{path}: unknown {what} format (expected .jsonl, .json, .ndjson or .parquet)")]
    UnknownFormat {
        /// The pages or questions file.
        path: PathBuf,
        /// What the file should hold: `pages` or `questions`.
        what: &'static str,
    },
    /// A pages or questions file holds no record at all.
    #[error("{path}: no {what} in it: {expected}")]
    NoRecords {
        /// The pages or questions file.
        path: PathBuf,
        /// What it should hold: `pages` or `questions`.
        what: &'static str,
        /// What a record looks like.
        expected: &'static str,
    },
    /// Two pages share an id.
    #[error("{path}:{line}: duplicate page id {id:?} (first seen on line {first_line})")]
    DuplicatePage {
        /// The pages file.
        path: PathBuf,
        /// 1-based line (or Parquet row) of the second occurrence.
        line: usize,
        /// 1-based line (or Parquet row) where the id first appeared.
        first_line: usize,
        /// The repeated page id.
        id: String,
    },
    /// The index directory is missing, partial or corrupt; the fix is always to rebuild it.
    #[error("the search index at {dir} is unusable: {reason}; re-run `agentrt index` to rebuild it")]
    BadIndex {
        /// The index directory.
        dir: PathBuf,
        /// What is missing or does not check out.
        reason: String,
    },
    /// A search was asked for a query with no words: there is nothing to rank, and any hits would be
    /// arbitrary.
    #[error("the query is empty: give the words to search for")]
    EmptyQuery,
    /// `view_sections` was asked for a page the corpus does not have.
    #[error("unknown page id {0:?}: use an id returned by search_pages")]
    UnknownPage(String),
    /// `read_section` was asked for a section the corpus does not have.
    #[error("unknown section id {0:?}: use an id returned by view_sections")]
    UnknownSection(String),
    /// The embedding model could not be fetched, loaded or run.
    #[error("embedding model: {0}")]
    Embedder(String),
    /// tantivy failed while building or querying.
    #[error("full-text index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    /// Retrieval evaluation was given a question with no gold page to look for.
    #[error("question {id}: no gold `page`, which retrieval evaluation measures the rank of")]
    NoGoldPage {
        /// The question's id (`line-N` when the file gives none).
        id: String,
    },
    /// Writing the index failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The index file or directory being written.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl SearchError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SearchError::Io { path: path.into(), source }
    }
    pub(crate) fn write(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SearchError::Write { path: path.into(), source }
    }
    pub(crate) fn bad_index(dir: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        SearchError::BadIndex { dir: dir.into(), reason: reason.into() }
    }
}

impl From<candle_core::Error> for SearchError {
    fn from(e: candle_core::Error) -> Self {
        SearchError::Embedder(e.to_string())
    }
}
