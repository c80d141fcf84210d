//! Who receives: [`WikiIndex`] (open, search, view, read) and [`build_index`].
//!
//! On disk, `dir/CURRENT` names the live generation directory `dir/gen-…`, which holds `manifest.json`,
//! `sections.json`, `vectors.f32` and `tantivy/`. A build writes a fresh `dir/.building-<pid>`, renames
//! it to a new `gen-…` when complete, and only then replaces `CURRENT` (write to a temporary file, then
//! rename: atomic). Killing a build at any point therefore leaves the previous index in service; its
//! leftovers are swept by the next build.

use crate::bm25::{self, Bm25, TANTIVY_DIR};
use crate::catalog::{Catalog, CATALOG_FILE};
use crate::embedder::{Embedder, ModelId, DIM};
use crate::error::SearchError;
use crate::hybrid::{self, Fusion, SearchMode};
use crate::ingest;
use crate::manifest::{FileSum, Inputs, Manifest, FORMAT_VERSION, MANIFEST_FILE};
use crate::passages::AnalyzedPage;
use crate::query_encoder::QueryEncoder;
use crate::sections::{self, ChunkParams};
use crate::vectors::{VectorStore, VECTORS_FILE};
pub use agentrt_tool_types::{PageHit, PassageHit, SectionRef};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The file in the index directory that names the live generation.
pub const CURRENT_FILE: &str = "CURRENT";
/// How many section hits each ranking looks at before grouping into pages.
const SECTION_CANDIDATES: usize = 300;

/// Knobs of `build_index`.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// How sections are cut.
    pub chunking: ChunkParams,
    /// Rebuild even when the index is up to date.
    pub force: bool,
    /// Sections embedded between two progress reports (each section is encoded alone, one per core; the
    /// cores wait for each other at every report, so not too few).
    pub batch_size: usize,
    /// Directory of the embedding model; `None` fetches all-MiniLM-L6-v2 through `agentrt_assets`.
    pub model_dir: Option<PathBuf>,
    /// Section texts are truncated at this many word pieces before embedding.
    pub max_tokens: usize,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions { chunking: ChunkParams::default(), force: false, batch_size: 256, model_dir: None, max_tokens: crate::embedder::SECTION_TOKENS }
    }
}

/// What `build_index` did.
#[derive(Debug, Clone, PartialEq)]
pub enum BuildOutcome {
    /// The index on disk was built from the same inputs and is intact; nothing was done.
    UpToDate,
    /// A new index was built and put in service.
    Built {
        /// Why: "no index yet", or what changed.
        reason: String,
        /// Pages indexed.
        pages: usize,
        /// Sections indexed.
        sections: usize,
        /// Wall time of the build in seconds.
        seconds: f64,
    },
}

/// What `build_index` reports while it works.
#[derive(Debug, Clone)]
pub enum Progress {
    /// A new stage started (reading, splitting, full-text, writing).
    Stage(String),
    /// Embedding: `done` of `total` sections.
    Embedding {
        /// Sections embedded so far.
        done: usize,
        /// Sections to embed in all.
        total: usize,
    },
}

/// The search index, open: `Send + Sync`, cheap to share behind an `Arc`.
pub struct WikiIndex {
    dir: PathBuf,
    manifest: Manifest,
    catalog: Catalog,
    vectors: VectorStore,
    bm25: Bm25,
    embedder: OnceLock<Result<Arc<Embedder>, String>>,
    /// The encoder queries go through (sections went through the full model).
    query_encoder: QueryEncoder,
    /// Query vectors already computed: a GRPO group asks the same question many times and the policy
    /// often repeats its queries. Bounded; cleared whole when full.
    query_cache: std::sync::Mutex<std::collections::HashMap<String, Arc<Vec<f32>>>>,
    /// Pages cut into sentences and analysed for `search_passages`: the same pages come back often
    /// (a group asks one question many times). Bounded; cleared whole when full.
    page_cache: std::sync::Mutex<HashMap<usize, Arc<AnalyzedPage>>>,
}

/// A query's pages as (page row, score), best first, and each page's best section row.
type RankedRows = (Vec<(usize, f32)>, HashMap<usize, usize>);

