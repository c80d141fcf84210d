//! all-MiniLM-L6-v2 (any BERT with GELU, absolute positions and heads of 32 or 64) for one text at a
//! time: a query in one to two milliseconds, a 64-word-piece section in about ten.
//!
//! candle's BERT is built for batches: on one 15-word-piece query it spends ~20 ms, most of it packing
//! weights for its general matrix product. This encoder is written for one sequence: the weights are
//! quantised and laid out once, at load ([`Int8Linear`]); every linear layer is then one pass over a
//! quarter of f32's bytes, on the int8 kernel of the selected path ([`agentrt_kernels`]: AMX tiles,
//! AVX-512 VNNI, AVX2 or NEON), and the remaining steps (embeddings, layer norms, 12-head attention, GELU,
//! mean pooling) are loops over small buffers, compiled once per path (AVX-512, AVX2, or the build
//! target's own, which on aarch64 is NEON). Activations are quantised per token on the fly.
//!
//! Accuracy: on real questions an int8 vector is within cosine 0.99 of candle's f32 vector (mean
//! 0.998; `tests/int8_vectors.rs` checks it). On the 952 dev questions, with queries from this encoder,
//! recall@10 of the gold page was 0.963 (hybrid) over sections embedded by candle's f32 BERT at 64 word
//! pieces, and 0.968 over sections embedded by this encoder at 128.

use crate::error::SearchError;
use crate::int8::{Int8Linear, QuantizedRows, SecondCore};
use crate::lanes;
use agentrt_kernels::int8::{Int8Kernel, WeightReach};
use agentrt_kernels::KernelPath;
use candle_core::Tensor;
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The architecture numbers this encoder reads from config.json (BERT, absolute positions, GELU).
#[derive(Debug, Clone, serde::Deserialize)]
struct BertShape {
    hidden_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    layer_norm_eps: f64,
    hidden_act: String,
    #[serde(default = "absolute")]
    position_embedding_type: String,
}

fn absolute() -> String {
    "absolute".into()
}

struct LayerNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f32,
}

struct EncoderLayer {
    /// Query, key and value projections as one layer (outputs `[q | k | v]`), so the input is
    /// quantised once and read once.
    qkv: Int8Linear,
    attention_out: Int8Linear,
    attention_norm: LayerNorm,
    ffn_in: Int8Linear,
    ffn_out: Int8Linear,
    ffn_norm: LayerNorm,
}

/// A BERT sentence encoder for single texts: int8 linear layers, f32 everything else.
pub struct Int8Bert {
    hidden: usize,
    heads: usize,
    max_positions: usize,
    word_embeddings: WordEmbeddings,
    position_embeddings: Vec<f32>,
    /// Token type 0's embedding: a query is one segment.
    type_embedding: Vec<f32>,
    embedding_norm: LayerNorm,
    layers: Vec<EncoderLayer>,
}

/// The word-embedding table: in memory, or rows of an f32 safetensors file read per token. A query
/// encoder reads a dozen rows of the 30,522 a search, so a process that only searches never loads the
/// 47 MB table (most of a first search's latency when it did).
enum WordEmbeddings {
    Dense(Vec<f32>),
    OnDisk(WordRows),
}

/// Rows of an f32 `[vocab, hidden]` table stored at `start` in `file` (see [`WordRows::open`]).
pub struct WordRows {
    file: Mutex<File>,
    path: PathBuf,
    start: u64,
    vocab: usize,
    hidden: usize,
}

