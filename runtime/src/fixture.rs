//! A tiny in-memory corpus behind the [`ToolHost`] trait: a test fixture and the benchmark's tools, so
//! that measurements of the sandbox do not include the search index. Not the product: the real tools
//! are served by `agentrt-search`.

use crate::tool_host::{PageHit, PassageHit, SectionRef, ToolFailure, ToolHost};

/// Three short pages with two sections each; search scores by counting query words in the title and
/// text, and a passage (a section's text cut at ". ") by counting them in it, from every page or one.
pub struct FixtureTools {
    pages: Vec<FixturePage>,
}

/// A page: its id, title and sections, each `[section id, heading, text]`.
#[derive(serde::Deserialize)]
struct FixturePage {
    id: String,
    title: String,
    sections: Vec<(String, String, String)>,
}

/// The corpus, as JSON: what [`FixtureTools::default`] reads and what the Python peer embeds.
const CORPUS: &str = include_str!("fixture_corpus.json");

impl Default for FixtureTools {
    fn default() -> Self {
        Self { pages: serde_json::from_str(CORPUS).expect("the embedded fixture corpus is valid JSON of pages") }
    }
}

impl FixtureTools {
    fn page(&self, page_id: &str) -> Result<&FixturePage, ToolFailure> {
        self.pages.iter().find(|p| p.id == page_id).ok_or_else(|| ToolFailure::NotFound(format!("no page with id `{page_id}`")))
    }

    /// The same corpus and the same four tools as plain Python functions, for the benchmark's peer:
    /// a program that runs here runs there unchanged.
    pub fn python_source(&self) -> String {
        let pages = CORPUS.trim();
        format!(
            r#"import json
PAGES = json.loads({pages:?})
def search_pages(query, k=5):
    words = query.lower().split()
    hits = []
    for p in PAGES:
        text = (p["title"] + " " + " ".join(s[2] for s in p["sections"])).lower()
        score = float(sum(1 for w in words if w in text))
        if score > 0:
            best = max(p["sections"], key=lambda s: sum(1 for w in words if w in s[2].lower()))
            hits.append({{"page_id": p["id"], "title": p["title"], "score": score, "section_id": best[0]}})
    hits.sort(key=lambda h: (-h["score"], h["page_id"]))
    return hits[:k]
def search_passages(query, page_id=None, k=10):
    words = query.lower().split()
    if page_id is not None and not any(p["id"] == page_id for p in PAGES):
        raise LookupError("search_passages: no page with id " + page_id)
    found = []
    for p in PAGES:
        if page_id is None or p["id"] == page_id:
            for s in p["sections"]:
                for sentence in s[2].split(". "):
                    score = float(sum(1 for w in words if w in sentence.lower()))
                    if score > 0:
                        found.append({{"page_id": p["id"], "section_id": s[0], "text": sentence, "score": score}})
    found.sort(key=lambda f: -f["score"])
    return found[:k]
def view_sections(page_id):
    for p in PAGES:
        if p["id"] == page_id:
            return [{{"section_id": s[0], "title": s[1]}} for s in p["sections"]]
    raise LookupError("view_sections: no page with id " + page_id)
def read_section(section_id):
    for p in PAGES:
        for s in p["sections"]:
            if s[0] == section_id:
                return s[2]
    raise LookupError("read_section: no section with id " + section_id)
"#
        )
    }
}

#[async_trait::async_trait]
impl ToolHost for FixtureTools {
    async fn search_pages(&self, query: &str, k: usize) -> Result<Vec<PageHit>, ToolFailure> {
        if query.trim().is_empty() {
            return Err(ToolFailure::BadArgument("the query is empty".into()));
        }
        let words: Vec<String> = query.to_lowercase().split_whitespace().map(String::from).collect();
        let mut hits: Vec<PageHit> = self
            .pages
            .iter()
            .map(|page| {
                let text = format!("{} {}", page.title, page.sections.iter().map(|s| s.2.as_str()).collect::<Vec<_>>().join(" ")).to_lowercase();
                let score = words.iter().filter(|w| text.contains(w.as_str())).count() as f32;
                // The section holding most of the query's words; the first of equals (as Python's max).
                let matches = |s: &(String, String, String)| words.iter().filter(|w| s.2.to_lowercase().contains(w.as_str())).count();
                // `max_by_key` keeps the last of equals, so it runs over the sections in reverse.
                let best = page.sections.iter().rev().max_by_key(|s| matches(s));
                let section_id = best.map(|s| s.0.clone()).unwrap_or_default();
                PageHit { page_id: page.id.clone(), title: page.title.clone(), score, section_id }
            })
            .filter(|hit| hit.score > 0.0)
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.page_id.cmp(&b.page_id)));
        hits.truncate(k);
        Ok(hits)
    }

    async fn search_passages(&self, query: &str, page_id: Option<&str>, k: usize) -> Result<Vec<PassageHit>, ToolFailure> {
        if query.trim().is_empty() {
            return Err(ToolFailure::BadArgument("the query is empty".into()));
        }
        let pages: Vec<&FixturePage> = match page_id {
            Some(id) => vec![self.page(id)?],
            None => self.pages.iter().collect(),
        };
        let words: Vec<String> = query.to_lowercase().split_whitespace().map(String::from).collect();
        let mut found: Vec<PassageHit> = pages
            .into_iter()
            .flat_map(|page| page.sections.iter().map(move |s| (page, s)))
            .flat_map(|(page, s)| s.2.split(". ").map(move |sentence| (page, s, sentence)))
            .map(|(page, s, sentence)| {
                let score = words.iter().filter(|w| sentence.to_lowercase().contains(w.as_str())).count() as f32;
                PassageHit { page_id: page.id.clone(), section_id: s.0.clone(), text: sentence.to_string(), score }
            })
            .filter(|p| p.score > 0.0)
            .collect();
        // A stable sort: equals stay in reading order, as Python's sort keeps them.
        found.sort_by(|a, b| b.score.total_cmp(&a.score));
        found.truncate(k);
        Ok(found)
    }

    async fn view_sections(&self, page_id: &str) -> Result<Vec<SectionRef>, ToolFailure> {
        let page = self.page(page_id)?;
        Ok(page.sections.iter().map(|s| SectionRef { section_id: s.0.clone(), title: s.1.clone() }).collect())
    }

    async fn read_section(&self, section_id: &str) -> Result<String, ToolFailure> {
        self.pages
            .iter()
            .flat_map(|p| &p.sections)
            .find(|s| s.0 == section_id)
            .map(|s| s.2.clone())
            .ok_or_else(|| ToolFailure::NotFound(format!("no section with id `{section_id}`")))
    }
}
