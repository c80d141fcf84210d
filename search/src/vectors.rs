//! Who matches (part two): the section vectors on disk and exact cosine search over them.
//!
//! `vectors.f32` is `n × 384` little-endian f32, row `i` for section `i`, each row unit length, so the
//! dot product is the cosine. Exact search reads every row: at 11 K sections that is 4 M multiply-adds,
//! well under a millisecond. An approximate index (HNSW) pays off past roughly 200 K–500 K sections,
//! where the scan reaches ~10 ms and the vectors stop fitting comfortably in cache.

/// The vectors file's name inside a generation directory.
pub const VECTORS_FILE: &str = "vectors.f32";

/// Unit vectors, row-major, kept in memory.
#[derive(Debug, Clone)]
pub struct VectorStore {
    dim: usize,
    data: Vec<f32>,
}

impl VectorStore {
    /// Wrap rows of width `dim`.
    pub fn from_rows(dim: usize, rows: &[Vec<f32>]) -> Self {
        let mut data = Vec::with_capacity(rows.len() * dim);
        for r in rows {
            debug_assert_eq!(r.len(), dim);
            data.extend_from_slice(r);
        }
        VectorStore { dim, data }
    }

    /// Decode the file's bytes; None when the length is not a whole number of rows.
    pub fn from_bytes(dim: usize, bytes: &[u8]) -> Option<Self> {
        if dim == 0 || bytes.len() % (4 * dim) != 0 {
            return None;
        }
        let data = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Some(VectorStore { dim, data })
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
        let mut scored: Vec<(usize, f32)> =
            self.data.chunks_exact(self.dim).map(|row| dot(row, query)).enumerate().collect();
        let k = k.min(scored.len());
        if k < scored.len() {
            scored.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
            scored.truncate(k);
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored
    }
}

/// Dot product, written so the compiler vectorises it (8 independent accumulators).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    s
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
}
