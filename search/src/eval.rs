//! Retrieval evaluation: recall@k of the gold page for each ranking, on a split of the questions.

use crate::error::SearchError;
use crate::hybrid::{self, Fusion};
use crate::index::WikiIndex;
use crate::questions::Question;
use serde::Serialize;

/// Recall of the gold page at 1, 5 and 10 for one ranking.
#[derive(Debug, Clone, Serialize)]
pub struct Recall {
    /// The ranking's name: `bm25`, `vector`, `hybrid`, or a fusion variant.
    pub mode: String,
    /// Share of questions whose gold page is first.
    pub at1: f64,
    /// ... in the top 5.
    pub at5: f64,
    /// ... in the top 10.
    pub at10: f64,
}

/// The whole evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct RetrievalReport {
    /// Number of questions.
    pub questions: usize,
    /// The three modes the issue asks for: bm25, vector, hybrid (the default fusion).
    pub modes: Vec<Recall>,
    /// Fusion variants measured to choose the default.
    pub fusions: Vec<Recall>,
}

#[derive(Default)]
struct Counter {
    hits: [usize; 3],
}

impl Counter {
    fn add(&mut self, ranked: &[(usize, f32)], gold: Option<usize>) {
        let Some(gold) = gold else { return };
        if let Some(pos) = ranked.iter().take(10).position(|&(p, _)| p == gold) {
            for (i, k) in [1, 5, 10].iter().enumerate() {
                if pos < *k {
                    self.hits[i] += 1;
                }
            }
        }
    }
    fn recall(&self, mode: String, n: usize) -> Recall {
        let r = |h: usize| if n == 0 { 0.0 } else { h as f64 / n as f64 };
        Recall { mode, at1: r(self.hits[0]), at5: r(self.hits[1]), at10: r(self.hits[2]) }
    }
}

/// The fusions compared on dev.
pub fn fusion_variants() -> Vec<(String, Fusion)> {
    let mut v = vec![("rrf k=60".to_string(), Fusion::Rrf { k: 60.0 }), ("rrf k=10".to_string(), Fusion::Rrf { k: 10.0 })];
    for w in [0.3f32, 0.4, 0.5, 0.6, 0.7, 0.8] {
        v.push((format!("weighted w_bm25={w}"), Fusion::Weighted { bm25_weight: w }));
    }
    v
}

/// Run every question through each ranking and count where the gold page lands. Every question needs a
/// gold `page` (one without is an error, before anything runs); a page the index does not have counts as
/// a miss.
pub fn evaluate(index: &WikiIndex, questions: &[Question], progress: &mut dyn FnMut(usize)) -> Result<RetrievalReport, SearchError> {
    if let Some(q) = questions.iter().find(|q| q.page.is_none()) {
        return Err(SearchError::NoGoldPage { id: q.id.clone() });
    }
    let variants = fusion_variants();
    let mut bm25 = Counter::default();
    let mut vector = Counter::default();
    let mut hybrid_c = Counter::default();
    let mut fus: Vec<Counter> = variants.iter().map(|_| Counter::default()).collect();
    let mut done = 0;
    for chunk in questions.chunks(64) {
        let texts: Vec<String> = chunk.iter().map(|q| q.question.clone()).collect();
        let vecs = index.embed_queries(&texts)?;
        for (q, v) in chunk.iter().zip(vecs) {
            let gold = q.page.as_deref().and_then(|p| index.page_index(p));
            let r = index.rankings_with_vector(&q.question, &v)?;
            bm25.add(&r.bm25, gold);
            vector.add(&r.vector, gold);
            hybrid_c.add(&hybrid::fuse(&r.bm25, &r.vector, Fusion::DEFAULT), gold);
            for ((_, f), c) in variants.iter().zip(fus.iter_mut()) {
                c.add(&hybrid::fuse(&r.bm25, &r.vector, *f), gold);
            }
        }
        done += chunk.len();
        progress(done);
    }
    let n = questions.len();
    Ok(RetrievalReport {
        questions: n,
        modes: vec![bm25.recall("bm25".into(), n), vector.recall("vector".into(), n), hybrid_c.recall("hybrid".into(), n)],
        fusions: variants.iter().zip(fus).map(|((name, _), c)| c.recall(name.clone(), n)).collect(),
    })
}