/// Most query vectors kept in [`WikiIndex`]'s cache.
const QUERY_CACHE_SIZE: usize = 4096;
/// Most analysed pages kept in [`WikiIndex`]'s cache.
const PAGE_CACHE_SIZE: usize = 2048;
/// The best pages whose passages `search_passages` pools when not given a page (over the train and dev
/// questions, the find program's ceiling is 92.2% with 15, 92.1% with 10, 91.3% with 3 in a prototype).
pub const PASSAGE_PAGES: usize = 15;
/// The power of a page's `search_pages` score that scales its passages' scores in the pool: a passage
/// of a page that matched the question well beats a slightly better passage of a weaker page.
pub const PAGE_SCORE_POWER: i32 = 4;

impl std::fmt::Debug for WikiIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WikiIndex").field("dir", &self.dir).field("pages", &self.catalog.pages.len()).field("sections", &self.catalog.sections.len()).finish()
    }
}

/// The rankings of one query before fusion: page index and score, best first.
#[derive(Debug, Clone)]
pub struct Rankings {
    /// BM25 pages.
    pub bm25: Vec<(usize, f32)>,
    /// Vector pages.
    pub vector: Vec<(usize, f32)>,
}

fn generation_dir(dir: &Path) -> Result<PathBuf, SearchError> {
    let current = dir.join(CURRENT_FILE);
    let name = std::fs::read_to_string(&current).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            SearchError::bad_index(dir, "no index has been built there".to_string())
        } else {
            SearchError::bad_index(dir, format!("cannot read {}: {e}", current.display()))
        }
    })?;
    let name = name.trim();
    if name.is_empty() || name.contains('/') || name.contains("..") {
        return Err(SearchError::bad_index(dir, format!("{} is garbled", current.display())));
    }
    Ok(dir.join(name))
}

impl WikiIndex {
    /// Open the index in `dir` (as written by [`build_index`]), checking manifest and checksums; queries
    /// go through the default [`QueryEncoder`].
    pub fn open(dir: &Path) -> Result<Self, SearchError> {
        Self::open_with(dir, QueryEncoder::default())
    }

    /// As [`WikiIndex::open`], queries embedded by `queries`. The catalog, the vectors and the query
    /// encoder load on threads of their own (they are independent, and a process that searches once,
    /// like `agentrt exec`, waits for all three before its first result). The encoder's failure (say, a
    /// model that cannot be fetched) is kept and reported by the first vector search, as before.
    pub fn open_with(dir: &Path, queries: QueryEncoder) -> Result<Self, SearchError> {
        let gen = generation_dir(dir)?;
        let manifest = Manifest::read(&gen)?;
        let bad = |reason: String| SearchError::bad_index(dir, reason);
        let read = |name: &str| -> Result<Vec<u8>, SearchError> { std::fs::read(gen.join(name)).map_err(|e| bad(format!("cannot read {name}: {e}"))) };
        let (catalog, vectors, embedder) = std::thread::scope(|scope| {
            let embedder = scope.spawn(|| Embedder::minilm_with(queries).map(Arc::new).map_err(|e| e.to_string()));
            let vectors = scope.spawn(|| {
                let vec_bytes = read(VECTORS_FILE)?;
                manifest.check_file(dir, VECTORS_FILE, &vec_bytes)?;
                VectorStore::from_bytes(manifest.inputs.model.dim, &vec_bytes)
                    .ok_or_else(|| bad(format!("{VECTORS_FILE} is not a whole number of rows of finite values")))
            });
            let catalog = (|| {
                let cat_bytes = read(CATALOG_FILE)?;
                manifest.check_file(dir, CATALOG_FILE, &cat_bytes)?;
                Catalog::from_json(&cat_bytes).map_err(|e| bad(format!("{CATALOG_FILE}: {e}")))
            })();
            let joined = |what: &str| SearchError::bad_index(dir, format!("loading {what} panicked"));
            let vectors = vectors.join().map_err(|_| joined(VECTORS_FILE)).and_then(|v| v);
            let embedder = embedder.join().unwrap_or_else(|_| Err("loading the query encoder panicked".to_string()));
            (catalog, vectors, embedder)
        });
        let (catalog, vectors) = (catalog?, vectors?);
        if vectors.len() != catalog.sections.len() || manifest.sections != catalog.sections.len() {
            return Err(bad(format!("{} vectors for {} sections (manifest: {})", vectors.len(), catalog.sections.len(), manifest.sections)));
        }
        let bm25 = Bm25::open(&gen.join(TANTIVY_DIR)).map_err(|e| bad(format!("full-text index: {e}")))?;
        if bm25.num_docs() as usize != catalog.sections.len() {
            return Err(bad(format!("full-text index has {} documents for {} sections", bm25.num_docs(), catalog.sections.len())));
        }
        if !manifest.inputs.model.same_space(&ModelId::minilm()) {
            return Err(bad(format!(
                "it was built with embedding model {} ({}), this agentrt uses {}",
                manifest.inputs.model.name,
                manifest.inputs.model.wheel_sha256,
                ModelId::minilm().name
            )));
        }
        Ok(WikiIndex {
            dir: dir.to_path_buf(),
            manifest,
            catalog,
            vectors,
            bm25,
            embedder: OnceLock::from(embedder),
            query_encoder: queries,
            query_cache: Default::default(),
            page_cache: Default::default(),
        })
    }

