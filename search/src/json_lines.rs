//! How this crate reads a JSON Lines file (pages and questions alike): one JSON object per line, blank
//! lines skipped, every line UTF-8, and a file that is one JSON array (a common export) refused with the
//! way to convert it, rather than a parser's complaint about its first character.

use crate::error::SearchError;
use std::path::Path;

/// The non-blank lines of `bytes` (the file `path`), each with its 1-based line number, trimmed. A line
/// that is not UTF-8, or a first line that opens a JSON array, is an error naming the file and line.
pub fn lines<'a>(path: &Path, bytes: &'a [u8]) -> Result<Vec<(usize, &'a str)>, SearchError> {
    let mut out = Vec::new();
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = i + 1;
        let text = std::str::from_utf8(raw).map_err(|e| SearchError::BadRecord { path: path.to_path_buf(), line, message: format!("not UTF-8: {e}") })?;
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        if out.is_empty() && text.starts_with('[') {
            return Err(SearchError::BadRecord {
                path: path.to_path_buf(),
                line,
                message: format!(
                    "a JSON array, but the file must be JSON Lines: one JSON object per line (`{{\"id\": ...}}` then the next on the next line); \
                     convert it with `jq -c '.[]' {} > FILE.jsonl`",
                    path.display()
                ),
            });
        }
        out.push((line, text));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_blank_ones_skipped_and_an_array_refused_with_the_fix() {
        let p = Path::new("q.jsonl");
        assert_eq!(lines(p, b"{\"a\": 1}\n\n  {\"b\": 2}  \n").unwrap(), vec![(1, "{\"a\": 1}"), (3, "{\"b\": 2}")]);
        for array in [&b"[{\"a\": 1}, {\"b\": 2}]"[..], b"\n[\n  {\"a\": 1}\n]\n"] {
            let e = lines(p, array).unwrap_err().to_string();
            assert!(e.starts_with("q.jsonl:") && e.contains("one JSON object per line") && e.contains("jq -c"), "{e}");
        }
        let e = lines(p, b"{}\n\xff\n").unwrap_err().to_string();
        assert!(e.starts_with("q.jsonl:2: not UTF-8"), "{e}");
    }
}
