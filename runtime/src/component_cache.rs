//! Precompiled components on disk. Compiling the interpreter takes seconds, a Python or JavaScript
//! plug-in 10-20 s; loading the precompiled form takes about a millisecond. An entry is keyed by the
//! component's bytes, wasmtime's version and the engine's compilation settings, so a changed engine
//! never loads a stale artefact.
//!
//! Every rebuilt plug-in is a new key, so the directory is bounded: after each store, the least
//! recently used entries go until the total is under the cap (a load marks its entry used).

use crate::SandboxError;
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};
use wasmtime::component::Component;
use wasmtime::Engine;

/// The default bound of the cache: room for the interpreter and a few dozen plug-ins.
pub const DEFAULT_CACHE_CAP_BYTES: u64 = 1 << 30;

/// Overrides [`DEFAULT_CACHE_CAP_BYTES`], in MiB.
pub const CACHE_CAP_ENV: &str = "AGENTRT_COMPONENT_CACHE_MB";

const ARTEFACT_EXTENSION: &str = "cwasm";
/// Beside each artefact: what it was compiled from (a path, or "the built-in interpreter"), for
/// `agentrt cache`.
const ORIGIN_EXTENSION: &str = "origin";

/// A directory of precompiled components.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
    cap_bytes: u64,
}

/// One precompiled component in the cache.
#[derive(Debug, Clone)]
pub struct CacheEntry {
    /// The precompiled artefact (`<key>.cwasm`).
    pub path: PathBuf,
    /// Its size on disk, in bytes.
    pub bytes: u64,
    /// When it was last stored or loaded.
    pub last_used: SystemTime,
    /// What it was compiled from, when known.
    pub origin: Option<String>,
}

impl ComponentCache {
    /// A cache in `dir`, bounded by [`DEFAULT_CACHE_CAP_BYTES`] (see [`ComponentCache::with_env_cap`]).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), cap_bytes: DEFAULT_CACHE_CAP_BYTES }
    }

    /// The same cache bounded by `$AGENTRT_COMPONENT_CACHE_MB` when it is set; a value that is not a
    /// whole number of MiB is an error.
    pub fn with_env_cap(self) -> Result<Self, SandboxError> {
        match std::env::var(CACHE_CAP_ENV) {
            Err(_) => Ok(self),
            Ok(mb) => match mb.trim().parse::<u64>() {
                Ok(mb) => Ok(self.with_cap(mb << 20)),
                Err(_) => Err(SandboxError::Config(format!("{CACHE_CAP_ENV}={mb:?} is not a whole number of MiB"))),
            },
        }
    }

    /// The same cache with another bound.
    pub fn with_cap(self, cap_bytes: u64) -> Self {
        Self { cap_bytes, ..self }
    }

    /// `$AGENTRT_CACHE/components` (default `~/.cache/agentrt/components`).
    pub fn default_location() -> Self {
        Self::new(agentrt_assets::cache_root().join("components"))
    }

    /// The directory the artefacts live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bound on the artefacts' total size, in bytes; older entries are evicted beyond it.
    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    /// The component compiled from `wasm`, from the cache when it holds it. `origin` names the bytes in
    /// messages (a path, or "the built-in interpreter"). A compile says so on stderr, with its time:
    /// the first use of a large component is otherwise a silent pause of many seconds.
    pub fn load(&self, engine: &Engine, wasm: &[u8], origin: &str) -> Result<Component, SandboxError> {
        check_header(wasm, origin)?;
        let path = self.dir.join(format!("{}.{ARTEFACT_EXTENSION}", cache_key(engine, wasm)));
        if path.is_file() {
            // SAFETY: files in this directory are written only by `store` below, from
            // `Component::serialize` of an engine with the same compatibility hash (it is part of the
            // key); wasmtime re-checks the header and version before using them.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => {
                    mark_used(&path);
                    return Ok(component);
                }
                Err(e) => tracing::warn!("ignoring unreadable precompiled component {}: {e:#}", path.display()),
            }
        }
        tracing::info!("compiling {origin} ({:.1} MB) to native code, once; later loads come from {}", wasm.len() as f64 / 1e6, self.dir.display());
        let started = Instant::now();
        let component = Component::new(engine, wasm).map_err(|e| invalid_component(origin, e))?;
        tracing::info!("compiled {origin} in {:.1} s", started.elapsed().as_secs_f64());
        match store(&path, &component, origin) {
            Ok(()) => {
                if let Err(e) = self.evict_beyond_cap(&path) {
                    tracing::warn!("could not bound the component cache {}: {e}", self.dir.display());
                }
            }
            Err(e) => tracing::warn!("could not cache the precompiled component at {}: {e}", path.display()),
        }
        Ok(component)
    }

    /// Every entry, most recently used first.
    pub fn entries(&self) -> std::io::Result<Vec<CacheEntry>> {
        let read = match std::fs::read_dir(&self.dir) {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut entries = Vec::new();
        for item in read {
            let path = item?.path();
            if path.extension().is_none_or(|x| x != ARTEFACT_EXTENSION) {
                continue;
            }
            let metadata = std::fs::metadata(&path)?;
            let origin = std::fs::read_to_string(path.with_extension(ORIGIN_EXTENSION)).ok().map(|o| o.trim().to_string());
            entries.push(CacheEntry { path, bytes: metadata.len(), last_used: metadata.modified()?, origin });
        }
        entries.sort_by(|a, b| b.last_used.cmp(&a.last_used).then_with(|| a.path.cmp(&b.path)));
        Ok(entries)
    }

    /// Copies the entries compiled from `origin` (e.g. [`INTERPRETER_ORIGIN`]) into the cache at `dir`, with
    /// their origin files: a scratch cache (a fuzzer's, a test's) that starts with the interpreter compiled
    /// saves compiling it again. An entry that cannot be copied is left out (it is compiled on use).
    pub fn copy_entries_of(&self, origin: &str, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for entry in self.entries()?.into_iter().filter(|e| e.origin.as_deref() == Some(origin)) {
            let Some(name) = entry.path.file_name() else { continue };
            let _ = std::fs::copy(&entry.path, dir.join(name));
            let _ = std::fs::copy(entry.path.with_extension(ORIGIN_EXTENSION), dir.join(name).with_extension(ORIGIN_EXTENSION));
        }
        Ok(())
    }

    /// Removes every entry; returns how many and their bytes. They are compiled again on next use.
    pub fn clean(&self) -> std::io::Result<(usize, u64)> {
        let entries = self.entries()?;
        let bytes = entries.iter().map(|e| e.bytes).sum();
        for entry in &entries {
            remove_entry(&entry.path)?;
        }
        Ok((entries.len(), bytes))
    }

    /// Removes the least recently used entries until the total is within the cap; `keep` (the entry
    /// just stored) always stays, even if it alone is over.
    fn evict_beyond_cap(&self, keep: &Path) -> std::io::Result<()> {
        let entries = self.entries()?;
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        for entry in entries.iter().rev() {
            if total <= self.cap_bytes {
                break;
            }
            if entry.path == keep {
                continue;
            }
            remove_entry(&entry.path)?;
            total -= entry.bytes;
        }
        Ok(())
    }
}

