//! GGUF loading: metadata to [`ModelConfig`], tensors dequantized to f32, HF tensor layout restored.
//!
//! llama.cpp's converter permutes the rows of llama's q and k projections so that GGML's interleaved RoPE
//! applies; we undo that permutation here, so that the decoder, the adapters (PEFT names and layouts) and the
//! reference implementation all see the Hugging Face layout and use rotate-half RoPE.

use super::config::{Arch, ModelConfig};
use super::weights::{LayerWeights, ModelWeights, PackedWeights};
use crate::error::{io_err, PolicyError, Result};
use crate::fused::PackedRows;
use crate::model::Target;
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{DType, Device, Tensor};
use std::path::Path;
use std::sync::Arc;

/// A parsed GGUF file: its metadata and an open reader for its tensors.
pub struct GgufFile {
    /// The file, named in errors.
    pub path: std::path::PathBuf,
    /// The parsed header: metadata and tensor descriptors.
    pub content: Content,
    file: std::fs::File,
}

impl GgufFile {
    /// Opens and parses a GGUF header, checking that every tensor's bytes are present.
    pub fn open(path: &Path) -> Result<GgufFile> {
        let mut file = std::fs::File::open(path).map_err(io_err(path))?;
        let size = file.metadata().map_err(io_err(path))?.len();
        // Buffered: the header is hundreds of thousands of small reads (a 150k-token vocabulary and its
        // merges, each a length and a string), a system call each on the bare file.
        let content = Content::read(&mut std::io::BufReader::with_capacity(1 << 20, &mut file))
            .map_err(|e| PolicyError::Truncated { path: path.to_path_buf(), what: format!("cannot read the GGUF header ({e})") })?;
        // Check every tensor's extent up front, so a truncated download fails with a clear message rather
        // than in the middle of loading. The shape and offset are the file's word: their products and sums
        // are checked, not trusted (fuzz/: a shape whose element count overflows, one with a zero).
        for (name, info) in &content.tensor_infos {
            let dims = info.shape.dims();
            let corrupt = |what: String| PolicyError::Truncated { path: path.to_path_buf(), what: format!("tensor `{name}` of shape {dims:?}: {what}") };
            let elems = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(|| corrupt("its element count overflows".into()))?;
            let (block, block_bytes) = (info.ggml_dtype.block_size(), info.ggml_dtype.type_size());
            // No model has an empty tensor, and candle reads one's blocks from an unaligned empty buffer.
            if elems == 0 {
                return Err(corrupt("it has no elements".into()));
            }
            if !elems.is_multiple_of(block) {
                return Err(corrupt(format!("{elems} elements are not whole blocks of {block} ({:?})", info.ggml_dtype)));
            }
            let end = (elems / block)
                .checked_mul(block_bytes)
                .and_then(|bytes| content.tensor_data_offset.checked_add(info.offset)?.checked_add(bytes as u64))
                .ok_or_else(|| corrupt(format!("its extent (offset {} past the data at {}) overflows", info.offset, content.tensor_data_offset)))?;
            if end > size {
                return Err(PolicyError::Truncated {
                    path: path.to_path_buf(),
                    what: format!("tensor `{name}` ends at byte {end}, but the file has only {size} bytes"),
                });
            }
        }
        Ok(GgufFile { path: path.to_path_buf(), content, file })
    }

