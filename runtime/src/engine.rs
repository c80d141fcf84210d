//! The wasmtime engine every sandbox shares, and the clock that bounds wall time.

use crate::SandboxError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; wall-time limits are rounded up to this.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The largest linear memory any guest may have; per-run limits are at most this.
pub const MAX_MEMORY_BYTES: usize = 512 << 20;

/// How many instances may be alive at once (programs running concurrently, each with its plug-in
/// calls): the pooling allocator reserves their slots up front.
pub const MAX_CONCURRENT_INSTANCES: u32 = 256;

/// Builds the engine: component model, cranelift, async host calls, fuel, epoch interruption and the
/// pooling allocator (instantiation in microseconds instead of an mmap per program).
pub fn build_engine() -> Result<Engine, SandboxError> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(MAX_CONCURRENT_INSTANCES)
        .total_core_instances(MAX_CONCURRENT_INSTANCES * 4)
        .total_memories(MAX_CONCURRENT_INSTANCES * 2)
        .total_tables(MAX_CONCURRENT_INSTANCES * 4)
        .max_memories_per_component(4)
        .max_memory_size(MAX_MEMORY_BYTES);
    // How a finished instance's memory is reset for the next program. Without PAGEMAP_SCAN (Linux < 6.7)
    // wasmtime memsets the first `keep_resident` bytes and madvises the rest away, so every program
    // page-faults its working set back in; measured with `agentrt bench sandbox` (release, p50): 0 -> 315 us,
    // 64 KiB -> 280 us, 1 MiB -> 310 us, 4 MiB -> 575 us. With PAGEMAP_SCAN it asks the kernel which pages
    // the guest wrote and restores only those (up to `keep_resident` bytes of them) with memcpy, leaving every
    // page mapped: no madvise, no page faults on the next program (23 faults per run -> 0). The 3-call
    // program dirties well under 1 MiB (64 KiB to 16 MiB measured the same); a program that dirties more
    // gets the rest decommitted as before. Measured: p50 324 -> 185 us (median of 3 interleaved runs).
    let pagemap = PoolingAllocationConfig::is_pagemap_scan_available();
    pool.pagemap_scan(if pagemap { Enabled::Yes } else { Enabled::No })
        .linear_memory_keep_resident(if pagemap { 1 << 20 } else { 64 << 10 })
        // Without it (0) the p50 rises by ~25% (tables are reset by madvise and faulted back in).
        .table_keep_resident(1 << 16);

    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .consume_fuel(true)
        .epoch_interruption(true)
        .cranelift_opt_level(wasmtime::OptLevel::Speed)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config).map_err(|e| SandboxError::Engine(format!("{e:#}")))
}

/// Advances the engine's epoch every [`EPOCH_TICK`] on a background thread, for as long as it lives.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    pub fn start(engine: &Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let engine = engine.clone();
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("agentrt-epoch".into())
            .spawn(move || {
                let started = Instant::now();
                let mut ticks = 0;
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    catch_up(&mut ticks, started.elapsed(), || engine.increment_epoch());
                }
            })
            .expect("spawning the epoch thread");
        Self { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Advances the epoch (`increment`) from `ticks` to the number of ticks due `elapsed` after the ticker
/// started. One tick per sleep is not enough: on a loaded machine a 5 ms sleep can last far longer (the
/// fuzzer saw a 2 ms program report 30 s of wall time), and each tick that is not made up stretches the
/// wall-time limit of every running program by that much.
fn catch_up(ticks: &mut u64, elapsed: Duration, mut increment: impl FnMut()) {
    let due = (elapsed.as_micros() / EPOCH_TICK.as_micros()) as u64;
    while *ticks < due {
        increment();
        *ticks += 1;
    }
}

/// The number of epoch ticks that make up `timeout`, rounded up.
pub fn deadline_ticks(timeout: Duration) -> u64 {
    (timeout.as_micros().div_ceil(EPOCH_TICK.as_micros())).max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_catches_up_after_a_sleep_that_overslept() {
        let mut ticks = 0;
        let mut increments = 0;
        catch_up(&mut ticks, Duration::from_millis(5), || increments += 1);
        assert_eq!((ticks, increments), (1, 1));
        // The ticker thread was not scheduled for 30 s: the epoch jumps to where the clock is, so a
        // program whose deadline passed meanwhile traps at its next check instead of 30 s late.
        catch_up(&mut ticks, Duration::from_secs(30), || increments += 1);
        assert_eq!((ticks, increments), (6_000, 6_000));
        catch_up(&mut ticks, Duration::from_secs(30), || increments += 1);
        assert_eq!(increments, 6_000, "no tick is made twice");
    }
}
