//! Retrieval evaluation: recall@k of the gold page for each ranking, on a split of the questions, and
//! recall of the answer's section inside the page `search_pages` ranks first.
//!
//! Section recall@k counts a question when one of the first `k` sections of the top hit's page, in a
//! ranking of that page's sections, holds a gold answer as a whole word ([`Question::answered_in`]); a
//! question whose top hit is the wrong page counts as a miss unless that page happens to hold an answer.
//! Two rankings of a page's sections: `bm25` (the corpus BM25's order of them, the section
//! `search_pages` names) and `passages` (each section ranked by its best passage, as `search_passages`
//! ranks sentences).

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

/// Recall of the answer's section inside the top hit's page for one ranking of its sections.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SectionRecall {
    /// The ranking's name: `bm25` or `passages`.
    pub ranking: String,
    /// Share of questions whose first section holds a gold answer.
    pub at1: f64,
    /// ... one of the first three.
    pub at3: f64,
}

/// Page and section recall for the questions of one gold page.
#[derive(Debug, Clone, Serialize)]
pub struct ArticleRecall {
    /// The gold page's id.
    pub page: String,
    /// Characters of text in its sections.
    pub characters: usize,
    /// Its sections.
    pub sections: usize,
    /// Questions about it.
    pub questions: usize,
    /// Share of them whose gold page the hybrid search ranks first.
    pub page_at1: f64,
    /// Section recall inside the top hit's page, one entry a section ranking.
    pub section: Vec<SectionRecall>,
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
    /// Recall of the answer's section inside the top hit's page (hybrid search), one entry a section
    /// ranking.
    pub sections: Vec<SectionRecall>,
    /// Page and section recall per gold page, longest page first.
    pub articles: Vec<ArticleRecall>,
}

/// The section rankings measured, in report order.
const SECTION_RANKINGS: [&str; 2] = ["bm25", "passages"];

#[derive(Default, Clone)]
struct SectionCounter {
    questions: usize,
    page_at1: usize,
    at: [[usize; 2]; SECTION_RANKINGS.len()],
}

impl SectionCounter {
    fn add(&mut self, page_first: bool, held: &[[bool; 2]; SECTION_RANKINGS.len()]) {
        self.questions += 1;
        self.page_at1 += usize::from(page_first);
        for (count, hit) in self.at.iter_mut().zip(held) {
            for (c, h) in count.iter_mut().zip(hit) {
                *c += usize::from(*h);
            }
        }
    }
    fn recall(&self) -> Vec<SectionRecall> {
        let r = |h: usize| if self.questions == 0 { 0.0 } else { h as f64 / self.questions as f64 };
        SECTION_RANKINGS.iter().zip(&self.at).map(|(name, a)| SectionRecall { ranking: name.to_string(), at1: r(a[0]), at3: r(a[1]) }).collect()
    }
}

/// Whether the first one and the first three of `order` (sections) hold an answer to `q`.
fn held_in(index: &WikiIndex, q: &Question, order: &[usize]) -> [bool; 2] {
    let first = order.iter().position(|&s| q.answered_in(index.section_text(s)));
    [first.is_some_and(|i| i < 1), first.is_some_and(|i| i < 3)]
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
    let mut sections = SectionCounter::default();
    let mut by_page: std::collections::BTreeMap<usize, SectionCounter> = Default::default();
    let mut done = 0;
    for chunk in questions.chunks(64) {
        let texts: Vec<String> = chunk.iter().map(|q| q.question.clone()).collect();
        let vecs = index.embed_queries(&texts)?;
        for (q, v) in chunk.iter().zip(vecs) {
            let gold = q.page.as_deref().and_then(|p| index.page_index(p));
            let r = index.rankings_with_vector(&q.question, &v)?;
            bm25.add(&r.bm25, gold);
            vector.add(&r.vector, gold);
            let fused = hybrid::fuse(&r.bm25, &r.vector, Fusion::DEFAULT);
            hybrid_c.add(&fused, gold);
            if let Some(&(top, _)) = fused.first() {
                let held =
                    [held_in(index, q, &index.bm25_section_order(top, &q.question)?), held_in(index, q, &index.passage_section_order(top, &q.question)?)];
                let page_first = Some(top) == gold;
                sections.add(page_first, &held);
                if let Some(g) = gold {
                    by_page.entry(g).or_default().add(page_first, &held);
                }
            }
            for ((_, f), c) in variants.iter().zip(fus.iter_mut()) {
                c.add(&hybrid::fuse(&r.bm25, &r.vector, *f), gold);
            }
        }
        done += chunk.len();
        progress(done);
    }
    let n = questions.len();
    let mut articles: Vec<ArticleRecall> = by_page
        .into_iter()
        .map(|(page, c)| {
            let (characters, count) = index.page_size(page);
            ArticleRecall {
                page: index.page_id(page).to_string(),
                characters,
                sections: count,
                questions: c.questions,
                page_at1: c.page_at1 as f64 / c.questions as f64,
                section: c.recall(),
            }
        })
        .collect();
    articles.sort_by(|a, b| b.characters.cmp(&a.characters).then(a.page.cmp(&b.page)));
    Ok(RetrievalReport {
        questions: n,
        modes: vec![bm25.recall("bm25".into(), n), vector.recall("vector".into(), n), hybrid_c.recall("hybrid".into(), n)],
        fusions: variants.iter().zip(fus).map(|((name, _), c)| c.recall(name.clone(), n)).collect(),
        sections: SectionCounter { questions: n, ..sections }.recall(),
        articles,
    })
}
