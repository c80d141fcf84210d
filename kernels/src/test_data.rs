//! Deterministic pseudo-random data for the tests of the kernels and of the crates built on them: a
//! 64-bit linear congruential generator (Knuth's MMIX constants), so no test needs a random-number crate
//! and every run sees the same numbers.

const MULTIPLIER: u64 = 6364136223846793005;
const INCREMENT: u64 = 1442695040888963407;

/// The generator's states after `seed`, one per draw.
fn states(seed: u64) -> impl Iterator<Item = u64> {
    let mut s = seed.wrapping_mul(MULTIPLIER).wrapping_add(INCREMENT);
    std::iter::repeat_with(move || {
        s = s.wrapping_mul(MULTIPLIER).wrapping_add(INCREMENT);
        s
    })
}

/// `n` values spread evenly over `[-amplitude, amplitude)`, the same for the same `seed`.
pub fn values(n: usize, seed: u64, amplitude: f32) -> Vec<f32> {
    states(seed).take(n).map(|s| ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amplitude).collect()
}

/// `n` bytes, the same for the same `seed`.
pub fn bytes(n: usize, seed: u64) -> Vec<u8> {
    states(seed).take(n).map(|s| (s >> 56) as u8).collect()
}
