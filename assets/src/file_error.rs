//! The one error for a file that could not be read or written, or was read and is not what it should be:
//! every crate that reads a run's files names the file the same way.

use std::path::{Path, PathBuf};

/// A file the program needed and could not use; the message starts with its path.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Reading or writing it failed (the io error is the source).
    #[error("{path}")]
    Io {
        /// The file or directory being read or written.
        path: PathBuf,
        /// What the operating system reported.
        #[source]
        source: std::io::Error,
    },
    /// It was read but is not what it should be (a corrupt state, a bad line).
    #[error("{path}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line number when there is one.
        reason: String,
    },
}

impl FileError {
    /// Maps an io error on `path` to one naming it: `.map_err(FileError::io(path))`.
    pub fn io(path: &Path) -> impl Fn(std::io::Error) -> FileError + '_ {
        move |source| FileError::Io { path: path.to_path_buf(), source }
    }

    /// `path` holds something it should not: `reason` says what (and on which line).
    pub fn malformed(path: impl Into<PathBuf>, reason: impl Into<String>) -> FileError {
        FileError::Malformed { path: path.into(), reason: reason.into() }
    }
}