impl WordRows {
    /// The `[vocab, hidden]` f32 table named `name` in the safetensors file `path`, with every tensor
    /// of that file whose name `keep` accepts read into memory (the table's companions, e.g. the
    /// position embeddings). Only the file's header and those tensors are read.
    pub fn open(path: &Path, name: &str, keep: impl Fn(&str) -> bool) -> Result<(WordRows, HashMap<String, Tensor>), SearchError> {
        let err = |what: String| SearchError::Embedder(format!("{}: {what}", path.display()));
        let mut file = File::open(path).map_err(|e| err(e.to_string()))?;
        let file_len = file.metadata().map_err(|e| err(e.to_string()))?.len();
        let mut len = [0u8; 8];
        file.read_exact(&mut len).map_err(|e| err(format!("header length: {e}")))?;
        let header_len = u64::from_le_bytes(len);
        if header_len > 100 << 20 || 8 + header_len > file_len {
            return Err(err(format!("header of {header_len} bytes in a file of {file_len}: not a safetensors file")));
        }
        let mut header = vec![0u8; header_len as usize];
        file.read_exact(&mut header).map_err(|e| err(format!("header: {e}")))?;
        let header: HashMap<String, serde_json::Value> = serde_json::from_slice(&header).map_err(|e| err(format!("header: {e}")))?;
        let data_start = 8 + header_len;
        // (shape, byte range in the file) of an f32 tensor the header lists, checked against the file.
        let entry = |tensor: &str| -> Result<(Vec<usize>, u64, u64), SearchError> {
            let e = header.get(tensor).ok_or_else(|| err(format!("{tensor}: missing")))?;
            let dtype = e["dtype"].as_str().ok_or_else(|| err(format!("{tensor}: no dtype")))?.to_string();
            let shape: Vec<usize> = e["shape"]
                .as_array()
                .and_then(|a| a.iter().map(|d| d.as_u64().map(|d| d as usize)).collect())
                .ok_or_else(|| err(format!("{tensor}: bad shape")))?;
            let range: Vec<u64> =
                e["data_offsets"].as_array().and_then(|a| a.iter().map(|d| d.as_u64()).collect()).ok_or_else(|| err(format!("{tensor}: bad data_offsets")))?;
            let [from, to] = range[..] else { return Err(err(format!("{tensor}: bad data_offsets"))) };
            let bytes = shape.iter().product::<usize>() as u64 * 4;
            if dtype != "F32" || to < from || to - from != bytes || data_start + to > file_len {
                return Err(err(format!("{tensor}: {dtype} {shape:?} at bytes {from}..{to} of {}: expected F32 data inside the file", file_len - data_start)));
            }
            Ok((shape, data_start + from, data_start + to))
        };
        let mut tensors = HashMap::new();
        for tensor in header.keys().filter(|k| k.as_str() != name && k.as_str() != "__metadata__" && keep(k)) {
            let (shape, from, to) = entry(tensor)?;
            let mut bytes = vec![0u8; (to - from) as usize];
            file.seek(SeekFrom::Start(from)).and_then(|_| file.read_exact(&mut bytes)).map_err(|e| err(format!("{tensor}: {e}")))?;
            let values: Vec<f32> = crate::vectors::le_f32s(&bytes).collect();
            tensors.insert(tensor.clone(), Tensor::from_vec(values, shape, &candle_core::Device::Cpu).map_err(|e| err(format!("{tensor}: {e}")))?);
        }
        let (shape, start, _) = entry(name)?;
        let [vocab, hidden] = shape[..] else { return Err(err(format!("{name}: shape {shape:?}, expected [vocab, hidden]"))) };
        Ok((WordRows { file: Mutex::new(file), path: path.to_path_buf(), start, vocab, hidden }, tensors))
    }

    /// Append row `id` to `out`.
    fn append_row(&self, id: usize, bytes: &mut Vec<u8>, out: &mut Vec<f32>) -> Result<(), SearchError> {
        bytes.resize(self.hidden * 4, 0);
        let at = self.start + (id * self.hidden * 4) as u64;
        let mut file = self.file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        file.seek(SeekFrom::Start(at))
            .and_then(|_| file.read_exact(bytes))
            .map_err(|e| SearchError::Embedder(format!("{}: word embedding {id}: {e}", self.path.display())))?;
        out.extend(crate::vectors::le_f32s(bytes));
        Ok(())
    }
}

