//! Who matches (part two): the section vectors on disk and exact cosine search over them.
//!
//! `vectors.f32` is `n × 384` little-endian f32, row `i` for section `i`, each row unit length, so the
//! dot product is the cosine.
//!
//! Search reads every row, in two passes over compact copies made at open. First, the signs of each
//! row minus the corpus mean, 48 bytes a row (550 KB at 11 K sections, which stays in cache): the
//! Hamming distance to the query's signs picks a shortlist of `max(4k, 1024)` rows. Then an int8 copy
//! of each row (per-row scale) scores the shortlist against the query quantised the same way. An int8
//! score is the cosine to within ~0.01 (a test checks it).
//!
//! Why not plain f32: the scan is bound by memory. The 17.6 MB of f32 took ~3 ms a query; the 4.4 MB
//! int8 copy, split over two cores, ~0.6 ms, and it pushed the encoder's weights out of the cache. On
//! the 952 dev questions, recall@10 of the gold page was the same with the f32 scan, the full int8 scan
//! and the two passes (hybrid 0.968 with the current index; rescoring in f32 changed no hybrid result).
//! An approximate index (HNSW) pays off past roughly 1 M sections, where the sign pass alone reaches
//! several milliseconds.

use crate::int8::QuantizedRows;
use agentrt_kernels::int8::{dots, quantize, row_offsets, Int8Kernel};

/// The vectors file's name inside a generation directory.
pub const VECTORS_FILE: &str = "vectors.f32";

/// Unit vectors as searches read them: the sign bits and the int8 copy of each row (the f32 rows are
/// not kept: nothing reads them after open, and not holding them spares a 20 MB copy at every open).
#[derive(Debug, Clone)]
pub struct VectorStore {
    dim: usize,
    rows: usize,
    codes: Vec<i8>,
    /// Per row: `v ≈ scale · code`.
    scale: Vec<f32>,
    /// Per row: `128 · Σ code`, what the unsigned int8 kernels subtract ([`row_offsets`]).
    offsets: Vec<i32>,
    /// The mean of all rows, and per row the signs of `row - mean` as bits: the first pass.
    mean: Vec<f32>,
    signs: Vec<u64>,
}

/// The little-endian f32 values of `bytes` (as the vectors file and safetensors store them).
pub(crate) fn le_f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The vectors file's bytes for `rows`.
pub fn file_bytes(rows: &[Vec<f32>]) -> Vec<u8> {
    rows.iter().flatten().flat_map(|x| x.to_le_bytes()).collect()
}

impl VectorStore {
    /// Wrap rows of width `dim`.
    pub fn from_rows(dim: usize, rows: &[Vec<f32>]) -> Self {
        for r in rows {
            assert_eq!(r.len(), dim, "VectorStore: a row of {} values in a store of width {dim}", r.len());
        }
        Self::build(dim, rows.len(), |r, out| out.copy_from_slice(&rows[r])).expect("VectorStore: a row holds a non-finite value")
    }

    /// Decode the file's bytes; None when the length is not a whole number of rows or a value is not
    /// finite.
    pub fn from_bytes(dim: usize, bytes: &[u8]) -> Option<Self> {
        if dim == 0 || !bytes.len().is_multiple_of(4 * dim) {
            return None;
        }
        Self::build(dim, bytes.len() / (4 * dim), |r, out| {
            for (x, v) in out.iter_mut().zip(le_f32s(&bytes[r * 4 * dim..(r + 1) * 4 * dim])) {
                *x = v;
            }
        })
    }