/// Refuses, before any compile, bytes that are not a component at all: with what they are instead, not
/// the parser's byte arrays.
fn check_header(wasm: &[u8], origin: &str) -> Result<(), SandboxError> {
    const MAGIC: &[u8] = b"\0asm";
    const COMPONENT: [u8; 4] = [0x0d, 0x00, 0x01, 0x00];
    const MODULE: [u8; 4] = [0x01, 0x00, 0x00, 0x00];
    let reason = if wasm.is_empty() {
        "the file is empty".to_string()
    } else if !wasm.starts_with(MAGIC) {
        let head: String = wasm.iter().take(8).flat_map(|b| std::ascii::escape_default(*b)).map(char::from).collect();
        format!("it does not start with the WebAssembly magic bytes `\\0asm` (it starts with `{head}`)")
    } else if wasm.get(4..8) == Some(&MODULE[..]) {
        "it is a core WebAssembly module, not a component (make one from it with `wasm-tools component new`)".to_string()
    } else if wasm.get(4..8) != Some(&COMPONENT[..]) {
        "its version bytes are neither a component's (0d 00 01 00) nor a module's".to_string()
    } else {
        return Ok(());
    };
    Err(SandboxError::InvalidComponent { origin: origin.to_string(), reason })
}

fn invalid_component(origin: &str, e: wasmtime::Error) -> SandboxError {
    SandboxError::InvalidComponent { origin: origin.to_string(), reason: format!("{e:#}") }
}

/// The wasmtime version runtime/Cargo.toml pins (`=48.0.8`); part of every cache key.
const WASMTIME_VERSION: &str = "48.0.8";

fn cache_key(engine: &Engine, wasm: &[u8]) -> String {
    let mut engine_hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut engine_hasher);
    let mut hasher = Sha256::new();
    hasher.update(b"wasmtime-");
    hasher.update(WASMTIME_VERSION.as_bytes());
    hasher.update(engine_hasher.finish().to_le_bytes());
    hasher.update(wasm);
    hex::encode(&hasher.finalize()[..16])
}