/// Buffers one encoding needs, kept between calls by the caller.
#[derive(Default)]
pub struct Scratch {
    word: Vec<f32>,
    word_bytes: Vec<u8>,
    x: Vec<f32>,
    wide: Vec<f32>,
    attended: Vec<f32>,
    projected: Vec<f32>,
    attention: AttentionBuffers,
    quantized: QuantizedRows,
    sums: Vec<i32>,
}

impl Int8Bert {
    /// Build from a config.json's text and a safetensors file's tensors; a tensor missing from
    /// `tensors` is taken from `base` (a distilled query encoder ships its layers only and shares the
    /// embeddings of the model it was distilled from), and the word embeddings, when `words` is given, are
    /// read per token from it (neither `tensors` nor `base` holds them then). `origin` names the weights in
    /// errors. Its linear layers' weights are quantised to `reach` ([`crate::int8`]'s notes say what each
    /// costs).
    pub fn from_tensors(
        origin: &str,
        config: &str,
        tensors: HashMap<String, Tensor>,
        base: HashMap<String, Tensor>,
        words: Option<WordRows>,
        reach: WeightReach,
    ) -> Result<Self, SearchError> {
        let err = |what: String| SearchError::Embedder(format!("{origin}: {what}"));
        let shape: BertShape = serde_json::from_str(config).map_err(|e| err(format!("config.json: {e}")))?;
        if shape.hidden_act != "gelu" || shape.position_embedding_type != "absolute" {
            return Err(err(format!(
                "config.json: the int8 encoder runs BERT with GELU and absolute positions, not {:?} with {:?}",
                shape.hidden_act, shape.position_embedding_type
            )));
        }
        if shape.num_attention_heads == 0 || !shape.hidden_size.is_multiple_of(shape.num_attention_heads) {
            return Err(err(format!("config.json: hidden size {} does not split into {} heads", shape.hidden_size, shape.num_attention_heads)));
        }
        let head_width = shape.hidden_size / shape.num_attention_heads;
        if head_width != 32 && head_width != 64 {
            return Err(err(format!("config.json: heads {head_width} wide; the int8 encoder runs heads of 32 or 64")));
        }
        let mut weights = Weights { tensors, base, prefix: String::new(), origin, reach };
        // Some exports nest everything under `bert.`.
        if !weights.has("embeddings.word_embeddings.weight") && weights.has("bert.embeddings.word_embeddings.weight") {
            weights.prefix = "bert.".into();
        }
        let (h, ffn) = (shape.hidden_size, shape.intermediate_size);
        let eps = shape.layer_norm_eps as f32;
        let word_embeddings = match words {
            None => WordEmbeddings::Dense(weights.matrix("embeddings.word_embeddings.weight", None, h)?),
            Some(rows) if rows.hidden == h => WordEmbeddings::OnDisk(rows),
            Some(rows) => return Err(err(format!("word embeddings {} wide in {}, expected {h}", rows.hidden, rows.path.display()))),
        };
        let position_embeddings = weights.matrix("embeddings.position_embeddings.weight", Some(shape.max_position_embeddings), h)?;
        let types = weights.matrix("embeddings.token_type_embeddings.weight", None, h)?;
        let embedding_norm = weights.layer_norm("embeddings.LayerNorm", h, eps)?;
        let mut layers = Vec::with_capacity(shape.num_hidden_layers);
        for l in 0..shape.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            let mut qkv_w = Vec::with_capacity(3 * h * h);
            let mut qkv_b = Vec::with_capacity(3 * h);
            for part in ["query", "key", "value"] {
                qkv_w.extend(weights.matrix(&format!("{p}.attention.self.{part}.weight"), Some(h), h)?);
                qkv_b.extend(weights.vector(&format!("{p}.attention.self.{part}.bias"), h)?);
            }
            layers.push(EncoderLayer {
                qkv: Int8Linear::new(&qkv_w, &qkv_b, 3 * h, h, reach),
                attention_out: weights.linear(&format!("{p}.attention.output.dense"), h, h)?,
                attention_norm: weights.layer_norm(&format!("{p}.attention.output.LayerNorm"), h, eps)?,
                ffn_in: weights.linear(&format!("{p}.intermediate.dense"), ffn, h)?,
                ffn_out: weights.linear(&format!("{p}.output.dense"), h, ffn)?,
                ffn_norm: weights.layer_norm(&format!("{p}.output.LayerNorm"), h, eps)?,
            });
        }
        Ok(Int8Bert {
            hidden: h,
            heads: shape.num_attention_heads,
            max_positions: shape.max_position_embeddings,
            word_embeddings,
            position_embeddings,
            type_embedding: types[..h].to_vec(),
            embedding_norm,
            layers,
        })
    }

    /// The mean-pooled, L2-normalised vector of one tokenised text (with its [CLS] and [SEP]).
    /// `second_core`: lend this encoding a second core for its large layers (a query, whose latency
    /// matters); sections are encoded one per core instead.
    pub fn encode(&self, ids: &[u32], scratch: &mut Scratch, second_core: bool) -> Result<Vec<f32>, SearchError> {
        self.encode_on(agentrt_kernels::selected(), ids, scratch, second_core)
    }

    /// As [`Int8Bert::encode`], on the kernels of `path` (tests hold every path to the same vector).
    ///
    /// # Panics
    /// When this CPU cannot run `path`.
    pub fn encode_on(&self, path: KernelPath, ids: &[u32], scratch: &mut Scratch, second_core: bool) -> Result<Vec<f32>, SearchError> {
        assert!(path.is_supported(), "kernel path {path} does not run on this CPU");
        let mut vectors = if second_core {
            SecondCore::lend(|core| self.encode_dispatch(path, &[ids], scratch, core))
        } else {
            self.encode_dispatch(path, &[ids], scratch, None)
        }?;
        Ok(vectors.pop().expect("one vector for one text"))
    }

    /// The vectors of several texts in one pass, on this thread: their word pieces are rows of the same
    /// products, so each weight is read once for all of them (a section's weights do not stay in the
    /// cache until the next section), and attention and pooling run per text. Each vector has the bits
    /// [`Int8Bert::encode`] gives it alone.
    pub fn encode_together(&self, texts: &[&[u32]], scratch: &mut Scratch) -> Result<Vec<Vec<f32>>, SearchError> {
        self.encode_dispatch(agentrt_kernels::selected(), texts, scratch, None)
    }

    fn encode_dispatch(&self, path: KernelPath, ids: &[&[u32]], scratch: &mut Scratch, core: Option<&SecondCore>) -> Result<Vec<Vec<f32>>, SearchError> {
        let kernel = Int8Kernel::for_path(path);
        match path {
            // SAFETY: the path runs on this CPU (checked by the callers).
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => unsafe { self.encode_avx512(kernel, ids, scratch, core) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => unsafe { self.encode_avx2(kernel, ids, scratch, core) },
            _ => self.encode_body(kernel, ids, scratch, core),
        }
    }

    /// The same code as `encode_body`, compiled for AVX-512: the f32 loops between the int8 layers
    /// (layer norms, GELU, attention, quantisation) are all inlined into it and run 16 lanes wide.
    /// Every instance gives the same bits: Rust fuses a multiply into an add only where the code asks
    /// (`mul_add`, in attention and the polynomials), and a fused multiply-add rounds once on every path
    /// (FMA units here and on NEON, the C library's exact `fmaf` for the generic path on an x86 without
    /// FMA, slow but used only there).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    unsafe fn encode_avx512(&self, kernel: Int8Kernel, ids: &[&[u32]], scratch: &mut Scratch, core: Option<&SecondCore>) -> Result<Vec<Vec<f32>>, SearchError> {
        self.encode_body(kernel, ids, scratch, core)
    }

    /// The same code compiled for AVX2 (x86-64-v3), 8 lanes wide.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn encode_avx2(&self, kernel: Int8Kernel, ids: &[&[u32]], scratch: &mut Scratch, core: Option<&SecondCore>) -> Result<Vec<Vec<f32>>, SearchError> {
        self.encode_body(kernel, ids, scratch, core)
    }

    #[inline(always)]
    fn encode_body(&self, kernel: Int8Kernel, texts: &[&[u32]], scratch: &mut Scratch, core: Option<&SecondCore>) -> Result<Vec<Vec<f32>>, SearchError> {
        let h = self.hidden;
        for ids in texts {
            if ids.is_empty() || ids.len() > self.max_positions {
                return Err(SearchError::Embedder(format!("int8 encoder: {} word pieces (expected 1 to {})", ids.len(), self.max_positions)));
            }
        }
        // All texts' word pieces, one after another: `t` rows.
        let t: usize = texts.iter().map(|ids| ids.len()).sum();
        let vocab = match &self.word_embeddings {
            WordEmbeddings::Dense(table) => table.len() / h,
            WordEmbeddings::OnDisk(rows) => rows.vocab,
        };
        let Scratch { word: word_row, word_bytes, x, wide, attended, projected, attention, quantized, sums } = scratch;
        x.clear();
        for (pos, &id) in texts.iter().flat_map(|ids| ids.iter().enumerate()) {
            let id = id as usize;
            if id >= vocab {
                return Err(SearchError::Embedder(format!("int8 encoder: token id {id} outside the vocabulary of {vocab}")));
            }
            let word = match &self.word_embeddings {
                WordEmbeddings::Dense(table) => &table[id * h..(id + 1) * h],
                WordEmbeddings::OnDisk(rows) => {
                    word_row.clear();
                    rows.append_row(id, word_bytes, word_row)?;
                    &word_row[..]
                }
            };
            let position = &self.position_embeddings[pos * h..(pos + 1) * h];
            x.extend(word.iter().zip(position).zip(&self.type_embedding).map(|((w, p), y)| w + p + y));
        }
        self.embedding_norm.apply(x, h);
        for layer in &self.layers {
            // Self-attention.
            quantized.requantize(x, t, h);
            wide.resize(t * 3 * h, 0.0);
            layer.qkv.forward(kernel, quantized, sums, wide, core);
            attended.resize(t * h, 0.0);
            let mut start = 0;
            for ids in texts {
                let (qkv, out) = (&wide[start * 3 * h..][..ids.len() * 3 * h], &mut attended[start * h..][..ids.len() * h]);
                match h / self.heads {
                    32 => attend::<32>(qkv, ids.len(), h, attention, out),
                    64 => attend::<64>(qkv, ids.len(), h, attention, out),
                    d => unreachable!("head width {d} was refused at load"),
                }
                start += ids.len();
            }
            quantized.requantize(attended, t, h);
            projected.resize(t * h, 0.0);
            layer.attention_out.forward(kernel, quantized, sums, projected, core);
            add_into(x, projected);
            layer.attention_norm.apply(x, h);
            // Feed-forward.
            quantized.requantize(x, t, h);
            let ffn = layer.ffn_in.out_dim();
            wide.resize(t * ffn, 0.0);
            layer.ffn_in.forward_then(kernel, quantized, sums, &mut wide[..t * ffn], core, gelu);
            quantized.requantize(&wide[..t * ffn], t, ffn);
            layer.ffn_out.forward(kernel, quantized, sums, projected, core);
            add_into(x, projected);
            layer.ffn_norm.apply(x, h);
        }
        let mut rows = x.chunks_exact(h);
        let mut vectors = Vec::with_capacity(texts.len());
        for ids in texts {
            let mut pooled = vec![0f32; h];
            for row in rows.by_ref().take(ids.len()) {
                add_into(&mut pooled, row);
            }
            vectors.push(crate::lanes::normalise(pooled));
        }
        Ok(vectors)
    }
}