    /// A metadata value, if present.
    pub fn meta(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    fn missing(&self, what: impl Into<String>) -> PolicyError {
        PolicyError::Missing { path: self.path.clone(), what: what.into() }
    }

    fn meta_u(&self, key: &str) -> Result<usize> {
        let v = self.meta(key).ok_or_else(|| self.missing(format!("metadata `{key}`")))?;
        v.to_u32()
            .map(|x| x as usize)
            .or_else(|_| v.to_u64().map(|x| x as usize))
            .map_err(|e| PolicyError::BadModel { path: self.path.clone(), what: format!("metadata `{key}`: {e}") })
    }

    /// The architecture name (`general.architecture`).
    pub fn architecture(&self) -> Result<String> {
        let v = self.meta("general.architecture").ok_or_else(|| self.missing("metadata `general.architecture`"))?;
        Ok(v.to_string().map_err(|e| PolicyError::BadModel { path: self.path.clone(), what: e.to_string() })?.clone())
    }

    /// The decoder configuration from the metadata.
    pub fn config(&self) -> Result<ModelConfig> {
        let name = self.architecture()?;
        let arch = Arch::parse(&name).ok_or_else(|| PolicyError::UnsupportedArchitecture { path: self.path.clone(), found: name.clone() })?;
        let p = |k: &str| format!("{name}.{k}");
        let hidden = self.meta_u(&p("embedding_length"))?;
        let heads = self.meta_u(&p("attention.head_count"))?;
        let kv_heads = self.meta_u(&p("attention.head_count_kv")).unwrap_or(heads);
        let head_dim = self.meta_u(&p("attention.key_length")).unwrap_or(hidden / heads.max(1));
        let eps = self.meta(&p("attention.layer_norm_rms_epsilon")).and_then(|v| v.to_f32().ok()).unwrap_or(1e-6) as f64;
        let theta = self.meta(&p("rope.freq_base")).and_then(|v| v.to_f32().ok()).unwrap_or(10000.0) as f64;
        let embd = self.content.tensor_infos.get("token_embd.weight").ok_or_else(|| self.missing("tensor `token_embd.weight`"))?;
        let vocab = embd.shape.dims().first().copied().unwrap_or(0);
        let cfg = ModelConfig {
            arch,
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: self.meta_u(&p("feed_forward_length"))?,
            num_layers: self.meta_u(&p("block_count"))?,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
            rms_norm_eps: eps,
            rope_theta: theta,
            max_position_embeddings: self.meta_u(&p("context_length")).unwrap_or(4096),
            tie_word_embeddings: !self.content.tensor_infos.contains_key("output.weight"),
        };
        let bad = |what: String| PolicyError::BadModel { path: self.path.clone(), what };
        cfg.check().map_err(bad)?;
        // Each layer has tensors of its own: a block count past them is a lie (fuzz/: it sized a 400 GB
        // allocation).
        let tensors = self.content.tensor_infos.len();
        if cfg.num_layers > tensors {
            return Err(bad(format!("metadata `{}` is {}, but the file has only {tensors} tensors", p("block_count"), cfg.num_layers)));
        }
        Ok(cfg)
    }

    /// One tensor, dequantized to f32.
    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<Tensor> {
        Ok(self.tensor_and_blocks(name, device, true)?.0)
    }

    /// One tensor dequantized to f32, and its blocks when they are in a format kept for decoding (CPU).
    /// Without `keep_f32`, a tensor whose blocks are kept is not dequantized: its f32 tensor is an empty
    /// `(0, cols)` placeholder (see [`ModelWeights::blocks_only`]).
    fn tensor_and_blocks(&mut self, name: &str, device: &Device, keep_f32: bool) -> Result<(Tensor, Option<PackedRows>)> {
        let Some(info) = self.content.tensor_infos.get(name) else {
            return Err(self.missing(format!("tensor `{name}`")));
        };
        let truncated = |e: &dyn std::fmt::Display| PolicyError::Truncated { path: self.path.clone(), what: format!("tensor `{name}`: {e}") };
        // The blocks straight from the file, in the decoder's layout (no quantised tensor in between).
        let blocks = match (device.is_cpu(), PackedRows::kept_format(info.ggml_dtype), info.shape.dims()) {
            (true, Some(format), &[rows, cols]) => {
                let bytes = read_at(&mut self.file, self.content.tensor_data_offset + info.offset, rows * format.row_bytes(cols)).map_err(|e| truncated(&e))?;
                Some(PackedRows::from_bytes(format, rows, cols, bytes)?)
            }
            _ => None,
        };
        if let (false, Some(b)) = (keep_f32, &blocks) {
            return Ok((Tensor::zeros((0, b.cols), DType::F32, device)?, blocks));
        }
        let q = self.content.tensor(&mut self.file, name, device).map_err(|e| truncated(&e))?;
        Ok((q.dequantize(device)?.to_dtype(DType::F32)?, blocks))
    }

    fn opt_tensor(&mut self, name: &str, device: &Device) -> Result<Option<Tensor>> {
        if self.content.tensor_infos.contains_key(name) {
            Ok(Some(self.tensor(name, device)?))
        } else {
            Ok(None)
        }
    }

    /// All weights of the decoder, in HF layout, with the projections' blocks kept for decoding; without
    /// `keep_f32`, the weights kept as blocks get no f32 copy (an inference-only model: a third to a
    /// fifth of the memory, and no dequantisation at load).
    pub fn weights(&mut self, cfg: &ModelConfig, device: &Device, keep_f32: bool) -> Result<ModelWeights> {
        let (embed, embed_blocks) = self.tensor_and_blocks("token_embd.weight", device, keep_f32)?;
        let mut packed = PackedWeights::default();
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let mut proj = |this: &mut Self, name: &str, target: Target, heads: Option<usize>| -> Result<Tensor> {
                let (mut w, mut blocks) = this.tensor_and_blocks(&n(name), device, keep_f32)?;
                if let Some(heads) = heads {
                    if w.dim(0)? > 0 {
                        w = unpermute(&w, heads)?;
                    }
                    blocks = blocks.map(|b| b.reorder_rows(&unpermute_order(b.rows, heads)));
                }
                if let Some(b) = blocks {
                    packed.sites.insert((i, target), b);
                }
                Ok(w)
            };
            let llama = cfg.arch == Arch::Llama;
            let q = proj(self, "attn_q.weight", Target::Q, llama.then_some(cfg.num_heads))?;
            let k = proj(self, "attn_k.weight", Target::K, llama.then_some(cfg.num_kv_heads))?;
            let v = proj(self, "attn_v.weight", Target::V, None)?;
            let o = proj(self, "attn_output.weight", Target::O, None)?;
            let gate = proj(self, "ffn_gate.weight", Target::Gate, None)?;
            let up = proj(self, "ffn_up.weight", Target::Up, None)?;
            let down = proj(self, "ffn_down.weight", Target::Down, None)?;
            layers.push(LayerWeights {
                attn_norm: self.tensor(&n("attn_norm.weight"), device)?,
                q,
                k,
                v,
                o,
                q_bias: self.opt_tensor(&n("attn_q.bias"), device)?,
                k_bias: self.opt_tensor(&n("attn_k.bias"), device)?,
                v_bias: self.opt_tensor(&n("attn_v.bias"), device)?,
                q_norm: self.opt_tensor(&n("attn_q_norm.weight"), device)?,
                k_norm: self.opt_tensor(&n("attn_k_norm.weight"), device)?,
                ffn_norm: self.tensor(&n("ffn_norm.weight"), device)?,
                gate,
                up,
                down,
            });
        }
        let norm = self.tensor("output_norm.weight", device)?;
        let (lm_head, head_blocks) = if self.content.tensor_infos.contains_key("output.weight") {
            let (w, b) = self.tensor_and_blocks("output.weight", device, keep_f32)?;
            (Some(w), b)
        } else {
            (None, embed_blocks.clone())
        };
        packed.lm_head = head_blocks;
        let blocks_only = !keep_f32 && (embed_blocks.is_some() || !packed.sites.is_empty() || packed.lm_head.is_some());
        if blocks_only {
            packed.embed = embed_blocks;
        }
        let packed = (!packed.sites.is_empty() || packed.lm_head.is_some()).then(|| Arc::new(packed));
        Ok(ModelWeights { embed, layers, norm, lm_head, packed, blocks_only })
    }

