//! The bounds every program runs under.

use std::time::Duration;
use wasmtime::ResourceLimiter;

/// What one program may consume. Every bound is enforced by the host, outside the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Wasm instructions, as wasmtime fuel (about one unit per instruction).
    pub fuel: u64,
    /// Linear memory, in bytes, over all of the guest's memories.
    pub memory_bytes: usize,
    /// Wall time, including time spent in tool calls.
    #[serde(with = "millis")]
    pub timeout: Duration,
    /// Bytes the program may print.
    pub max_output_bytes: usize,
    /// Tool calls per program.
    pub max_host_calls: u32,
}

impl Default for Limits {
    /// Generous for a program that searches, lists and reads a few sections (a 3-call program uses
    /// about 1% of the fuel), tight enough that a runaway program ends well within a second. These are
    /// the one set of defaults: `agentrt exec`'s flags, an episode's (`EpisodeSpec` in the rollout
    /// crate) and `default.toml`'s `[rollout]` keys all read them (a test holds the three equal).
    fn default() -> Self {
        Self { fuel: 200_000_000, memory_bytes: 64 << 20, timeout: Duration::from_secs(2), max_output_bytes: 64 << 10, max_host_calls: 32 }
    }
}

/// Bounds a Store's linear memories and remembers whether the bound was hit and how high use went.
pub struct MemoryLimiter {
    limit: usize,
    in_use: usize,
    pub(crate) peak: usize,
    pub(crate) exceeded: bool,
}

impl MemoryLimiter {
    pub fn new(limit: usize) -> Self {
        Self { limit, in_use: 0, peak: 0, exceeded: false }
    }

    /// The bound, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A new bound for the next call of a reused instance; the memory it already holds stays counted.
    pub fn rearm(&mut self, limit: usize) {
        self.limit = limit;
        self.exceeded = false;
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let grown = self.in_use + (desired - current);
        if grown > self.limit {
            self.exceeded = true;
            return Ok(false);
        }
        self.in_use = grown;
        self.peak = self.peak.max(grown);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

mod millis {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms: u64 = serde::Deserialize::deserialize(d)?;
        Ok(Duration::from_millis(ms))
    }
}
