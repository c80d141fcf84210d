//! Who matches (part four): from section hits to ranked pages, and the fusion of two rankings.
//!
//! A page's score in one ranking is the best score of its sections (max, not sum: a long article has
//! 25 chunks and must not win on mass alone). Two fusions are implemented and were measured on the dev
//! questions (see `agentrt eval retrieval`):
//! - reciprocal rank fusion: `Σ 1 / (k + rank)` with `k = 60`;
//! - a weighted sum of normalised scores: `w · bm25 / max(bm25) + (1 − w) · cosine`, with pages absent
//!   from one list scoring 0 there.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Which ranking `search_pages_with` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    /// tantivy BM25 only.
    Bm25,
    /// MiniLM cosine only.
    Vector,
    /// Both, fused with the default [`Fusion`].
    #[default]
    Hybrid,
}

/// How two page rankings are combined.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Fusion {
    /// Reciprocal rank fusion with constant `k`.
    Rrf {
        /// Added to each 1-based rank; larger flattens the weight of the top ranks.
        k: f32,
    },
    /// `bm25_weight · bm25/max + (1 − bm25_weight) · cosine`.
    Weighted {
        /// Weight of the max-normalised BM25 score, from 0 to 1; the cosine gets the rest.
        bm25_weight: f32,
    },
}

/// The `k` of reciprocal rank fusion, for pages and for each page's best section over several rankings.
pub const RRF_K: f32 = 60.0;

impl Fusion {
    /// The fusion `search_pages` uses: the weighted sum with BM25 at one half. Measured with BM25 over
    /// section bodies and 800-character sections (`agentrt eval retrieval`), recall@1 / @5 on the 952
    /// dev questions is 0.926 / 0.987 against RRF's 0.895 / 0.967, and on the 7,361 train questions
    /// 0.911 / 0.979 against 0.878 / 0.968; weights 0.4-0.6 are within a point of it on both. (With
    /// the page-title-boosted BM25 of before, RRF was the better fusion: 0.704 against at most 0.682.)
    pub const DEFAULT: Fusion = Fusion::Weighted { bm25_weight: 0.5 };
}

/// Group section hits into pages (score = best section), best first. `page_of` maps a section row to
/// its page index.
pub fn pages_from_sections(hits: &[(usize, f32)], page_of: impl Fn(usize) -> usize) -> Vec<(usize, f32)> {
    let mut best: HashMap<usize, f32> = HashMap::new();
    for &(sec, score) in hits {
        let e = best.entry(page_of(sec)).or_insert(f32::NEG_INFINITY);
        if score > *e {
            *e = score;
        }
    }
    sorted(best)
}

/// Each page's best section over one or more section rankings (each best first): the section with the
/// highest reciprocal-rank sum, `Σ 1 / (RRF_K + rank)`, so a section both rankings place high wins, and
/// with one ranking it is simply the page's first section there. Ties go to the earlier section row.
pub fn best_sections(rankings: &[&[(usize, f32)]], page_of: impl Fn(usize) -> usize) -> HashMap<usize, usize> {
    let mut score: HashMap<usize, f32> = HashMap::new();
    for list in rankings {
        for (rank, &(sec, _)) in list.iter().enumerate() {
            *score.entry(sec).or_insert(0.0) += 1.0 / (RRF_K + rank as f32 + 1.0);
        }
    }
    let mut best: HashMap<usize, (usize, f32)> = HashMap::new();
    for (sec, s) in score {
        let e = best.entry(page_of(sec)).or_insert((sec, s));
        if s > e.1 || (s == e.1 && sec < e.0) {
            *e = (sec, s);
        }
    }
    best.into_iter().map(|(page, (sec, _))| (page, sec)).collect()
}

/// Fuse two page rankings (each best first) into one, best first.
pub fn fuse(bm25: &[(usize, f32)], vector: &[(usize, f32)], fusion: Fusion) -> Vec<(usize, f32)> {
    let mut total: HashMap<usize, f32> = HashMap::new();
    match fusion {
        Fusion::Rrf { k } => {
            for list in [bm25, vector] {
                for (rank, &(page, _)) in list.iter().enumerate() {
                    *total.entry(page).or_insert(0.0) += 1.0 / (k + rank as f32 + 1.0);
                }
            }
        }
        Fusion::Weighted { bm25_weight } => {
            let max = bm25.first().map(|x| x.1).unwrap_or(0.0);
            for &(page, s) in bm25 {
                let norm = if max > 0.0 { s / max } else { 0.0 };
                *total.entry(page).or_insert(0.0) += bm25_weight * norm;
            }
            for &(page, s) in vector {
                *total.entry(page).or_insert(0.0) += (1.0 - bm25_weight) * s.max(0.0);
            }
        }
    }
    sorted(total)
}

fn sorted(m: HashMap<usize, f32>) -> Vec<(usize, f32)> {
    let mut v: Vec<(usize, f32)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_score_is_best_section() {
        let hits = [(0, 1.0), (1, 3.0), (2, 2.0)];
        let pages = pages_from_sections(&hits, |s| if s < 2 { 10 } else { 20 });
        assert_eq!(pages, vec![(10, 3.0), (20, 2.0)]);
    }

    #[test]
    fn best_section_is_the_one_both_rankings_place_high() {
        // Sections 0-2 belong to page 10, section 3 to page 20.
        let page_of = |s: usize| if s < 3 { 10 } else { 20 };
        let bm25 = [(0, 9.0), (3, 8.0), (1, 7.0)];
        let vector = [(1, 0.9), (2, 0.8), (0, 0.1), (3, 0.05)];
        let best = best_sections(&[&bm25, &vector], page_of);
        // Section 1 is 3rd and 1st, section 0 1st and 3rd: tied, the earlier row wins; then section 0
        // alone: first in its only ranking.
        assert_eq!(best[&10], 0);
        assert_eq!(best[&20], 3);
        let best = best_sections(&[&vector], page_of);
        assert_eq!(best[&10], 1);
        let best = best_sections(&[&[(2, 1.0), (1, 0.9)], &[(1, 0.9), (0, 0.5)]], page_of);
        assert_eq!(best[&10], 1);
    }

    #[test]
    fn rrf_rewards_agreement() {
        let a = [(1, 9.0), (2, 5.0), (3, 1.0)];
        let b = [(2, 0.9), (3, 0.8), (1, 0.1)];
        let fused = fuse(&a, &b, Fusion::Rrf { k: 60.0 });
        assert_eq!(fused[0].0, 2);
    }

    #[test]
    fn weighted_normalises_bm25() {
        let a = [(1, 10.0), (2, 9.0)];
        let b = [(2, 0.9), (1, 0.2)];
        let fused = fuse(&a, &b, Fusion::Weighted { bm25_weight: 0.5 });
        assert_eq!(fused[0].0, 2); // 0.45 + 0.45 vs 0.5 + 0.1
    }
}
