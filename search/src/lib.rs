//! The search behind the wiki tools: `search_pages(query)`, `search_passages(query, page_id, k)`,
//! `view_sections(page_id)`, `read_section(section_id)`.
//!
//! The design in three parts:
//! - **who reads**: [`ingest`] reads a pages file (JSON Lines or Parquet with `id`, `title`, `content`;
//!   errors name file and line), [`questions`] reads a questions file (the one reader of them: retrieval
//!   evaluation and every episode command use it; errors name file, line and field), and [`sections`] cuts each page's markdown into sections: headings make
//!   sections, and long heading-less text (the 48 full articles) is cut into paragraph groups of at most
//!   800 characters (about one paragraph). Section ids are `page_id:slug`, readable and stable.
//! - **who matches**: [`bm25`] (tantivy, English stemming, sections' bodies as documents) and
//!   [`vectors`] (all-MiniLM-L6-v2 vectors from [`embedder`]; an exhaustive int8 scan of every section)
//!   each rank sections; [`hybrid`] groups section hits into pages (a page scores its best section) and
//!   fuses the two page rankings by a weighted sum of normalised scores (BM25 at one half), and each hit
//!   names its page's best section (`section_id`: BM25's best section of that page); reciprocal rank
//!   fusion is measured beside it by `agentrt eval retrieval`. A query is embedded by a three-layer
//!   encoder distilled from MiniLM for queries ([`query_encoder`]; the sections by the full six layers).
//!   On the 952 dev questions (full corpus: 10,052 pages, 13,537 sections), recall@1/5/10 of the gold
//!   page: BM25 0.921/0.984/0.991; vectors 0.780/0.919/0.940 with distilled queries, 0.799/0.938/0.958
//!   with full ones; hybrid 0.926/0.987/0.994 distilled, 0.938/0.991/0.995 full (RRF: 0.895/0.967/0.979).
//!   On the 7,361 train questions: BM25 0.874/0.958/0.975, hybrid 0.911/0.979/0.988. The best section
//!   of the top hit holds a gold answer for 83.1% of the dev questions and 74.9% of 1,000 train ones.
//!   Inside a page, [`passages`] ranks sentences for `search_passages`: the query's words weighed by their
//!   rarity in the corpus times their rarity in the page (a long article's name is in every section and
//!   decides nothing there), pooled over the fifteen best pages when no page is named.
//! - **who receives**: [`WikiIndex`] opens an index directory in milliseconds, checking the
//!   [`manifest`] and the checksums of what it loads, and answers the four tools; an unknown id is a
//!   typed error whose message names the id, which the model sees as a tool error. [`build_index`]
//!   writes a new generation beside the old one and switches over atomically, so a killed build leaves
//!   the previous index in service, and a re-run on unchanged inputs does nothing.
//!
//! Why our own encoder rather than candle's BERT or fastembed/ONNX Runtime: a search is one short
//! query, and its latency is the encoder's. candle's BERT spent ~22 ms on a 15-word-piece query (most of
//! it packing weights for a general matrix product); [`int8_bert`] lays the weights out once as int8
//! and runs each layer as AMX tile products (AVX-512 VNNI, or plain Rust, where the CPU lacks them),
//! about 1-2 ms a query, within cosine 0.99 of the f32 vector; 0.6-0.8 ms through the distilled query
//! encoder, which was trained into the full model's vector space (cosine 0.89 to its vectors on dev
//! questions). It needs no native library to ship or find at run time (fastembed's ONNX Runtime would);
//! the bundled corpus embeds in one and a half minutes on two cores.

pub mod bm25;
pub mod catalog;
pub mod embedder;
pub mod error;
pub mod eval;
pub mod hybrid;
pub mod index;
pub mod ingest;
pub mod int8;
pub mod int8_bert;
pub mod json_lines;
pub mod lanes;
pub mod manifest;
pub mod passages;
pub mod query_encoder;
pub mod questions;
pub mod sections;
pub mod vectors;

pub use embedder::{Embedder, ModelId};
pub use error::SearchError;
pub use eval::{evaluate, Recall, RetrievalReport};
pub use hybrid::{Fusion, SearchMode};
pub use index::{build_index, BuildOptions, BuildOutcome, PageHit, PassageHit, Progress, Rankings, SectionRef, WikiIndex};
pub use ingest::{read_pages, Corpus, Page};
pub use query_encoder::QueryEncoder;
pub use questions::{read_questions, Question, DEFAULT_QUESTIONS_FILE};
pub use sections::{split_page, ChunkParams, Section};

/// The directory `agentrt index` writes and every other command opens by default:
/// `$AGENTRT_CACHE/index` (see `agentrt_assets::cache_root`).
pub fn default_index_dir() -> std::path::PathBuf {
    agentrt_assets::cache_root().join("index")
}

impl std::str::FromStr for SearchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "bm25" => Ok(SearchMode::Bm25),
            "vector" | "vectors" => Ok(SearchMode::Vector),
            "hybrid" => Ok(SearchMode::Hybrid),
            other => Err(format!("unknown search mode {other:?} (bm25, vector, hybrid)")),
        }
    }
}

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn wiki_index_is_send_and_sync() {
        assert_send_sync::<crate::WikiIndex>();
    }
}