/// Multi-head self-attention over one unpadded sequence: `qkv` is `t × [q | k | v]`, the result `t × h`.
///
/// Each head's keys are first copied transposed and padded, in chunks of 16 keys (`[t16 / 16][d][16]`,
/// `t16` = `t` rounded up to 16), so that a query row's scores are built 16 at a time by `d` broadcast
/// multiply-adds of fixed width, and the softmax runs over whole 16-lane chunks (padding scores are
/// −∞, so they weigh nothing). Its values are copied into `t × d` rows, and two query rows share each
/// pass over them: each output still sums over the keys in order, so the bits are those of one row at
/// a time, but twice the independent additions are in flight (one row alone waited on the adder's
/// latency; attention was then half of a section's f32 work). `D` is the head width, a constant so
/// that a row's context vector lives in registers. The loops index fixed-size arrays only, so they
/// carry no bounds checks (with slice indexing they did, eight per step of the score loop).
#[inline(always)]
fn attend<const D: usize>(qkv: &[f32], t: usize, h: usize, buffers: &mut AttentionBuffers, out: &mut [f32]) {
    const W: usize = 16;
    let (d, heads) = (D, h / D);
    assert!(t > 0 && qkv.len() == t * 3 * h && out.len() == t * h && heads * d == h, "attention: {} values for {t} tokens of 3 × {h}", qkv.len());
    let scale = 1.0 / (d as f32).sqrt();
    let t16 = t.div_ceil(W) * W;
    let AttentionBuffers { scores, keys, values } = buffers;
    scores.clear();
    scores.resize(2 * t16, 0.0);
    keys.clear();
    keys.resize(d * t16, 0.0);
    values.clear();
    values.resize(t * d, 0.0);
    for head in 0..heads {
        let key_chunks_mut: &mut [[[f32; W]; D]] = keys.as_chunks_mut::<W>().0.as_chunks_mut::<D>().0;
        for (j, row) in qkv.chunks_exact(3 * h).enumerate() {
            let key: &[f32; D] = row[h + head * d..][..d].try_into().expect("head width");
            let (chunk, l) = (&mut key_chunks_mut[j / W], j % W);
            for k in 0..D {
                chunk[k][l] = key[k];
            }
            values[j * d..(j + 1) * d].copy_from_slice(&row[2 * h + head * d..][..d]);
        }
        let key_chunks: &[[[f32; W]; D]] = keys.as_chunks::<W>().0.as_chunks::<D>().0;
        let value_rows: &[[f32; D]] = &values.as_chunks::<D>().0[..t];
        let (first_scores, second_scores) = scores.split_at_mut(t16);
        let mut i = 0;
        while i < t {
            let query = |r: usize| -> &[f32; D] { qkv[r * 3 * h + head * d..][..d].try_into().expect("head width") };
            softmax_row::<D, W>(query(i), key_chunks, t, scale, first_scores);
            if i + 1 < t {
                softmax_row::<D, W>(query(i + 1), key_chunks, t, scale, second_scores);
                let (mut c0, mut c1) = ([0f32; D], [0f32; D]);
                for ((&p0, &p1), v) in first_scores[..t].iter().zip(&second_scores[..t]).zip(value_rows) {
                    for l in 0..D {
                        c0[l] = p0.mul_add(v[l], c0[l]);
                        c1[l] = p1.mul_add(v[l], c1[l]);
                    }
                }
                out[i * h + head * d..][..d].copy_from_slice(&c0);
                out[(i + 1) * h + head * d..][..d].copy_from_slice(&c1);
                i += 2;
            } else {
                let mut c0 = [0f32; D];
                for (&p0, v) in first_scores[..t].iter().zip(value_rows) {
                    for l in 0..D {
                        c0[l] = p0.mul_add(v[l], c0[l]);
                    }
                }
                out[i * h + head * d..][..d].copy_from_slice(&c0);
                i += 1;
            }
        }
    }
}

