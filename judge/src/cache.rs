//! The verdict cache: one small JSON file per judged item, so a re-run costs nothing.

use crate::{JudgeError, Verdict};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

/// Everything that determines an LLM verdict; its sha256 names the cache file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKey {
    /// The judge model's name as sent to the server.
    pub model: String,
    /// [`crate::PROMPT_VERSION`] when the verdict was made.
    pub prompt_version: String,
    /// The question.
    pub question: String,
    /// The gold answers, in the order given.
    pub answers: Vec<String>,
    /// The graded text (the `<answer>` content when the response has one).
    pub response: String,
}

impl CacheKey {
    /// The key's hash, lowercase hex: the cache file's stem.
    pub fn digest(&self) -> String {
        // JSON of a fixed-order struct is an unambiguous encoding of the fields.
        // (An empty encoding on failure would make every key share one file: fail instead.)
        let encoded = serde_json::to_vec(self).expect("a struct of strings serialises to JSON");
        hex::encode(Sha256::digest(&encoded))
    }
}

#[derive(Serialize, Deserialize)]
struct Entry {
    key: CacheKey,
    verdict: Verdict,
}

/// A directory of cached verdicts, safe to share between processes (writes are atomic renames).
#[derive(Debug, Clone)]
pub struct VerdictCache {
    dir: PathBuf,
}

/// `$AGENTRT_CACHE/judge` (default `~/.cache/agentrt/judge`).
pub fn default_cache_dir() -> PathBuf {
    agentrt_assets::cache_root().join("judge")
}

impl VerdictCache {
    /// Opens (creating it if needed) a cache in `dir`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, JudgeError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|source| JudgeError::Cache { path: dir.clone(), source })?;
        Ok(VerdictCache { dir })
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds (or would hold) `key`'s verdict.
    pub fn path_for(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.json", key.digest()))
    }

    /// The cached verdict for `key`, if any. A missing, unreadable or foreign file is a miss.
    pub fn get(&self, key: &CacheKey) -> Option<Verdict> {
        let bytes = fs::read(self.path_for(key)).ok()?;
        let entry: Entry = serde_json::from_slice(&bytes).ok()?;
        (entry.key == *key).then_some(entry.verdict)
    }

    /// Stores `verdict` under `key`, atomically.
    pub fn put(&self, key: &CacheKey, verdict: &Verdict) -> Result<(), JudgeError> {
        let path = self.path_for(key);
        let entry = Entry { key: key.clone(), verdict: verdict.clone() };
        let body = serde_json::to_vec_pretty(&entry).map_err(|e| JudgeError::Cache { path: path.clone(), source: std::io::Error::other(e) })?;
        agentrt_assets::write_atomic(&path, &body).map_err(|source| JudgeError::Cache { path, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VerdictLabel;

    fn key(response: &str) -> CacheKey {
        CacheKey { model: "m".into(), prompt_version: "v1".into(), question: "q".into(), answers: vec!["a".into(), "b".into()], response: response.into() }
    }

    #[test]
    fn round_trip_and_distinct_keys() {
        let dir = tempfile::tempdir().unwrap();
        let cache = VerdictCache::open(dir.path().join("judge")).unwrap();
        let v = Verdict { reward: 1.0, label: VerdictLabel::Correct, raw: "Yes.".into() };
        assert_eq!(cache.get(&key("r")), None);
        cache.put(&key("r"), &v).unwrap();
        assert_eq!(cache.get(&key("r")), Some(v));
        assert_eq!(cache.get(&key("r2")), None);
        // Moving a field boundary changes the key.
        let mut a = key("r");
        a.answers = vec!["a,b".into()];
        assert_ne!(a.digest(), key("r").digest());
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(cache.dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn corrupt_file_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = VerdictCache::open(dir.path()).unwrap();
        fs::write(cache.path_for(&key("r")), b"{not json").unwrap();
        assert_eq!(cache.get(&key("r")), None);
    }
}
