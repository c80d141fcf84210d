//! What the wiki tools return, as the `types` interface of `wit/agentrt-tools.wit` declares it: one home for
//! the two records that cross from the search index (`agentrt-search`, which finds them) through the tool
//! host (`agentrt-runtime`, which hands them to a program) without either crate depending on the other.

use serde::Serialize;

/// One page found by `search_pages`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PageHit {
    /// The id to pass to `view_sections`.
    pub page_id: String,
    /// The page's title.
    pub title: String,
    /// Higher is better; the scale depends on the search mode.
    pub score: f32,
    /// The page's section that matched the query best (the id to pass to `read_section`), so a program
    /// can read the passage that made the page a hit without listing the page's sections first.
    pub section_id: String,
}

/// One section of a page, as `view_sections` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SectionRef {
    /// The id to pass to `read_section` (`page_id:slug`).
    pub section_id: String,
    /// The section's heading, or its first words.
    pub title: String,
}

/// One passage, as `search_passages` ranks them: a sentence holding some of the query's words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassageHit {
    /// The page the sentence is in.
    pub page_id: String,
    /// The section the sentence is in (the id to pass to `read_section` for the whole section).
    pub section_id: String,
    /// The sentence.
    pub text: String,
    /// Higher is better: the query's words it holds, weighed by how rare they are in the corpus and in
    /// the page.
    pub score: f32,
}