/// One query row's attention weights: `scores[j] = exp(q · key_j · scale − max) · norm` over the
/// `t16` padded keys (padding weighs ~1e-38), `norm` being one over the sum of the exponentials.
#[inline(always)]
fn softmax_row<const D: usize, const W: usize>(q: &[f32; D], key_chunks: &[[[f32; W]; D]], t: usize, scale: f32, scores: &mut [f32]) {
    for (chunk, keys) in scores.chunks_exact_mut(W).zip(key_chunks) {
        // Four partial sums, so consecutive multiply-adds do not wait on one another (four named
        // arrays: an array of arrays was kept on the stack and not vectorised).
        let (mut a0, mut a1, mut a2, mut a3) = ([0f32; W], [0f32; W], [0f32; W], [0f32; W]);
        for k4 in (0..D).step_by(4) {
            let (k0, k1, k2, k3) = (&keys[k4], &keys[k4 + 1], &keys[k4 + 2], &keys[k4 + 3]);
            let (q0, q1, q2, q3) = (q[k4], q[k4 + 1], q[k4 + 2], q[k4 + 3]);
            for l in 0..W {
                a0[l] = q0.mul_add(k0[l], a0[l]);
                a1[l] = q1.mul_add(k1[l], a1[l]);
                a2[l] = q2.mul_add(k2[l], a2[l]);
                a3[l] = q3.mul_add(k3[l], a3[l]);
            }
        }
        for l in 0..W {
            chunk[l] = ((a0[l] + a1[l]) + (a2[l] + a3[l])) * scale;
        }
    }
    // Padding keys (written once, after the loop: a per-lane test kept the loop above scalar).
    for s in &mut scores[t..] {
        *s = f32::NEG_INFINITY;
    }
    let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| if s > m { s } else { m });
    for s in scores.iter_mut() {
        *s = exp_nonpositive(*s - max);
    }
    let norm = 1.0 / lanes::sum(scores);
    for s in scores.iter_mut() {
        *s *= norm;
    }
}

