//! Fixes the thread count candle asks for on every matrix product.
//!
//! candle 0.11 sizes each CPU matrix product's parallelism with `get_num_threads()`, which, unless
//! `RAYON_NUM_THREADS` is set, counts physical cores with `num_cpus::get_physical()`: that opens and
//! parses `/proc/cpuinfo` every time. A default training step here made 94,894 such reads (the kernel
//! formatting every CPU's flag list each time), about 5% of the step. Setting `RAYON_NUM_THREADS` to the
//! count rayon uses anyway leaves every pool as it was and turns the lookup into an environment read.
//! A process-wide setting: binaries call it first thing, before any thread starts.

/// Sets `RAYON_NUM_THREADS` to this machine's available parallelism unless it is set; returns the count
/// in effect. Must run before other threads exist (it writes the environment).
pub fn fix_thread_count() -> usize {
    if let Some(n) = std::env::var("RAYON_NUM_THREADS").ok().and_then(|v| v.trim().parse::<usize>().ok()).filter(|&n| n > 0) {
        return n;
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    n
}
