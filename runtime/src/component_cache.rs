//! Precompiled components on disk. Compiling the interpreter takes seconds; loading its precompiled
//! form takes about a millisecond. An entry is keyed by the component's bytes, wasmtime's version and
//! the engine's compilation settings, so a changed engine never loads a stale artefact.

use crate::SandboxError;
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::component::Component;
use wasmtime::Engine;

/// A directory of precompiled components.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
}

impl ComponentCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// `$AGENTRT_CACHE/components` (default `~/.cache/agentrt/components`).
    pub fn default_location() -> Self {
        Self::new(agentrt_assets::cache_root().join("components"))
    }

    /// The component compiled from `wasm`, from the cache when it holds it. `origin` names the bytes in
    /// error messages (a path, or "the built-in interpreter").
    pub fn load(&self, engine: &Engine, wasm: &[u8], origin: &str) -> Result<Component, SandboxError> {
        let path = self.dir.join(format!("{}.cwasm", cache_key(engine, wasm)));
        if path.is_file() {
            // SAFETY: files in this directory are written only by `store` below, from
            // `Component::serialize` of an engine with the same compatibility hash (it is part of the
            // key); wasmtime re-checks the header and version before using them.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok(component),
                Err(e) => eprintln!("warning: ignoring unreadable precompiled component {}: {e:#}", path.display()),
            }
        }
        let component = Component::new(engine, wasm).map_err(|e| invalid_component(origin, e))?;
        if let Err(e) = store(&path, &component) {
            eprintln!("warning: could not cache the precompiled component at {}: {e}", path.display());
        }
        Ok(component)
    }
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
fn store(path: &Path, component: &Component) -> Result<(), String> {
    let bytes = component.serialize().map_err(|e| format!("{e:#}"))?;
    agentrt_assets::write_atomic(path, &bytes).map_err(|e| format!("{}: {e}", path.display()))
}
