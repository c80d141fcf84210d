//! Who matches (part three): tantivy BM25 over sections, with an English analyzer.
//!
//! Documents are sections. Fields: `ord` (u64 fast field: the section's row in the catalog and in the
//! vectors file) and `body`, analysed by `SimpleTokenizer → RemoveLong → LowerCaser → StopWords(en) →
//! Stemmer(en)`. Queries are natural-language questions, so they are not parsed as tantivy query syntax (a
//! `?` or a quote would be an error): the query is run through the same analyzer and every term becomes a
//! SHOULD clause over the body.
//!
//! Why the body alone: the index had `page_title` (boosted 2x) and `title` (a chunk's first words) fields
//! too. On this corpus ten thousand short lead pages are titled by the common nouns questions hold
//! ("Oil", "Price"), so the boosted title match buried the long articles: BM25 recall@1 over the 952 dev
//! questions was 0.551 with both fields, 0.905 with the section title alone and 0.871 with the body
//! alone (1,500-character sections), and the best section it picked inside the right page held a gold
//! answer in 20 points more of the train questions without them. A chunk's title is its first words, so
//! it only counted them twice; a heading's words are in the page's text anyway.

use crate::catalog::Catalog;
use crate::error::SearchError;
use std::collections::HashSet;
use std::path::Path;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer};
use tantivy::{Index, IndexReader, ReloadPolicy, TantivyDocument, Term};

/// The tantivy directory's name inside a generation directory.
pub const TANTIVY_DIR: &str = "tantivy";
const ANALYZER: &str = "en_stem";

fn analyzer() -> TextAnalyzer {
    let mut b = TextAnalyzer::builder(SimpleTokenizer::default()).filter(RemoveLongFilter::limit(40)).filter(LowerCaser).dynamic();
    if let Some(stop) = StopWordFilter::new(Language::English) {
        b = b.filter_dynamic(stop);
    }
    b.filter_dynamic(Stemmer::new(Language::English)).build()
}

struct Fields {
    ord: Field,
    body: Field,
}

fn schema() -> (Schema, Fields) {
    let mut sb = Schema::builder();
    let text = TextOptions::default().set_indexing_options(TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs));
    let ord = sb.add_u64_field("ord", NumericOptions::default().set_fast());
    let body = sb.add_text_field("body", text);
    (sb.build(), Fields { ord, body })
}

/// Write a tantivy index of every section of `catalog` into `dir` (which must exist and be empty).
pub fn build(dir: &Path, catalog: &Catalog) -> Result<(), SearchError> {
    let (schema, f) = schema();
    let index = Index::create_in_dir(dir, schema)?;
    index.tokenizers().register(ANALYZER, analyzer());
    let mut writer: tantivy::IndexWriter<TantivyDocument> = index.writer_with_num_threads(1, 100_000_000)?;
    for (i, s) in catalog.sections.iter().enumerate() {
        let mut doc = TantivyDocument::default();
        doc.add_u64(f.ord, i as u64);
        doc.add_text(f.body, &s.text);
        writer.add_document(doc)?;
    }
    writer.commit()?;
    writer.wait_merging_threads()?;
    Ok(())
}

/// An open BM25 index: `Send + Sync`.
pub struct Bm25 {
    index: Index,
    reader: IndexReader,
    fields: Fields,
}

impl Bm25 {
    /// Open the tantivy index in `dir`.
    pub fn open(dir: &Path) -> Result<Self, SearchError> {
        let index = Index::open_in_dir(dir)?;
        index.tokenizers().register(ANALYZER, analyzer());
        let (_, fields) = schema();
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        Ok(Bm25 { index, reader, fields })
    }

    /// Number of documents (sections).
    pub fn num_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// The analysed terms of a query, deduplicated, in order.
    pub fn terms(&self, query: &str) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        self.each_term(query, |t| {
            if seen.insert(t.clone()) {
                out.push(t);
            }
        });
        out
    }

    /// The distinct analysed terms of a text (for scoring it against a query's [`Bm25::terms`]).
    pub fn term_set(&self, text: &str) -> HashSet<String> {
        let mut out = HashSet::new();
        self.each_term(text, |t| {
            out.insert(t);
        });
        out
    }

    /// Every analysed term of `text`, in order, repeats included.
    fn each_term(&self, text: &str, mut each: impl FnMut(String)) {
        let mut analyzer = self.index.tokenizers().get(ANALYZER).unwrap_or_else(analyzer);
        let mut stream = analyzer.token_stream(text);
        while stream.advance() {
            each(stream.token().text.clone());
        }
    }

    /// BM25's idf of an analysed term over every section ([`crate::passages::idf`]).
    pub fn corpus_idf(&self, term: &str) -> Result<f32, SearchError> {
        let searcher = self.reader.searcher();
        let df = searcher.doc_freq(&Term::from_field_text(self.fields.body, term))?;
        Ok(crate::passages::idf(searcher.num_docs() as usize, df as usize))
    }

    /// The best `k` sections for `query`: (section row, BM25 score), best first.
    pub fn top_k(&self, query: &str, k: usize) -> Result<Vec<(usize, f32)>, SearchError> {
        let terms = self.terms(query);
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let clauses: Vec<(Occur, Box<dyn Query>)> = terms
            .iter()
            .map(|t| (Occur::Should, Box::new(TermQuery::new(Term::from_field_text(self.fields.body, t), IndexRecordOption::WithFreqs)) as Box<dyn Query>))
            .collect();
        let query = BooleanQuery::new(clauses);
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(k))?;
        let mut out = Vec::with_capacity(top.len());
        let mut columns = Vec::new();
        for seg in searcher.segment_readers() {
            columns.push(seg.fast_fields().u64("ord")?);
        }
        for (score, addr) in top {
            let ord = columns
                .get(addr.segment_ord as usize)
                .and_then(|c| c.first(addr.doc_id))
                .ok_or_else(|| SearchError::Embedder("tantivy document without ord".into()))?;
            out.push((ord as usize, score));
        }
        Ok(out)
    }
}