/// Attention's scratch: two query rows' scores, and one head's transposed keys and its values.
#[derive(Default)]
struct AttentionBuffers {
    scores: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
}

/// `eˣ` for `x ≤ 0` to ~2e-7 relative (a softmax's shifted logits): `2ⁿ · p(r)` with `x = n ln 2 + r`
/// and a degree-6 polynomial on |r| ≤ ln 2 / 2, written without a libm call so that it vectorises.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2²³: adding it rounds to an integer
    let x = if x > -87.0 { x } else { -87.0 }; // keeps 2ⁿ a normal number (and maps −∞ to e⁻⁸⁷ ≈ 1.6e-38)
    let n = (x * std::f32::consts::LOG2_E + MAGIC) - MAGIC;
    // ln 2 in two parts, so that n · ln 2 is exact enough for r.
    let r = (x - n * 0.693_145_75) - n * 1.428_606_8e-6;
    let p = [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0].iter().fold(1.0 / 720.0, |p: f32, &c| p.mul_add(r, c));
    // SAFETY: n is an integer in [-126, 0] (x was clamped to [-87, 0]).
    let n = unsafe { n.to_int_unchecked::<i32>() };
    p * f32::from_bits(((n + 127) as u32) << 23)
}

#[inline(always)]
fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// BERT's GELU, the exact (erf) form.
#[inline(always)]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// erf to 3e-7 absolute (Abramowitz & Stegun 7.1.28): a polynomial and a 16th power, no `exp`, so
/// the GELU loop over `t × 1536` values vectorises (a libm `exp` per value took ~2 ms a query).
#[inline(always)]
fn erf(x: f32) -> f32 {
    const A: [f32; 6] = [0.070_523_08, 0.042_282_01, 0.009_270_527, 0.000_152_014_3, 0.000_276_567_2, 0.000_043_063_8];
    let z = x.abs();
    let p = [A[4], A[3], A[2], A[1], A[0], 1.0].iter().fold(A[5], |p: f32, &c| p.mul_add(z, c));
    let p2 = p * p;
    let p4 = p2 * p2;
    let p8 = p4 * p4;
    let r = 1.0 - 1.0 / (p8 * p8);
    r.copysign(x)
}