    /// The manifest the index was built with.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The index directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of sections.
    pub fn num_sections(&self) -> usize {
        self.catalog.sections.len()
    }

    /// Index of a page id (as found in [`Rankings`]), if the corpus has it.
    pub fn page_index(&self, page_id: &str) -> Option<usize> {
        self.catalog.page(page_id).ok()
    }

    /// Page id of a page index (as found in [`Rankings`]).
    pub fn page_id(&self, page: usize) -> &str {
        &self.catalog.pages[page].id
    }

    /// Load the query embedder now rather than on the first vector search.
    pub fn warm_up(&self) -> Result<(), SearchError> {
        self.embedder().map(|_| ())
    }

    fn embedder(&self) -> Result<Arc<Embedder>, SearchError> {
        self.embedder.get_or_init(|| Embedder::minilm_with(self.query_encoder).map(Arc::new).map_err(|e| e.to_string())).clone().map_err(SearchError::Embedder)
    }

    /// Embed a query with the index's model (unit vector).
    pub fn embed_query(&self, query: &str) -> Result<Vec<f32>, SearchError> {
        if let Some(v) = self.query_cache.lock().ok().and_then(|c| c.get(query).cloned()) {
            return Ok(v.as_ref().clone());
        }
        let v = on_query_pool(|| self.embedder()?.embed_query(query))?;
        if let Ok(mut c) = self.query_cache.lock() {
            if c.len() >= QUERY_CACHE_SIZE {
                c.clear();
            }
            c.insert(query.to_string(), Arc::new(v.clone()));
        }
        Ok(v)
    }

    /// Forget cached query vectors (benchmarks measure cold queries).
    pub fn clear_query_cache(&self) {
        if let Ok(mut c) = self.query_cache.lock() {
            c.clear();
        }
    }

    /// Embed many queries (used by the evaluation): one by one, on the same encoder as `search_pages`, so
    /// that recall is measured on the vectors the tools see.
    pub fn embed_queries(&self, queries: &[String]) -> Result<Vec<Vec<f32>>, SearchError> {
        let embedder = self.embedder()?;
        on_query_pool(|| queries.iter().map(|q| embedder.embed_query(q)).collect())
    }

    /// BM25 section hits, best first.
    fn bm25_sections(&self, query: &str) -> Result<Vec<(usize, f32)>, SearchError> {
        self.bm25.top_k(query, SECTION_CANDIDATES)
    }

    /// Vector section hits for an already-embedded query, best first.
    fn vector_sections(&self, query_vec: &[f32]) -> Vec<(usize, f32)> {
        self.vectors.top_k(query_vec, SECTION_CANDIDATES)
    }

    /// BM25 page ranking.
    pub fn bm25_pages(&self, query: &str) -> Result<Vec<(usize, f32)>, SearchError> {
        Ok(hybrid::pages_from_sections(&self.bm25_sections(query)?, |s| self.catalog.sections[s].page))
    }

    /// Vector page ranking for an already-embedded query.
    pub fn vector_pages(&self, query_vec: &[f32]) -> Vec<(usize, f32)> {
        hybrid::pages_from_sections(&self.vector_sections(query_vec), |s| self.catalog.sections[s].page)
    }

    /// Both rankings of a query, with the query vector given (see [`WikiIndex::embed_queries`]).
    pub fn rankings_with_vector(&self, query: &str, query_vec: &[f32]) -> Result<Rankings, SearchError> {
        Ok(Rankings { bm25: self.bm25_pages(query)?, vector: self.vector_pages(query_vec) })
    }

