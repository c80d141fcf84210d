//! A tiny in-memory corpus behind the [`ToolHost`] trait: a test fixture and the benchmark's tools, so
//! that measurements of the sandbox do not include the search index. Not the product: the real tools
//! are served by `agentrt-search`.

use crate::tool_host::{PageHit, SectionRef, ToolFailure, ToolHost};

/// Three short pages with two sections each; search scores by counting query words in the title and
/// text.
pub struct FixtureTools {
    pages: Vec<FixturePage>,
}

struct FixturePage {
    id: &'static str,
    title: &'static str,
    sections: Vec<(&'static str, &'static str, &'static str)>,
}

/// The pages: (id, title).
const PAGES: [(&str, &str); 3] = [("denver_broncos", "Denver Broncos"), ("paris", "Paris"), ("oxygen", "Oxygen")];

/// The sections: (id `page:slug`, heading, text), each under the page its id starts with.
const SECTIONS: [(&str, &str, &str); 6] = [
    ("denver_broncos:summary", "Summary", "The Denver Broncos are a professional American football team based in Denver, Colorado."),
    ("denver_broncos:super-bowl-50", "Super Bowl 50", "The Broncos defeated the Carolina Panthers 24-10 in Super Bowl 50 on February 7, 2016."),
    ("paris:summary", "Summary", "Paris is the capital and most populous city of France."),
    ("paris:history", "History", "The Parisii, a sub-tribe of the Celtic Senones, inhabited the Paris area from around 250 BC."),
    ("oxygen:summary", "Summary", "Oxygen is a chemical element with symbol O and atomic number 8."),
    ("oxygen:discovery", "Discovery", "Oxygen was discovered by Carl Wilhelm Scheele and Joseph Priestley in the 1770s."),
];

impl Default for FixtureTools {
    fn default() -> Self {
        let pages = PAGES
            .iter()
            .map(|&(id, title)| FixturePage { id, title, sections: SECTIONS.iter().copied().filter(|s| s.0.split(':').next() == Some(id)).collect() })
            .collect();
        Self { pages }
    }
}

impl FixtureTools {
    /// The same corpus and the same three tools as plain Python functions, for the benchmark's peer:
    /// a program that runs here runs there unchanged.
    pub fn python_source(&self) -> String {
        let pages: Vec<serde_json::Value> = self
            .pages
            .iter()
            .map(|p| {
                serde_json::json!({
                    "id": p.id,
                    "title": p.title,
                    "sections": p.sections.iter().map(|s| serde_json::json!([s.0, s.1, s.2])).collect::<Vec<_>>(),
                })
            })
            .collect();
        let pages = serde_json::to_string(&pages).expect("fixture pages serialise");
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
                let text = format!("{} {}", page.title, page.sections.iter().map(|s| s.2).collect::<Vec<_>>().join(" ")).to_lowercase();
                let score = words.iter().filter(|w| text.contains(w.as_str())).count() as f32;
                // The section holding most of the query's words; the first of equals (as Python's max).
                let matches = |s: &(&str, &str, &str)| words.iter().filter(|w| s.2.to_lowercase().contains(w.as_str())).count();
                // `max_by_key` keeps the last of equals, so it runs over the sections in reverse.
                let best = page.sections.iter().rev().max_by_key(|s| matches(s));
                let section_id = best.map(|s| s.0).unwrap_or_default().into();
                PageHit { page_id: page.id.into(), title: page.title.into(), score, section_id }
            })
            .filter(|hit| hit.score > 0.0)
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.page_id.cmp(&b.page_id)));
        hits.truncate(k);
        Ok(hits)
    }

    async fn view_sections(&self, page_id: &str) -> Result<Vec<SectionRef>, ToolFailure> {
        let page = self.pages.iter().find(|p| p.id == page_id).ok_or_else(|| ToolFailure::NotFound(format!("no page with id `{page_id}`")))?;
        Ok(page.sections.iter().map(|s| SectionRef { section_id: s.0.into(), title: s.1.into() }).collect())
    }

    async fn read_section(&self, section_id: &str) -> Result<String, ToolFailure> {
        self.pages
            .iter()
            .flat_map(|p| &p.sections)
            .find(|s| s.0 == section_id)
            .map(|s| s.2.to_string())
            .ok_or_else(|| ToolFailure::NotFound(format!("no section with id `{section_id}`")))
    }
}
