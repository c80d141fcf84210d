//! Who receives (storage): the pages and sections behind `view_sections` and `read_section`.
//!
//! One JSON file, `sections.json`, loaded whole at open (about 8 MB for the bundled corpus): section
//! `i` is row `i` of the vectors file and the document whose `ord` fast field is `i` in tantivy.

use crate::error::SearchError;
use crate::sections::Section;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The catalog's file name inside a generation directory.
pub const CATALOG_FILE: &str = "sections.json";

/// One page in the catalog: its sections are `first..first + count`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PageEntry {
    /// Page id.
    pub id: String,
    /// Page title.
    pub title: String,
    /// Index of the page's first section.
    pub first: usize,
    /// Number of sections.
    pub count: usize,
}

/// One section in the catalog.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SectionEntry {
    /// `page_id:slug`.
    pub id: String,
    /// Index of the page in [`Catalog::pages`].
    pub page: usize,
    /// Heading or first words.
    pub title: String,
    /// The text `read_section` returns.
    pub text: String,
}

/// All pages and sections, with lookups by id.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Catalog {
    /// Pages in corpus order.
    pub pages: Vec<PageEntry>,
    /// Sections, page by page, in page order.
    pub sections: Vec<SectionEntry>,
    #[serde(skip)]
    page_by_id: HashMap<String, usize>,
    #[serde(skip)]
    section_by_id: HashMap<String, usize>,
}

impl Catalog {
    /// Build from pages and their sections.
    pub fn new(pages: Vec<(String, String, Vec<Section>)>) -> Self {
        let mut c = Catalog::default();
        for (id, title, secs) in pages {
            let page = c.pages.len();
            c.pages.push(PageEntry { id, title, first: c.sections.len(), count: secs.len() });
            for s in secs {
                c.sections.push(SectionEntry { id: s.id, page, title: s.title, text: s.text });
            }
        }
        c.reindex();
        c
    }

    /// Parse the catalog file's bytes.
    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        let mut c: Catalog = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        for p in &c.pages {
            if p.first + p.count > c.sections.len() {
                return Err(format!("page {} points past the last section", p.id));
            }
        }
        if c.sections.iter().any(|s| s.page >= c.pages.len()) {
            return Err("a section points past the last page".into());
        }
        c.reindex();
        Ok(c)
    }

    fn reindex(&mut self) {
        self.page_by_id = self.pages.iter().enumerate().map(|(i, p)| (p.id.clone(), i)).collect();
        self.section_by_id = self.sections.iter().enumerate().map(|(i, s)| (s.id.clone(), i)).collect();
    }

    /// Index of a page by id.
    pub fn page(&self, id: &str) -> Result<usize, SearchError> {
        self.page_by_id.get(id).copied().ok_or_else(|| SearchError::UnknownPage(id.to_string()))
    }

    /// Index of a section by id.
    pub fn section(&self, id: &str) -> Result<usize, SearchError> {
        self.section_by_id.get(id).copied().ok_or_else(|| SearchError::UnknownSection(id.to_string()))
    }
}