    /// Turn page indices and scores into hits; `best_section` names each page's best section (a page
    /// absent from it gets its first section).
    fn hits(&self, ranked: &[(usize, f32)], k: usize, best_section: &HashMap<usize, usize>) -> Vec<PageHit> {
        ranked
            .iter()
            .take(k)
            .map(|&(p, score)| {
                let page = &self.catalog.pages[p];
                let section = best_section.get(&p).copied().unwrap_or(page.first);
                PageHit { page_id: page.id.clone(), title: page.title.clone(), score, section_id: self.catalog.sections[section].id.clone() }
            })
            .collect()
    }

    /// The `k` best pages for a natural-language query (hybrid ranking).
    pub fn search_pages(&self, query: &str, k: usize) -> Result<Vec<PageHit>, SearchError> {
        self.search_pages_with(query, k, SearchMode::Hybrid)
    }

    /// The `k` best pages for a query with one ranking: BM25, vectors, or both fused.
    pub fn search_pages_with(&self, query: &str, k: usize, mode: SearchMode) -> Result<Vec<PageHit>, SearchError> {
        self.search_pages_fused(query, k, mode, Fusion::DEFAULT)
    }

    /// [`WikiIndex::search_pages_with`] with an explicit fusion (for experiments).
    pub fn search_pages_fused(&self, query: &str, k: usize, mode: SearchMode, fusion: Fusion) -> Result<Vec<PageHit>, SearchError> {
        if query.trim().is_empty() {
            return Err(SearchError::EmptyQuery);
        }
        // One hand-off into the queries' own pool per query: called from outside it, the encoder's second
        // core and the two rankings' join would each be a separate hand-off to a sleeping worker. Not
        // rayon's global pool: a process that samples from a model runs each forward pass there as one
        // job, and a query queued behind a Qwen prefill chunk waited seconds, long enough for the sandbox's
        // 2 s wall-time limit to end the program that asked (3 of 100 evaluation episodes).
        on_query_pool(|| self.ranked_pages(query, k, mode, fusion))
    }

    /// [`WikiIndex::search_pages_fused`]'s ranking, on the thread it is called from.
    fn ranked_pages(&self, query: &str, k: usize, mode: SearchMode, fusion: Fusion) -> Result<Vec<PageHit>, SearchError> {
        let (ranked, best) = self.ranked_page_rows(query, mode, fusion)?;
        Ok(self.hits(&ranked, k, &best))
    }

    /// Every page a query's rankings reach, best first, and each page's best section.
    fn ranked_page_rows(&self, query: &str, mode: SearchMode, fusion: Fusion) -> Result<RankedRows, SearchError> {
        let page_of = |s: usize| self.catalog.sections[s].page;
        let (ranked, best) = match mode {
            SearchMode::Bm25 => {
                let sections = self.bm25_sections(query)?;
                (hybrid::pages_from_sections(&sections, page_of), hybrid::best_sections(&[&sections], page_of))
            }
            SearchMode::Vector => {
                let sections = self.vector_sections(&self.embed_query(query)?);
                (hybrid::pages_from_sections(&sections, page_of), hybrid::best_sections(&[&sections], page_of))
            }
            SearchMode::Hybrid => {
                // The query is embedded first, on both cores (the encoder lends its second core half of
                // each large layer); then the two rankings, independent, run side by side. Running BM25
                // beside the encoder instead kept that second core busy while the encoder needed it
                // (measured: p50 1.67 -> ~1.3 ms over the benchmark's 200 dev questions).
                let embedded = self.embed_query(query)?;
                let (bm25, vector) = rayon::join(|| self.bm25_sections(query), || self.vector_sections(&embedded));
                let bm25 = bm25?;
                let pages = hybrid::fuse(&hybrid::pages_from_sections(&bm25, page_of), &hybrid::pages_from_sections(&vector, page_of), fusion);
                // A page's best section is BM25's (a page only the vectors found takes theirs): on the
                // train questions, the section BM25 picks inside the right page held a gold answer 7.7
                // points more often than the one both rankings agreed on (the vectors read a section's
                // first 64 word pieces only).
                let mut best = hybrid::best_sections(&[&vector], page_of);
                best.extend(hybrid::best_sections(&[&bm25], page_of));
                (pages, best)
            }
        };
        Ok((ranked, best))
    }

