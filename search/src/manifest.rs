//! The manifest: what an index was built from, and checksums of what it holds.
//!
//! `build_index` compares the inputs part ([`Inputs`]) with the one on disk to decide between "up to
//! date" and a rebuild (and says what changed); `WikiIndex::open` checks the format version and every
//! recorded file's length and sha256, so a partial or corrupt index is caught when opened.

use crate::embedder::ModelId;
use crate::error::SearchError;
use crate::sections::ChunkParams;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// Bumped whenever the on-disk layout or the meaning of a field changes. 2: the section vectors come
/// from the encoder with weights quantised to ±64 ([`agentrt_kernels::int8::NARROW_MAX`]), not ±127. 3: BM25
/// indexes section bodies only (no page-title or section-title fields). 4: the section encoder's
/// weights are quantised to ±32 ([`crate::embedder::SECTION_WEIGHTS`]) and sections embedded at 64
/// word pieces ([`crate::embedder::SECTION_TOKENS`]).
pub const FORMAT_VERSION: u32 = 4;
/// The manifest's file name inside a generation directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// What the index is a function of: any change forces a rebuild.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    /// On-disk format version ([`FORMAT_VERSION`] at build time).
    pub format_version: u32,
    /// sha256 of the pages file's bytes.
    pub corpus_sha256: String,
    /// The embedding model.
    pub model: ModelId,
    /// How sections were cut.
    pub chunking: ChunkParams,
}

impl Inputs {
    /// Human reasons why `self` (wanted now) differs from `old` (on disk); empty when equal.
    pub fn changes_from(&self, old: &Inputs) -> Vec<String> {
        let mut why = Vec::new();
        if self.format_version != old.format_version {
            why.push(format!("index format changed (v{} -> v{})", old.format_version, self.format_version));
        }
        if self.corpus_sha256 != old.corpus_sha256 {
            why.push(format!("corpus changed (sha256 {} -> {})", short(&old.corpus_sha256), short(&self.corpus_sha256)));
        }
        if !self.model.same_space(&old.model) {
            why.push(format!(
                "embedding model changed ({} {} -> {} {})",
                old.model.name,
                short(&old.model.wheel_sha256),
                self.model.name,
                short(&self.model.wheel_sha256)
            ));
        }
        if self.model.max_tokens != old.model.max_tokens {
            why.push(format!("embedding truncation changed ({} -> {} word pieces)", old.model.max_tokens, self.model.max_tokens));
        }
        if self.chunking != old.chunking {
            why.push(format!("chunking changed ({:?} -> {:?})", old.chunking, self.chunking));
        }
        why
    }
}

fn short(h: &str) -> &str {
    &h[..h.len().min(12)]
}

/// Length and sha256 of one file of the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSum {
    /// Size in bytes.
    pub len: u64,
    /// sha256 of the bytes, lowercase hex.
    pub sha256: String,
}

impl FileSum {
    /// The checksum of bytes in memory.
    pub fn of(bytes: &[u8]) -> Self {
        FileSum { len: bytes.len() as u64, sha256: hex::encode(Sha256::digest(bytes)) }
    }
}

/// The whole manifest, written last into a generation directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// What the index was built from.
    pub inputs: Inputs,
    /// The pages file the index was built from (for messages only; its hash is what counts).
    pub corpus_path: String,
    /// Number of pages.
    pub pages: usize,
    /// Number of sections (= rows of the vectors file = documents in tantivy).
    pub sections: usize,
    /// Checksums of our own files (tantivy checks its own).
    pub files: BTreeMap<String, FileSum>,
    /// Seconds the build took.
    pub build_seconds: f64,
}

impl Manifest {
    /// Read and parse `dir/manifest.json`; any failure is a `BadIndex` that says to re-run `agentrt index`.
    pub fn read(dir: &Path) -> Result<Manifest, SearchError> {
        let path = dir.join(MANIFEST_FILE);
        let bytes = std::fs::read(&path).map_err(|e| SearchError::bad_index(dir, format!("cannot read {}: {e}", path.display())))?;
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| SearchError::bad_index(dir, format!("{} is garbled: {e}", path.display())))?;
        if m.inputs.format_version != FORMAT_VERSION {
            return Err(SearchError::bad_index(dir, format!("it has format v{}, this agentrt reads v{FORMAT_VERSION}", m.inputs.format_version)));
        }
        Ok(m)
    }

    /// Check one file's bytes against the recorded length and sha256.
    pub fn check_file(&self, dir: &Path, name: &str, bytes: &[u8]) -> Result<(), SearchError> {
        let want = self.files.get(name).ok_or_else(|| SearchError::bad_index(dir, format!("manifest has no checksum for {name}")))?;
        if bytes.len() as u64 != want.len {
            return Err(SearchError::bad_index(dir, format!("{name} has {} bytes, the manifest says {} (partial or truncated)", bytes.len(), want.len)));
        }
        let got = FileSum::of(bytes);
        if got.sha256 != want.sha256 {
            return Err(SearchError::bad_index(dir, format!("{name} fails its sha256 check (corrupt)")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs { format_version: FORMAT_VERSION, corpus_sha256: "a".repeat(64), model: ModelId::minilm(), chunking: ChunkParams::default() }
    }

    #[test]
    fn equal_inputs_have_no_changes() {
        assert!(inputs().changes_from(&inputs()).is_empty());
    }

    #[test]
    fn changes_are_named() {
        let mut new = inputs();
        new.corpus_sha256 = "b".repeat(64);
        new.model.wheel_sha256 = "c".repeat(64);
        let why = new.changes_from(&inputs());
        assert_eq!(why.len(), 2);
        assert!(why[0].starts_with("corpus changed"), "{why:?}");
        assert!(why[1].starts_with("embedding model changed"), "{why:?}");
    }

    #[test]
    fn check_file_catches_truncation_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Manifest { inputs: inputs(), corpus_path: "x".into(), pages: 0, sections: 0, files: BTreeMap::new(), build_seconds: 0.0 };
        m.files.insert("v".into(), FileSum::of(b"hello"));
        assert!(m.check_file(dir.path(), "v", b"hello").is_ok());
        let e = m.check_file(dir.path(), "v", b"hell").unwrap_err().to_string();
        assert!(e.contains("truncated") && e.contains("re-run `agentrt index`"), "{e}");
        let e = m.check_file(dir.path(), "v", b"jello").unwrap_err().to_string();
        assert!(e.contains("sha256"), "{e}");
    }

    #[test]
    fn garbled_manifest_is_bad_index() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST_FILE), b"{not json").unwrap();
        let e = Manifest::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("garbled") && e.contains("agentrt index"), "{e}");
    }
}