impl LayerNorm {
    #[inline(always)]
    fn apply(&self, x: &mut [f32], h: usize) {
        for row in x.chunks_exact_mut(h) {
            let mean = lanes::sum(row) / h as f32;
            let var = lanes::squared_deviation(row, mean) / h as f32;
            let inv = 1.0 / (var + self.eps).sqrt();
            for ((v, g), b) in row.iter_mut().zip(&self.gamma).zip(&self.beta) {
                *v = (*v - mean) * inv * g + b;
            }
        }
    }
}

/// The safetensors file's tensors (then the base model's), read by name with their shapes checked.
struct Weights<'a> {
    tensors: HashMap<String, Tensor>,
    base: HashMap<String, Tensor>,
    prefix: String,
    origin: &'a str,
    /// What the linear layers' weights are quantised to.
    reach: WeightReach,
}

impl Weights<'_> {
    fn has(&self, full: &str) -> bool {
        self.tensors.contains_key(full) || self.base.contains_key(full)
    }

    fn get(&self, name: &str, shape: (Option<usize>, usize), matrix: bool) -> Result<Vec<f32>, SearchError> {
        let full = format!("{}{name}", self.prefix);
        let err = |what: String| SearchError::Embedder(format!("{}: model.safetensors: {full}: {what}", self.origin));
        let t = self.tensors.get(&full).or_else(|| self.base.get(&full)).ok_or_else(|| err("missing".into()))?;
        let dims = t.dims().to_vec();
        let ok = if matrix { dims.len() == 2 && dims[1] == shape.1 && shape.0.is_none_or(|r| dims[0] == r) } else { dims == [shape.1] };
        if !ok {
            let want = match shape.0 {
                Some(r) if matrix => format!("[{r}, {}]", shape.1),
                None if matrix => format!("[_, {}]", shape.1),
                _ => format!("[{}]", shape.1),
            };
            return Err(err(format!("shape {dims:?}, expected {want}")));
        }
        t.to_dtype(candle_core::DType::F32).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).map_err(|e| err(e.to_string()))
    }

    fn matrix(&self, name: &str, rows: Option<usize>, cols: usize) -> Result<Vec<f32>, SearchError> {
        self.get(name, (rows, cols), true)
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, SearchError> {
        self.get(name, (None, len), false)
    }

    fn linear(&self, prefix: &str, out_dim: usize, in_dim: usize) -> Result<Int8Linear, SearchError> {
        let w = self.matrix(&format!("{prefix}.weight"), Some(out_dim), in_dim)?;
        let b = self.vector(&format!("{prefix}.bias"), out_dim)?;
        Ok(Int8Linear::new(&w, &b, out_dim, in_dim, self.reach))
    }

    fn layer_norm(&self, prefix: &str, h: usize, eps: f32) -> Result<LayerNorm, SearchError> {
        Ok(LayerNorm { gamma: self.vector(&format!("{prefix}.weight"), h)?, beta: self.vector(&format!("{prefix}.bias"), h)?, eps })
    }
}

#[cfg(test)]
mod tests {
    use super::erf;

    #[test]
    fn exp_matches_std_on_softmax_inputs() {
        let mut worst = 0f32;
        for i in 0..=100_000 {
            let x = -(i as f32) * 1e-3 * 0.869; // 0 down to -86.9 (below -87 the input is clamped)
            let (got, want) = (super::exp_nonpositive(x), x.exp());
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert_eq!(super::exp_nonpositive(0.0), 1.0);
        assert!(super::exp_nonpositive(-1e4) < 1e-37);
    }

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in
            [(0.0f32, 0.0f32), (0.1, 0.112_462_92), (0.5, 0.520_499_9), (1.0, 0.842_700_8), (-1.0, -0.842_700_8), (2.5, 0.999_593), (-6.0, -1.0), (30.0, 1.0)]
        {
            assert!((erf(x) - want).abs() < 1e-6, "erf({x}) = {} not {want}", erf(x));
        }
    }
}