    /// The `k` passages (sentences) that best answer `query`, best first: those of the page `page_id`,
    /// or, without one, those of the [`PASSAGE_PAGES`] best pages of `search_pages`, each passage's score
    /// times its page's score to the power [`PAGE_SCORE_POWER`]. A passage's own score is the query's
    /// words it holds, weighed by how rare they are in the corpus and in its page (see
    /// [`crate::passages`]). An empty query is an error, as for `search_pages`; a page holding none of
    /// its words gives none.
    pub fn search_passages(&self, query: &str, page_id: Option<&str>, k: usize) -> Result<Vec<PassageHit>, SearchError> {
        if query.trim().is_empty() {
            return Err(SearchError::EmptyQuery);
        }
        let pages: Vec<(usize, f32)> = match page_id {
            Some(id) => vec![(self.catalog.page(id.trim())?, 1.0)],
            None => {
                let (mut ranked, _) = on_query_pool(|| self.ranked_page_rows(query, SearchMode::Hybrid, Fusion::DEFAULT))?;
                ranked.truncate(PASSAGE_PAGES);
                ranked
            }
        };
        let terms = self.bm25.terms(query);
        let idf = self.corpus_idfs(&terms)?;
        // (score, page's rank, passage's rank in its page, page row, passage)
        let mut pooled = Vec::new();
        for (rank, &(page, page_score)) in pages.iter().enumerate() {
            let factor = if page_id.is_some() { 1.0 } else { page_score.max(0.0).powi(PAGE_SCORE_POWER) };
            for (i, p) in self.analyzed_page(page).rank(&terms, |t| idf[t]).into_iter().enumerate() {
                pooled.push((p.score * factor, rank, i, page, p));
            }
        }
        pooled.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        Ok(pooled
            .into_iter()
            .take(k)
            .map(|(score, _, _, page, p)| PassageHit {
                page_id: self.catalog.pages[page].id.clone(),
                section_id: self.catalog.sections[self.catalog.pages[page].first + p.section].id.clone(),
                text: p.text,
                score,
            })
            .collect())
    }

    /// Each term's idf over the whole corpus.
    fn corpus_idfs<'t>(&self, terms: &'t [String]) -> Result<HashMap<&'t str, f32>, SearchError> {
        terms.iter().map(|t| Ok((t.as_str(), self.bm25.corpus_idf(t)?))).collect()
    }

    /// A page's sentences, analysed: from the cache, or analysed now and kept.
    fn analyzed_page(&self, page: usize) -> Arc<AnalyzedPage> {
        if let Some(a) = self.page_cache.lock().ok().and_then(|c| c.get(&page).cloned()) {
            return a;
        }
        let texts: Vec<&str> = self.catalog.sections[self.page_rows(page)].iter().map(|s| s.text.as_str()).collect();
        let analyzed = Arc::new(AnalyzedPage::new(&self.catalog.pages[page].title, &texts, |text| self.bm25.term_set(text)));
        if let Ok(mut c) = self.page_cache.lock() {
            if c.len() >= PAGE_CACHE_SIZE {
                c.clear();
            }
            c.insert(page, analyzed.clone());
        }
        analyzed
    }

    /// The text of a section row.
    pub fn section_text(&self, section: usize) -> &str {
        &self.catalog.sections[section].text
    }

    /// A page's characters of text and number of sections.
    pub fn page_size(&self, page: usize) -> (usize, usize) {
        let rows = self.page_rows(page);
        (self.catalog.sections[rows.clone()].iter().map(|s| s.text.chars().count()).sum(), rows.len())
    }

    /// A page's section rows in the corpus BM25's order for `query` (the order `search_pages` picks a
    /// hit's section from); sections BM25 does not rank follow in reading order.
    pub fn bm25_section_order(&self, page: usize, query: &str) -> Result<Vec<usize>, SearchError> {
        let ranked = self.bm25_sections(query)?.into_iter().map(|(s, _)| s).filter(|&s| self.catalog.sections[s].page == page);
        Ok(with_the_rest(ranked, self.page_rows(page)))
    }

    /// A page's section rows ordered by their best passage for `query` (see [`WikiIndex::search_passages`]);
    /// sections with none follow in reading order.
    pub fn passage_section_order(&self, page: usize, query: &str) -> Result<Vec<usize>, SearchError> {
        let passages = self.search_passages(query, Some(&self.catalog.pages[page].id), usize::MAX)?;
        let ranked = passages.iter().map(|p| self.catalog.section(&p.section_id)).collect::<Result<Vec<_>, _>>()?;
        Ok(with_the_rest(ranked.into_iter(), self.page_rows(page)))
    }

    fn page_rows(&self, page: usize) -> std::ops::Range<usize> {
        let p = &self.catalog.pages[page];
        p.first..p.first + p.count
    }

    /// The sections of a page, in order, with their ids and titles.
    pub fn view_sections(&self, page_id: &str) -> Result<Vec<SectionRef>, SearchError> {
        let p = &self.catalog.pages[self.catalog.page(page_id.trim())?];
        Ok(self.catalog.sections[p.first..p.first + p.count].iter().map(|s| SectionRef { section_id: s.id.clone(), title: s.title.clone() }).collect())
    }

    /// The text of one section.
    pub fn read_section(&self, section_id: &str) -> Result<String, SearchError> {
        let s = self.catalog.section(section_id.trim())?;
        Ok(self.catalog.sections[s].text.clone())
    }
}