/// Writes atomically: a reader sees the whole artefact or none.
fn store(path: &Path, component: &Component, origin: &str) -> Result<(), String> {
    let bytes = component.serialize().map_err(|e| format!("{e:#}"))?;
    agentrt_assets::write_atomic(path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let origin_path = path.with_extension(ORIGIN_EXTENSION);
    agentrt_assets::write_atomic(&origin_path, origin.as_bytes()).map_err(|e| format!("{}: {e}", origin_path.display()))
}

/// Marks an entry used now (its modification time is its age for eviction). Best effort: a read-only
/// cache still loads, it just ages by store time.
fn mark_used(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

fn remove_entry(path: &Path) -> std::io::Result<()> {
    std::fs::remove_file(path)?;
    match std::fs::remove_file(path.with_extension(ORIGIN_EXTENSION)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn fake_entry(dir: &Path, name: &str, bytes: usize, age_s: u64) -> PathBuf {
        let path = dir.join(format!("{name}.{ARTEFACT_EXTENSION}"));
        std::fs::write(&path, vec![0u8; bytes]).unwrap();
        std::fs::write(path.with_extension(ORIGIN_EXTENSION), name).unwrap();
        let file = std::fs::File::options().append(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(age_s)).unwrap();
        path
    }

    #[test]
    fn bytes_that_are_no_component_are_refused_by_their_header_without_byte_arrays() {
        let message = |wasm: &[u8]| check_header(wasm, "x.wasm").unwrap_err().to_string();
        let m = message(b"hello not wasm");
        assert_eq!(m, "x.wasm is not a valid WebAssembly component: it does not start with the WebAssembly magic bytes `\\0asm` (it starts with `hello no`)");
        assert!(message(b"\0asm\x01\0\0\0").contains("a core WebAssembly module, not a component"));
        assert!(message(b"").contains("empty"));
        assert!(message(b"\0asm\x02\0").contains("version bytes"));
        assert!(check_header(b"\0asm\x0d\0\x01\0rest", "x.wasm").is_ok());
    }

    #[test]
    fn eviction_removes_the_least_recently_used_first_and_keeps_the_new_entry() {
        let dir = tempfile::tempdir().unwrap();
        let old = fake_entry(dir.path(), "old", 400, 300);
        let middle = fake_entry(dir.path(), "middle", 400, 200);
        let recent = fake_entry(dir.path(), "recent", 400, 100);
        let new = fake_entry(dir.path(), "new", 400, 0);
        let cache = ComponentCache::new(dir.path()).with_cap(1000);
        cache.evict_beyond_cap(&new).unwrap();
        assert!(!old.exists() && !old.with_extension(ORIGIN_EXTENSION).exists(), "the oldest entry goes first, with its origin");
        assert!(!middle.exists(), "then the next oldest, until the total is within the cap");
        assert!(recent.exists() && new.exists());
        let entries = cache.entries().unwrap();
        assert_eq!(entries.iter().map(|e| e.origin.as_deref().unwrap()).collect::<Vec<_>>(), ["new", "recent"], "most recent first");

        // An entry bigger than the cap on its own stays (it was just compiled), the rest go.
        let huge = fake_entry(dir.path(), "huge", 5000, 0);
        cache.evict_beyond_cap(&huge).unwrap();
        assert_eq!(cache.entries().unwrap().len(), 1);
        assert!(huge.exists());
    }

    #[test]
    fn marking_an_entry_used_protects_it_from_eviction() {
        let dir = tempfile::tempdir().unwrap();
        let old = fake_entry(dir.path(), "old", 400, 300);
        let newer = fake_entry(dir.path(), "newer", 400, 100);
        mark_used(&old);
        let new = fake_entry(dir.path(), "new", 400, 0);
        ComponentCache::new(dir.path()).with_cap(900).evict_beyond_cap(&new).unwrap();
        assert!(old.exists(), "a load made it the most recently used but one");
        assert!(!newer.exists());
    }

    #[test]
    fn clean_empties_the_cache_and_counts_what_it_removed() {
        let dir = tempfile::tempdir().unwrap();
        fake_entry(dir.path(), "a", 10, 0);
        fake_entry(dir.path(), "b", 20, 0);
        let cache = ComponentCache::new(dir.path());
        assert_eq!(cache.clean().unwrap(), (2, 30));
        assert!(cache.entries().unwrap().is_empty());
        assert_eq!(ComponentCache::new(dir.path().join("absent")).entries().unwrap().len(), 0, "a missing directory is an empty cache");
    }
}
