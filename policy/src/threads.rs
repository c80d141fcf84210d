//! How the CPU's threads are used: the thread count candle asks for, and where a forward runs.
//!
//! [`fix_thread_count`] fixes the thread count candle asks for on every matrix product.
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

/// Runs `f` on a thread of rayon's global pool (at once when already on one). A sampling forward is a few
/// hundred small parallel ops, and each one called from outside the pool is a hand-off to a sleeping
/// worker and back: a fifth of a decoding step's time went to the scheduler that way. Inside the pool the
/// ops share its own queues. (The training update, with fewer and larger ops, measured slower in the pool
/// and stays on its caller's thread.)
pub fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        f()
    } else {
        rayon::scope(|_| f())
    }
}