/// `ranked` without repeats, then the rows of `all` it lacks, in order.
fn with_the_rest(ranked: impl Iterator<Item = usize>, all: std::ops::Range<usize>) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    let mut order: Vec<usize> = ranked.filter(|&s| seen.insert(s)).collect();
    order.extend(all.filter(|s| !seen.contains(s)));
    order
}

/// The inputs a build from `corpus_sha256` with `opts` would record.
fn inputs_for(corpus_sha256: &str, opts: &BuildOptions) -> Inputs {
    Inputs {
        format_version: FORMAT_VERSION,
        corpus_sha256: corpus_sha256.to_string(),
        model: ModelId { max_tokens: opts.max_tokens, ..ModelId::minilm() },
        chunking: opts.chunking,
    }
}

/// The threads queries run on (named `agentrt-query-N`; as many as rayon's global pool has, by the same
/// rule: `RAYON_NUM_THREADS`, else the machine's cores), apart from that pool, which model forward passes
/// and index builds keep busy for seconds at a time.
fn query_pool() -> &'static rayon::ThreadPool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("agentrt-query-{i}"))
            .build()
            .expect("the query threads start (the OS refused to start a thread)")
    })
}

/// `f` on the query threads ([`query_pool`]): in place when called from one of them, else handed over once.
/// Every query's encoding runs there, through `search_pages` or on its own.
fn on_query_pool<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let pool = query_pool();
    if pool.current_thread_index().is_some() {
        f()
    } else {
        pool.install(f)
    }
}

