//! Who matches (part two): the section vectors on disk and exact cosine search over them.
//!
//! `vectors.f32` is `n × 384` little-endian f32, row `i` for section `i`, each row unit length, so the
//! dot product is the cosine.
//!
//! Search is exact over the candidates that matter, in two passes: an int8 copy of every row (made at
//! open, a quarter of the bytes) is scanned with the query quantised the same way, and the best
//! `2k + 64` rows by that estimate are scored again in f32. The scan is bound by memory: 17.6 MB of f32
//! at 11 K sections took ~3 ms a query, the 4.4 MB int8 copy a fraction of that. An int8 estimate is
//! within ~0.01 of the cosine, far less than the gap between the k-th and the (2k + 64)-th row, so the
//! result is the exact top k. An approximate index (HNSW) pays off past roughly 1 M sections, where even
//! the int8 scan reaches tens of milliseconds.

use crate::int8_linear::{dot_u8_i8, quantize_i8, QuantizedRows};
use crate::lanes::dot;

/// The vectors file's name inside a generation directory.
pub const VECTORS_FILE: &str = "vectors.f32";

/// Unit vectors, row-major, kept in memory, with their int8 copy for the first pass.
#[derive(Debug, Clone)]
pub struct VectorStore {
    dim: usize,
    data: Vec<f32>,
    codes: Vec<i8>,
    /// Per row: `v ≈ scale · code`.
    scale: Vec<f32>,
    /// Per row: `128 · Σ code`, which undoes the query codes' +128 offset.
    offset_correction: Vec<i32>,
}

impl VectorStore {
    /// Wrap rows of width `dim`.
    pub fn from_rows(dim: usize, rows: &[Vec<f32>]) -> Self {
        let mut data = Vec::with_capacity(rows.len() * dim);
        for r in rows {
            assert_eq!(r.len(), dim, "VectorStore: a row of {} values in a store of width {dim}", r.len());
            data.extend_from_slice(r);
        }
        Self::with_codes(dim, data)
    }

    fn with_codes(dim: usize, data: Vec<f32>) -> Self {
        let n = data.len() / dim;
        let mut codes = vec![0i8; data.len()];
        let mut scale = Vec::with_capacity(n);
        let mut offset_correction = Vec::with_capacity(n);
        for (row, c) in data.chunks_exact(dim).zip(codes.chunks_exact_mut(dim)) {
            scale.push(quantize_i8(row, c));
            offset_correction.push(128 * c.iter().map(|&x| x as i32).sum::<i32>());
        }
        VectorStore { dim, data, codes, scale, offset_correction }
    }

    /// Decode the file's bytes; None when the length is not a whole number of rows.
    pub fn from_bytes(dim: usize, bytes: &[u8]) -> Option<Self> {
        if dim == 0 || bytes.len() % (4 * dim) != 0 {
            return None;
        }
        let data: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        if data.iter().any(|v| !v.is_finite()) {
            return None;
        }
        Some(Self::with_codes(dim, data))
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.data.len() * 4);
        for x in &self.data {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.data.len() / self.dim
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The `k` rows most similar to `query` (a unit vector), best first: (row, cosine).
    pub fn top_k(&self, query: &[f32], k: usize) -> Vec<(usize, f32)> {
        if query.len() != self.dim || k == 0 {
            return Vec::new();
        }
        let q = QuantizedRows::quantize(query, 1, self.dim);
        let (codes, q_scale) = q.row(0);
        let mut estimates: Vec<(usize, f32)> = self
            .codes
            .chunks_exact(self.dim)
            .enumerate()
            .map(|(r, c)| (r, q_scale * self.scale[r] * (dot_u8_i8(codes, c) - self.offset_correction[r]) as f32))
            .collect();
        best_first(&mut estimates, (2 * k + 64).min(self.len()));
        let mut scored: Vec<(usize, f32)> =
            estimates.iter().map(|&(r, _)| (r, dot(&self.data[r * self.dim..(r + 1) * self.dim], query))).collect();
        best_first(&mut scored, k.min(self.len()));
        scored
    }
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
        let back = VectorStore::from_bytes(2, &store.to_bytes()).unwrap();
        assert_eq!(back.len(), 3);
        let top = back.top_k(&[1.0, 0.0], 2);
        assert_eq!(top[0].0, 0);
        assert_eq!(top[1].0, 2);
        assert!(VectorStore::from_bytes(2, &store.to_bytes()[..7]).is_none());
    }

    /// The two-pass search returns what a plain f32 scan of every row returns.
    #[test]
    fn two_pass_search_is_the_exact_top_k() {
        let dim = 384;
        let mut s = 7u64;
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let unit = |v: Vec<f32>| crate::embedder::normalise(v);
        let rows: Vec<Vec<f32>> = (0..3000).map(|_| unit((0..dim).map(|_| next()).collect())).collect();
        let store = VectorStore::from_rows(dim, &rows);
        for _ in 0..5 {
            // A query near one row, as real queries sit near their sections.
            let base = &rows[(next().abs() * 5000.0) as usize % rows.len()];
            let query = unit(base.iter().map(|x| x + 0.05 * next()).collect());
            let mut exact: Vec<(usize, f32)> = rows.iter().map(|r| dot(r, &query)).enumerate().collect();
            best_first(&mut exact, 50);
            assert_eq!(store.top_k(&query, 50), exact);
        }
        assert!(store.top_k(&rows[0], 0).is_empty());
        assert_eq!(store.top_k(&rows[0], 10_000).len(), 3000);
    }
}