    /// String-array metadata (tokens, merges).
    pub fn meta_strings(&self, key: &str) -> Result<Vec<String>> {
        let v = self.meta(key).ok_or_else(|| self.missing(format!("metadata `{key}`")))?;
        let arr = v.to_vec().map_err(|e| PolicyError::BadModel { path: self.path.clone(), what: format!("{key}: {e}") })?;
        arr.iter().map(|x| x.to_string().cloned().map_err(|e| PolicyError::BadModel { path: self.path.clone(), what: format!("{key}: {e}") })).collect()
    }

    /// Integer-array metadata (token types).
    pub fn meta_ints(&self, key: &str) -> Option<Vec<i64>> {
        let arr = self.meta(key)?.to_vec().ok()?;
        arr.iter().map(|x| x.to_i32().map(|v| v as i64).or_else(|_| x.to_u32().map(|v| v as i64)).ok()).collect()
    }

    /// A u32 metadata value (token ids).
    pub fn meta_u32(&self, key: &str) -> Option<u32> {
        self.meta(key).and_then(|v| v.to_u32().ok())
    }

    /// A string metadata value.
    pub fn meta_str(&self, key: &str) -> Option<String> {
        self.meta(key).and_then(|v| v.to_string().ok().cloned())
    }
}

/// The row order [`unpermute`] applies, for matrices kept as blocks: HF row `h·hd + half·hd/2 + pair` is
/// GGUF row `h·hd + 2·pair + half`.
fn unpermute_order(rows: usize, n_head: usize) -> Vec<usize> {
    let hd = rows / n_head;
    (0..rows)
        .map(|r| {
            let (h, within) = (r / hd, r % hd);
            let (half, pair) = (within / (hd / 2), within % (hd / 2));
            h * hd + 2 * pair + half
        })
        .collect()
}