/// Build the index of the pages file `pages` into `dir`, unless the index there is up to date.
///
/// Up to date means: it opens cleanly (checksums included) and was built from a pages file with the
/// same sha256, the same embedding model, chunking and format. Otherwise the reason is reported in
/// [`BuildOutcome::Built`]. The previous index stays in service until the new one is complete.
pub fn build_index(pages: &Path, dir: &Path, opts: &BuildOptions, progress: &mut dyn FnMut(Progress)) -> Result<BuildOutcome, SearchError> {
    let start = Instant::now();
    progress(Progress::Stage(format!("reading {}", pages.display())));
    let corpus_sha = ingest::file_sha256(pages)?;
    let want = inputs_for(&corpus_sha, opts);
    let reason = match generation_dir(dir).and_then(|g| Manifest::read(&g)) {
        Err(SearchError::BadIndex { reason, .. }) if reason == "no index has been built there" => "no index yet".to_string(),
        Err(e) => format!("the existing index is unusable ({e})"),
        Ok(old) => {
            let changes = want.changes_from(&old.inputs);
            if !changes.is_empty() {
                changes.join("; ")
            } else {
                match WikiIndex::open(dir) {
                    Err(e) => format!("the existing index is unusable ({e})"),
                    Ok(_) if opts.force => "--force".to_string(),
                    Ok(_) => return Ok(BuildOutcome::UpToDate),
                }
            }
        }
    };

    let corpus = ingest::read_pages(pages)?;
    progress(Progress::Stage(format!("splitting {} pages into sections", corpus.pages.len())));
    let mut split = Vec::with_capacity(corpus.pages.len());
    for p in &corpus.pages {
        let secs = sections::split_page(&p.id, &p.title, &p.content, &opts.chunking);
        split.push((p.id.clone(), p.title.clone(), secs));
    }
    let catalog = Catalog::new(split);

    std::fs::create_dir_all(dir).map_err(|e| SearchError::write(dir, e))?;
    let building = dir.join(format!(".building-{}", std::process::id()));
    if building.exists() {
        std::fs::remove_dir_all(&building).map_err(|e| SearchError::write(&building, e))?;
    }
    std::fs::create_dir_all(building.join(TANTIVY_DIR)).map_err(|e| SearchError::write(&building, e))?;

    progress(Progress::Stage(format!("full-text index of {} sections", catalog.sections.len())));
    bm25::build(&building.join(TANTIVY_DIR), &catalog)?;

    let mut embedder = match &opts.model_dir {
        Some(d) => Embedder::load(d)?,
        None => Embedder::minilm()?,
    };
    embedder.set_max_tokens(opts.max_tokens)?;
    let texts: Vec<String> = catalog.sections.iter().map(|s| embedding_text(&catalog.pages[s.page].title, &s.title, &s.text)).collect();
    let total = texts.len();
    progress(Progress::Embedding { done: 0, total });
    let rows = embedder.embed_many(&texts, opts.batch_size, &mut |done| progress(Progress::Embedding { done, total }))?;

    progress(Progress::Stage("writing".to_string()));
    let cat_bytes = serde_json::to_vec(&catalog).map_err(|e| SearchError::write(&building, e.into()))?;
    assert!(rows.iter().all(|r| r.len() == DIM), "the embedder returned a vector that is not {DIM} wide");
    let vec_bytes = crate::vectors::file_bytes(&rows);
    let mut files = BTreeMap::new();
    files.insert(CATALOG_FILE.to_string(), FileSum::of(&cat_bytes));
    files.insert(VECTORS_FILE.to_string(), FileSum::of(&vec_bytes));
    write_file(&building.join(CATALOG_FILE), &cat_bytes)?;
    write_file(&building.join(VECTORS_FILE), &vec_bytes)?;
    let seconds = start.elapsed().as_secs_f64();
    let manifest = Manifest {
        inputs: want,
        corpus_path: pages.display().to_string(),
        pages: catalog.pages.len(),
        sections: catalog.sections.len(),
        files,
        build_seconds: seconds,
    };
    let man_bytes = serde_json::to_vec_pretty(&manifest).map_err(|e| SearchError::write(&building, e.into()))?;
    write_file(&building.join(MANIFEST_FILE), &man_bytes)?;

    // Put the new generation in service: rename the directory, then switch CURRENT atomically.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let gen_name = format!("gen-{nanos}-{}", std::process::id());
    let gen = dir.join(&gen_name);
    std::fs::rename(&building, &gen).map_err(|e| SearchError::write(&gen, e))?;
    let current = dir.join(CURRENT_FILE);
    agentrt_assets::write_atomic(&current, gen_name.as_bytes()).map_err(|e| SearchError::write(&current, e))?;
    sweep(dir, &gen_name);
    Ok(BuildOutcome::Built { reason, pages: catalog.pages.len(), sections: catalog.sections.len(), seconds })
}

/// What the embedder sees for a section: the page title gives every chunk its context.
fn embedding_text(page_title: &str, section_title: &str, text: &str) -> String {
    if section_title == "Introduction" || section_title.ends_with('…') {
        format!("{page_title}\n{text}")
    } else {
        format!("{page_title}: {section_title}\n{text}")
    }
}

/// Write a file and flush it to disk.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), SearchError> {
    let mut f = std::fs::File::create(path).map_err(|e| SearchError::write(path, e))?;
    f.write_all(bytes).map_err(|e| SearchError::write(path, e))?;
    f.sync_all().map_err(|e| SearchError::write(path, e))?;
    Ok(())
}

/// Remove old generations and the leftovers of builds whose process is gone (best effort).
fn sweep(dir: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let stale = if name.starts_with("gen-") {
            name != keep
        } else if let Some(pid) = name.strip_prefix(".building-") {
            pid.parse::<u32>().map(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()).unwrap_or(false)
        } else {
            false
        };
        if stale {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