    /// The store of `n` rows of width `dim`, `row(r, out)` writing row `r` into `out` (called twice a
    /// row: once for the codes and the mean, once for the signs against the mean). None when a value is
    /// not finite.
    fn build(dim: usize, n: usize, row: impl Fn(usize, &mut [f32])) -> Option<Self> {
        let mut buf = vec![0f32; dim];
        let mut codes = vec![0i8; n * dim];
        let mut scale = Vec::with_capacity(n);
        let mut mean = vec![0f32; dim];
        for (r, c) in codes.chunks_exact_mut(dim).enumerate() {
            row(r, &mut buf);
            scale.push(quantize::activation_values(&buf, c)?);
            for (m, v) in mean.iter_mut().zip(&buf) {
                *m += v;
            }
        }
        let offsets = row_offsets(&codes, dim);
        mean.iter_mut().for_each(|m| *m /= n.max(1) as f32);
        let words = dim.div_ceil(64);
        let mut signs = vec![0u64; n * words];
        for (r, bits) in signs.chunks_exact_mut(words).enumerate() {
            row(r, &mut buf);
            sign_bits(&buf, &mean, bits);
        }
        Some(VectorStore { dim, rows: n, codes, scale, offsets, mean, signs })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The `k` rows most similar to `query` (a unit vector), best first: (row, cosine).
    pub fn top_k(&self, query: &[f32], k: usize) -> Vec<(usize, f32)> {
        if query.len() != self.dim || k == 0 {
            return Vec::new();
        }
        let q = QuantizedRows::quantize(query, 1, self.dim);
        let (codes, q_scale) = q.row(0);
        let n = self.len();
        let kernel = Int8Kernel::selected();
        let score = |r: usize, sum: i32| q_scale * self.scale[r] * sum as f32;
        let shortlist_len = (4 * k).max(SHORTLIST_MIN);
        if n <= shortlist_len {
            let mut sums = vec![0i32; n];
            dots(kernel, codes, &self.codes, &self.offsets, &mut sums);
            let mut scored: Vec<(usize, f32)> = sums.iter().enumerate().map(|(r, &sum)| (r, score(r, sum))).collect();
            best_first(&mut scored, k.min(n));
            return scored;
        }
        // First pass: Hamming distance between sign bits, 48 bytes a row.
        let words = self.dim.div_ceil(64);
        let mut query_bits = vec![0u64; words];
        sign_bits(query, &self.mean, &mut query_bits);
        let mut shortlist: Vec<(u32, u32)> = hamming_distances(&query_bits, &self.signs).into_iter().enumerate().map(|(r, d)| (d, r as u32)).collect();
        shortlist.select_nth_unstable(shortlist_len - 1);
        shortlist.truncate(shortlist_len);
        // Second pass: int8 scores of the shortlist.
        let mut scored: Vec<(usize, f32)> = shortlist
            .iter()
            .map(|&(_, r)| {
                let r = r as usize;
                let mut sum = [0i32];
                dots(kernel, codes, &self.codes[r * self.dim..(r + 1) * self.dim], &self.offsets[r..r + 1], &mut sum);
                (r, score(r, sum[0]))
            })
            .collect();
        best_first(&mut scored, k);
        scored
    }
}

/// Rows scored in int8 after the sign-bit pass: 4k, and at least this many.
const SHORTLIST_MIN: usize = 1024;

/// Bit `i` of `bits` is set when `v[i] > mean[i]`.
fn sign_bits(v: &[f32], mean: &[f32], bits: &mut [u64]) {
    // 64 values a word, each word built without branches (the loop vectorises).
    for ((word, v), mean) in bits.iter_mut().zip(v.chunks(64)).zip(mean.chunks(64)) {
        *word = v.iter().zip(mean).enumerate().fold(0u64, |w, (i, (x, m))| w | (u64::from(x > m) << i));
    }
}

/// Hamming distance from `query` to every row of `rows` (rows of `query.len()` words).
fn hamming_distances(query: &[u64], rows: &[u64]) -> Vec<u32> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the feature is present.
        return unsafe { hamming_distances_popcnt(query, rows) };
    }
    hamming_distances_plain(query, rows)
}

#[inline(always)]
fn hamming_distances_plain(query: &[u64], rows: &[u64]) -> Vec<u32> {
    rows.chunks_exact(query.len()).map(|row| row.iter().zip(query).map(|(a, b)| (a ^ b).count_ones()).sum()).collect()
}

/// The same loop with the `popcnt` instruction (the baseline x86-64 target counts bits in software).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn hamming_distances_popcnt(query: &[u64], rows: &[u64]) -> Vec<u32> {
    hamming_distances_plain(query, rows)
}

/// Keep the `k` highest scores, sorted best first (ties by row, so results are deterministic).
fn best_first(scored: &mut Vec<(usize, f32)>, k: usize) {
    let by_score = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if k == 0 {
        scored.clear();
        return;
    }
    if k < scored.len() {
        scored.select_nth_unstable_by(k - 1, by_score);
        scored.truncate(k);
    }
    scored.sort_by(by_score);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_top_k() {
        let rows = vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.6, 0.8]];
        let store = VectorStore::from_rows(2, &rows);
        let back = VectorStore::from_bytes(2, &file_bytes(&rows)).unwrap();
        assert_eq!((back.codes.clone(), back.scale.clone(), back.signs.clone()), (store.codes.clone(), store.scale.clone(), store.signs.clone()));
        assert_eq!(back.len(), 3);
        let top = back.top_k(&[1.0, 0.0], 2);
        assert_eq!(top[0].0, 0);
        assert_eq!(top[1].0, 2);
        assert!(VectorStore::from_bytes(2, &file_bytes(&rows)[..7]).is_none());
        assert!(VectorStore::from_bytes(2, &file_bytes(&[vec![1.0, f32::NAN]])).is_none());
    }

    /// The int8 scan's scores are the cosines to within 0.01, and where the best rows stand apart (as a
    /// query's own sections do) it ranks them as an f32 scan does.
    #[test]
    fn int8_scores_are_close_to_the_cosines() {
        let dim = 384;
        let mut s = 7u64;
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let unit = |v: Vec<f32>| crate::lanes::normalise(v);
        let rows: Vec<Vec<f32>> = (0..5000).map(|_| unit((0..dim).map(|_| next()).collect())).collect();
        let store = VectorStore::from_rows(dim, &rows);
        let cosine = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        for probe in 0..5 {
            // A query near three rows: they score ~0.9, the other rows ~0 ± 0.15.
            let near = [probe * 7, probe * 7 + 1000, probe * 7 + 2000];
            let query = unit((0..dim).map(|i| near.iter().map(|&r| rows[r][i]).sum::<f32>() + 0.1 * next()).collect());
            let top = store.top_k(&query, 50);
            assert_eq!(top.len(), 50);
            let mut head: Vec<usize> = top[..3].iter().map(|h| h.0).collect();
            head.sort();
            assert_eq!(head, near, "probe {probe}: {:?}", &top[..5]);
            for &(r, score) in &top {
                let exact = cosine(&rows[r], &query);
                assert!((score - exact).abs() < 0.01, "row {r}: int8 {score} vs f32 {exact}");
            }
            assert!(top.windows(2).all(|w| w[0].1 >= w[1].1), "best first");
        }
        assert!(store.top_k(&rows[0], 0).is_empty());
        assert_eq!(store.top_k(&rows[0], 10_000).len(), 5000);
    }
}