/// Undoes llama.cpp's q/k row permutation: GGUF rows are (head, half, pair) interleaved; HF rows are
/// (head, pair, half).
fn unpermute(w: &Tensor, n_head: usize) -> Result<Tensor> {
    let (out, inp) = w.dims2()?;
    let hd = out / n_head;
    Ok(w.reshape((n_head, hd / 2, 2, inp))?.transpose(1, 2)?.contiguous()?.reshape((out, inp))?)
}

/// `len` bytes of `file` from byte `at`, in memory asked to be backed by huge pages ([`advise_huge_pages`]).
fn read_at(file: &mut std::fs::File, at: u64, len: usize) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    file.seek(std::io::SeekFrom::Start(at))?;
    let mut bytes = vec![0u8; len];
    advise_huge_pages(&mut bytes);
    file.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// Asks Linux to back the whole 2 MiB pages inside `bytes` with transparent huge pages (before they are
/// first written). A decoding step streams every weight block once; on 4 KiB pages that is a TLB miss
/// every 4 KiB. Only a tensor spanning whole 2 MiB pages gains: in Qwen2.5-Coder-0.5B its 94 MB embedding
/// (the output matrix too, a fifth of a token's reads); matrices of a few MB get one page or none.
/// Measured on a 400 MB matrix against one input row, two threads, AVX2 EPYC, where THP is `madvise`:
/// 8-bit products of Q4_1 / Q5_0 / Q8_0 blocks about 5% faster (11.1 / 10.5 / 13.9 -> 12.1 / 11.1 / 14.6
/// GB/s, the mean of four alternating runs). Advice only: where it is refused (THP `never`, other systems)
/// the pages stay small and nothing else changes.
fn advise_huge_pages(bytes: &mut [u8]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let (start, end) = (bytes.as_ptr() as usize, bytes.as_ptr() as usize + bytes.len());
        let (from, to) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if from < to {
            // SAFETY: [from, to) lies inside `bytes`, a live allocation we hold mutably; MADV_HUGEPAGE
            // changes how its pages are backed, never their contents.
            unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = bytes;
}
