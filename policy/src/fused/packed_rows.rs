//! Weight matrices kept in their GGUF block format (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K) for decoding steps.
//!
//! Why: a decoding step reads every weight once and is bound by memory (540 MB of f32 per token for
//! SmolLM2-135M, at ~7.8 GB/s here). The default model ships as Q4_1 (20 bytes per 32 weights) with a Q8_0
//! embedding; dequantising each block in registers, with the same formula the loader used for the f32
//! copy (`q·d + m`), gives the very same weight values from 6.4x (Q4_1) and 3.8x (Q8_0) fewer bytes. The
//! f32 copy stays for training; a test holds the two to bit equality. The block kernels, one per
//! instruction set, are `agentrt_kernels::decode`.

use super::decode_linear::{by_weight_rows_in_runs, Batching, MAX_ROWS};
use super::with_f32_slice;
pub use agentrt_kernels::decode::BlockFormat;
use agentrt_kernels::decode::{unpack_block, PanelCodes, Panels, Q8Rows, PANEL_ROWS};
use agentrt_kernels::KernelPath;
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Tensor};
use rayon::prelude::*;
use std::sync::OnceLock;

/// What a decoding step multiplies the blocks with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecodeActivations {
    /// The f32 activations, the blocks unpacked to the loader's f32 weights in registers: the products of
    /// the training forward to float rounding, so sampled log-probabilities are the trainer's.
    #[default]
    F32,
    /// The activations rounded to 8 bits per 32 values and multiplied by integer dot products, as
    /// llama.cpp decodes: fewer instructions per weight, with a small gap to the f32 products (measured
    /// in bench/decode_results.md; the trainer reports it as `logprob_gap_*`). A model without its f32
    /// copy reads prompts of 128 rows or more by the f32 product all the same
    /// ([`PackedRows::a_bt`]): there the arithmetic, not the weights' bytes, bounds the time.
    Int8,
}

impl std::str::FromStr for DecodeActivations {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(DecodeActivations::F32),
            "int8" => Ok(DecodeActivations::Int8),
            other => Err(format!("{other:?}: expected f32 or int8")),
        }
    }
}

/// Input rows from which [`PackedRows::a_bt`] multiplies f32 tiles of the weights by the general matrix
/// product ([`PackedRows::a_bt_by_tiles`]) rather than running the block kernels over runs of
/// [`MAX_ROWS`]. With 8-bit activations, below 128 rows unpacking every weight costs more than the gemm
/// saves (AVX2 EPYC, both default models: runs faster at 48 prompt tokens, the two alike at 96, tiles
/// 1.2-1.5x faster at 512). The f32 block kernels are slower than the 8-bit ones, and tiles win from the
/// first row past a run (a 50-question evaluation of SmolLM2-135M, whose turns add 17-127 tokens: 51-52 s
/// through runs, 46 s by tiles, 43-50 s with the f32 copy's gemm).
fn gemm_rows(activations: DecodeActivations) -> usize {
    match activations {
        DecodeActivations::Int8 => 128,
        DecodeActivations::F32 => MAX_ROWS + 1,
    }
}

/// f32 weights a prompt's task unpacks at once: 1 MiB, a tile the gemm reads from cache for every row.
const TILE_VALUES: usize = 1 << 18;

/// A `(rows, cols)` matrix as row-major GGUF blocks.
#[derive(Debug, Clone)]
pub struct PackedRows {
    /// The GGUF block format the bytes are in.
    pub format: BlockFormat,
    /// Output features: one row of blocks each.
    pub rows: usize,
    /// Input features per row (a multiple of the format's block).
    pub cols: usize,
    bytes: Vec<u8>,
    /// The same weights as panels for the 8-bit products ([`PackedRows::panels`]), repacked the first time
    /// a product with 8-bit activations asks.
    panels: OnceLock<Option<Panels>>,
}

/// The weights are what a matrix is; its panels are a cache of them.
impl PartialEq for PackedRows {
    fn eq(&self, other: &Self) -> bool {
        (self.format, self.rows, self.cols, &self.bytes) == (other.format, other.rows, other.cols, &other.bytes)
    }
}

impl PackedRows {
    /// The block format a GGUF tensor type is kept in for decoding; `None` for the others.
    pub fn kept_format(dtype: GgmlDType) -> Option<BlockFormat> {
        match dtype {
            GgmlDType::Q4_0 => Some(BlockFormat::Q4_0),
            GgmlDType::Q4_1 => Some(BlockFormat::Q4_1),
            GgmlDType::Q5_0 => Some(BlockFormat::Q5_0),
            GgmlDType::Q8_0 => Some(BlockFormat::Q8_0),
            GgmlDType::Q4K => Some(BlockFormat::Q4K),
            GgmlDType::Q6K => Some(BlockFormat::Q6K),
            _ => None,
        }
    }

    /// A `(rows, cols)` matrix from its blocks as the file stores them, row after row.
    pub fn from_bytes(format: BlockFormat, rows: usize, cols: usize, bytes: Vec<u8>) -> candle_core::Result<PackedRows> {
        if !cols.is_multiple_of(format.block_weights()) || bytes.len() != rows * format.row_bytes(cols) {
            candle_core::bail!("packed rows: {} bytes do not hold a ({rows}, {cols}) {format:?} matrix", bytes.len());
        }
        Ok(PackedRows { format, rows, cols, bytes, panels: OnceLock::new() })
    }

    /// The rows reordered: row `i` of the result is row `order[i]` of `self`.
    pub fn reorder_rows(&self, order: &[usize]) -> PackedRows {
        assert_eq!(order.len(), self.rows, "a row order must name every row once");
        let rb = self.bytes.len() / self.rows;
        let mut bytes = Vec::with_capacity(self.bytes.len());
        for &r in order {
            bytes.extend_from_slice(&self.bytes[r * rb..(r + 1) * rb]);
        }
        PackedRows { format: self.format, rows: self.rows, cols: self.cols, bytes, panels: OnceLock::new() }
    }

    /// Rows `ids` unpacked to f32, one after the other (an embedding lookup).
    pub fn select_rows(&self, ids: &[u32]) -> candle_core::Result<Vec<f32>> {
        let per_row = self.format.row_bytes(self.cols);
        let mut out = vec![0f32; ids.len() * self.cols];
        for (&id, o) in ids.iter().zip(out.chunks_exact_mut(self.cols)) {
            let r = id as usize;
            if r >= self.rows {
                candle_core::bail!("row {r} of a matrix of {} rows", self.rows);
            }
            for (block, w) in
                self.bytes[r * per_row..(r + 1) * per_row].chunks_exact(self.format.block_bytes()).zip(o.chunks_exact_mut(self.format.block_weights()))
            {
                unpack_block(self.format, block, w);
            }
        }
        Ok(out)
    }

    /// The weights as panels of [`PANEL_ROWS`] rows, where the 8-bit products run on them: on the AVX2 and
    /// AVX-512 paths (3-4x the block kernel at 16 input rows with VNNI, 1.2-2.2x on AVX2, 1.3-1.6x at one
    /// row: bench/decode_results.md), for a matrix of whole panels. Elsewhere (the plain reference is
    /// slower than the block loops) and for other row counts, `None`: the blocks serve. Repacked once, on
    /// the first call, at 0.8-1.3 bytes a weight beside the blocks (`PanelCodes::for_path`).
    pub fn panels(&self, path: KernelPath) -> Option<&Panels> {
        let pays = matches!(path, KernelPath::Avx2 | KernelPath::Avx512) && self.rows.is_multiple_of(PANEL_ROWS);
        if !pays {
            return None;
        }
        let codes = PanelCodes::for_path(path, self.format);
        self.panels.get_or_init(|| Some(Panels::new(self.format, &self.bytes, self.rows, self.cols, codes))).as_ref()
    }

    /// Every weight as f32, row-major (tests hold it equal to the loader's f32 copy).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        let mut w = vec![0f32; self.format.block_weights()];
        for block in self.bytes.chunks_exact(self.format.block_bytes()) {
            unpack_block(self.format, block, &mut w);
            out.extend_from_slice(&w);
        }
        out
    }

    /// `out (m×rows) = x (m×cols) · Wᵀ` on the selected kernel path, with `x` as `activations` says. The
    /// kernels take up to [`MAX_ROWS`] input rows; more go through in runs of [`MAX_ROWS`] inside each task
    /// of weight rows (`by_weight_rows_in_runs`), every row meeting the kernel a decoding step's row does.
    /// Under [`Batching::Fastest`] a prompt long enough (`gemm_rows`: 128 rows with 8-bit activations, 17
    /// with f32) is an f32 gemm on tiles of the weights instead (`a_bt_by_tiles`).
    pub fn a_bt(&self, x: &[f32], out: &mut [f32], m: usize, activations: DecodeActivations, batching: Batching) {
        if m <= MAX_ROWS {
            return PackedRows::few_rows_a_bt_each(&[self], x, &mut [out], m, activations);
        }
        if batching == Batching::Fastest && m >= gemm_rows(activations) {
            return self.a_bt_by_tiles(x, out, m);
        }
        let (n, k) = (self.rows, self.cols);
        assert_eq!(x.len(), m * k, "input is not {m}x{k}");
        let (path, format) = (agentrt_kernels::selected(), self.format);
        let quantized: Vec<Q8Rows> = match activations {
            DecodeActivations::F32 => Vec::new(),
            DecodeActivations::Int8 => x.par_chunks(MAX_ROWS * k).map(|run| Q8Rows::quantize(run, run.len() / k, k)).collect(),
        };
        let panels = match activations {
            DecodeActivations::F32 => None,
            DecodeActivations::Int8 => self.panels(path),
        };
        by_weight_rows_in_runs(&self.bytes, format.row_bytes(k), (m, n), out, |(s, r), first, wc, oc| match (activations, panels) {
            (DecodeActivations::F32, _) => agentrt_kernels::decode::rows_blocks(path, format, &x[s * k..(s + r) * k], wc, oc, r, k),
            (DecodeActivations::Int8, Some(p)) => agentrt_kernels::decode::panels_q8(path, p, first / PANEL_ROWS, &quantized[s / MAX_ROWS], oc),
            (DecodeActivations::Int8, None) => agentrt_kernels::decode::rows_blocks_q8(path, format, &quantized[s / MAX_ROWS], wc, oc),
        });
    }

    /// [`PackedRows::a_bt`] for a prompt: the weights unpacked to f32 a tile of rows at a time (about
    /// [`TILE_VALUES`], so a tile stays in cache) and each tile multiplied into every input row by the f32
    /// general matrix product, the tiles split over threads. With hundreds of rows a weight is reused
    /// hundreds of times, the product is bound by arithmetic, and the gemm's f32 kernels outrun the 8-bit
    /// block kernels' runs of 16 (Qwen2.5-Coder-0.5B's 512-token prompt on an AVX2 EPYC: 80-90 tokens/s
    /// in runs, 118-129 by tiles); unpacking costs one pass over the blocks.
    fn a_bt_by_tiles(&self, x: &[f32], out: &mut [f32], m: usize) {
        let (n, k, format) = (self.rows, self.cols, self.format);
        assert!(x.len() == m * k && out.len() == m * n, "packed a_bt: input {} and output {} values for {m} rows, ({n}, {k}) weights", x.len(), out.len());
        let per_row = format.row_bytes(k);
        let tile_rows = (TILE_VALUES / k).max(1);
        let dst = super::Shared(out.as_mut_ptr());
        self.bytes.par_chunks(tile_rows * per_row).enumerate().for_each(|(t, tile)| {
            let rows = tile.len() / per_row;
            let mut w = vec![0f32; rows * k];
            for (block, values) in tile.chunks_exact(format.block_bytes()).zip(w.chunks_exact_mut(format.block_weights())) {
                unpack_block(format, block, values);
            }
            // SAFETY: tile `t` writes columns `t·tile_rows ..` (`rows` of them) of the (m × n) output, with
            // row stride n, and no other tile writes them; x is (m × k) row-major and w (rows × k) read as
            // its (k × rows) transpose, both inside their buffers.
            unsafe { super::gemm::matmul_strided((m, rows, k), dst.at(t * tile_rows), n, false, x.as_ptr(), (1, k), w.as_ptr(), (k, 1)) };
        });
    }

    /// `outs[i] (m×rows) = x (m×cols) · W_iᵀ` for matrices of the same width (a layer's queries, keys and
    /// values), up to [`MAX_ROWS`] input rows: the input quantised once, every product in one parallel
    /// section.
    pub fn few_rows_a_bt_each(mats: &[&PackedRows], x: &[f32], outs: &mut [&mut [f32]], m: usize, activations: DecodeActivations) {
        assert!(m <= MAX_ROWS, "{m} input rows: the packed kernel takes at most {MAX_ROWS}");
        let k = mats.first().map_or(0, |w| w.cols);
        assert!(mats.iter().all(|w| w.cols == k), "matrices of different widths multiplied into one input");
        assert_eq!(x.len(), m * k, "input is not {m}x{k}");
        let path = agentrt_kernels::selected();
        let weights: Vec<(&[u8], usize)> = mats.iter().map(|w| (&w.bytes[..], w.format.row_bytes(k))).collect();
        let quantized = match activations {
            DecodeActivations::F32 => None,
            DecodeActivations::Int8 => Some(Q8Rows::quantize(x, m, k)),
        };
        // Repacked (when it pays) before the parallel section, so no task waits on another's repacking.
        let panels: Vec<Option<&Panels>> = mats.iter().map(|w| quantized.as_ref().and_then(|_| w.panels(path))).collect();
        super::decode_linear::by_weight_rows_of(&weights, m, outs, |i, first, wc, oc| match (&quantized, panels[i]) {
            (None, _) => agentrt_kernels::decode::rows_blocks(path, mats[i].format, x, wc, oc, m, k),
            (Some(xq), Some(p)) => agentrt_kernels::decode::panels_q8(path, p, first / PANEL_ROWS, xq, oc),
            (Some(xq), None) => agentrt_kernels::decode::rows_blocks_q8(path, mats[i].format, xq, wc, oc),
        });
    }
}

/// `x · W_iᵀ` for each of `mats` (of one width) and `x: (.., cols)` an f32 CPU input of at most
/// [`MAX_ROWS`] rows, in one parallel section ([`PackedRows::few_rows_a_bt_each`]).
pub fn packed_linear_each(x: &Tensor, mats: &[&PackedRows], activations: DecodeActivations) -> candle_core::Result<Vec<Tensor>> {
    let dims = x.dims().to_vec();
    let k = *dims.last().unwrap_or(&0);
    let m = x.elem_count() / k.max(1);
    if mats.iter().any(|w| w.cols != k) || m > MAX_ROWS || !x.device().is_cpu() || x.dtype() != DType::F32 {
        candle_core::bail!(
            "packed-linear: {m} f32 CPU rows of width {k} (at most {MAX_ROWS}) for matrices of widths {:?}, got {:?} {dims:?}",
            mats.iter().map(|w| w.cols).collect::<Vec<_>>(),
            x.dtype()
        );
    }
    let x = x.contiguous()?;
    let mut outs: Vec<Vec<f32>> = mats.iter().map(|w| vec![0f32; m * w.rows]).collect();
    {
        let mut slices: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        with_f32_slice(&x, "packed-linear: input", |xs| PackedRows::few_rows_a_bt_each(mats, xs, &mut slices, m, activations))?;
    }
    outs.into_iter()
        .zip(mats)
        .map(|(out, w)| {
            let mut out_dims = dims.clone();
            *out_dims.last_mut().expect("checked: the input has a last dimension") = w.rows;
            Tensor::from_vec(out, out_dims, x.device())
        })
        .collect()
}

/// `x · Wᵀ` for `x: (.., cols)` f32 CPU with at most [`MAX_ROWS`] rows, from packed
/// weights; `None` when the input does not qualify (the caller uses the f32 weights then).
pub fn packed_linear(x: &Tensor, w: &PackedRows, activations: DecodeActivations) -> candle_core::Result<Option<Tensor>> {
    let dims = x.dims().to_vec();
    let k = *dims.last().unwrap_or(&0);
    let m = x.elem_count() / k.max(1);
    if k != w.cols || m > MAX_ROWS || !x.device().is_cpu() || x.dtype() != DType::F32 {
        return Ok(None);
    }
    Ok(packed_linear_each(x, &[w], activations)?.pop())
}

/// [`packed_linear`] for any number of rows ([`PackedRows::a_bt`]): the product of a model whose weights
/// have no f32 copy ([`crate::ModelWeights::blocks_only`]), prompts included, and of every model under
/// [`Batching::Invariant`].
pub fn packed_linear_rows(x: &Tensor, w: &PackedRows, activations: DecodeActivations, batching: Batching) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let k = *dims.last().unwrap_or(&0);
    let m = x.elem_count() / k.max(1);
    if k != w.cols || !x.device().is_cpu() || x.dtype() != DType::F32 {
        candle_core::bail!(
            "packed-linear: an f32 CPU input of width {} for {:?} blocks of ({}, {}), got {:?} {:?} on {:?}",
            w.cols,
            w.format,
            w.rows,
            w.cols,
            x.dtype(),
            dims,
            x.device()
        );
    }
    let x = x.contiguous()?;
    let mut out = vec![0f32; m * w.rows];
    with_f32_slice(&x, "packed-linear: input", |xs| w.a_bt(xs, &mut out, m, activations, batching))?;
    let mut out_dims = dims;
    *out_dims.last_mut().expect("checked: the input has a last dimension") = w.rows;
    Tensor::from_vec(out, out_dims, x.device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QTensor;
    use candle_core::Device;

    /// A matrix of whole panels multiplies 8-bit activations on its panels where they pay: within the
    /// activations' rounding of the f32 product, and each input row the same bits alone, in a decoding
    /// step's few rows and in a prompt's runs.
    #[test]
    fn panels_serve_the_8_bit_products_and_keep_each_rows_bits() {
        let dev = Device::Cpu;
        let (n, k) = (48, 768);
        let path = agentrt_kernels::selected();
        let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
        use GgmlDType::*;
        for dtype in [Q4_0, Q4_1, Q5_0, Q8_0, Q4K, Q6K] {
            let q = QTensor::quantize(&w, dtype).unwrap();
            let format = PackedRows::kept_format(dtype).expect("a kept format");
            let packed = PackedRows::from_bytes(format, n, k, q.data().unwrap().into_owned()).unwrap();
            assert_eq!(packed.panels(path).is_some(), matches!(path, KernelPath::Avx2 | KernelPath::Avx512), "{dtype:?} on {path}");
            let wf = Tensor::from_vec(packed.dequantize(), (n, k), &dev).unwrap();
            let x = Tensor::randn(0f32, 1.0, (37, k), &dev).unwrap();
            let all = packed_linear_rows(&x, &packed, DecodeActivations::Int8, Batching::Invariant).unwrap();
            let d = (&all - x.matmul(&wf.t().unwrap()).unwrap()).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 0.03 * (k as f32).sqrt(), "{dtype:?}: 37 int8 rows differ from the f32 product by {d}");
            let all = all.to_vec2::<f32>().unwrap();
            for (start, len) in [(0, 1), (3, 5), (20, 16), (36, 1)] {
                let few = packed_linear(&x.narrow(0, start, len).unwrap(), &packed, DecodeActivations::Int8).unwrap().expect("qualifies");
                for (i, row) in few.to_vec2::<f32>().unwrap().iter().enumerate() {
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
                    assert_eq!(bits(row), bits(&all[start + i]), "{dtype:?}: row {} alone among {len} and among 37", start + i);
                }
            }
        }
    }

    #[test]
    fn every_kept_format_dequantizes_like_candle_and_multiplies_like_the_f32_weights() {
        let dev = Device::Cpu;
        // 768 columns: three K-quant super-blocks, 24 blocks of 32.
        let w = Tensor::randn(0f32, 1.0, (70, 768), &dev).unwrap();
        use GgmlDType::*;
        for dtype in [Q4_0, Q4_1, Q5_0, Q8_0, Q4K, Q6K] {
            let q = QTensor::quantize(&w, dtype).unwrap();
            let format = PackedRows::kept_format(dtype).expect("a kept format");
            let packed = PackedRows::from_bytes(format, 70, 768, q.data().unwrap().into_owned()).unwrap();
            let reference = q.dequantize(&dev).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(packed.dequantize(), reference, "{dtype:?}: not the loader's weights, bit for bit");
            let wf = Tensor::from_vec(reference, (70, 768), &dev).unwrap();
            for m in [1, 5, 16] {
                let x = Tensor::randn(0f32, 1.0, (m, 768), &dev).unwrap();
                let y_ref = x.matmul(&wf.t().unwrap()).unwrap();
                let y = packed_linear(&x, &packed, DecodeActivations::F32).unwrap().expect("qualifies");
                let d = (y - &y_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(d < 1e-3, "{dtype:?}, {m} rows: differs by {d}");
                // 8-bit activations: within a few percent of the output's scale (the kernels' own tests
                // bound each product by the rounding of its activations).
                let y8 = packed_linear(&x, &packed, DecodeActivations::Int8).unwrap().expect("qualifies");
                let scale = y_ref.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                let d = (y8 - &y_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(d < 0.03 * scale, "{dtype:?}, {m} int8 rows: differs by {d} at scale {scale}");
            }
            let x = Tensor::randn(0f32, 1.0, (37, 768), &dev).unwrap();
            assert!(packed_linear(&x, &packed, DecodeActivations::Int8).unwrap().is_none(), "37 rows go to the gemm");
            // ... unless the f32 weights are not there: f32 activations through f32 tiles of the weights.
            let y = packed_linear_rows(&x, &packed, DecodeActivations::F32, Batching::Fastest).unwrap();
            let d = (y - x.matmul(&wf.t().unwrap()).unwrap()).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-3, "{dtype:?}, 37 rows through f32 tiles: differs by {d}");
            // 8-bit activations in runs of 16, inside each task of weight rows: each run gives what it
            // gives alone, bit for bit.
            let all = packed_linear_rows(&x, &packed, DecodeActivations::Int8, Batching::Fastest).unwrap().to_vec2::<f32>().unwrap();
            for (start, len) in [(0, 16), (16, 16), (32, 5)] {
                let run = packed_linear(&x.narrow(0, start, len).unwrap(), &packed, DecodeActivations::Int8).unwrap().expect("qualifies");
                assert_eq!(&all[start..start + len], &run.to_vec2::<f32>().unwrap()[..], "{dtype:?}, the run at {start}");
            }
            // A prompt of many rows: the f32 products, whatever the activations.
            let x = Tensor::randn(0f32, 1.0, (gemm_rows(DecodeActivations::Int8) + 3, 768), &dev).unwrap();
            let y = packed_linear_rows(&x, &packed, DecodeActivations::Int8, Batching::Fastest).unwrap();
            let d = (y - x.matmul(&wf.t().unwrap()).unwrap()).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-3, "{dtype:?}, {} rows through f32 tiles: differs by {d}", gemm_rows(DecodeActivations::Int8) + 3);
            // ... unless batch-invariant: then every row is the bits of the row alone, with either activations.
            for activations in [DecodeActivations::Int8, DecodeActivations::F32] {
                let all = packed_linear_rows(&x, &packed, activations, Batching::Invariant).unwrap().to_vec2::<f32>().unwrap();
                for i in [0, 17, x.dim(0).unwrap() - 1] {
                    let one = packed_linear(&x.narrow(0, i, 1).unwrap(), &packed, activations).unwrap().expect("qualifies");
                    assert_eq!(all[i], one.to_vec2::<f32>().unwrap()[0], "{dtype:?} {activations:?}: row {i} of a prompt differs from the row alone");
                }
            }
            let rows = packed.select_rows(&[69, 0, 69]).unwrap();
            let all = packed.dequantize();
            assert_eq!(&rows[..768], &all[69 * 768..]);
            assert_eq!(&rows[768..1536], &all[..768]);
            assert!(packed.select_rows(&[70]).is_err(), "a row past the end");
            let order: Vec<usize> = (0..70).rev().collect();
            let flipped = packed.reorder_rows(&order).dequantize();
            assert_eq!(&flipped[..768], &packed.dequantize()[69 * 768..]);
        }
    }

    /// A prompt through a matrix of several tiles: each tile's columns land where they belong.
    #[test]
    fn a_prompt_multiplies_every_tile_of_the_weights() {
        let dev = Device::Cpu;
        let (n, k) = (700, 512); // 512 rows a tile: one full tile and a part
        assert!(n * k > TILE_VALUES && TILE_VALUES / k < n);
        let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4K] {
            let q = QTensor::quantize(&w, dtype).unwrap();
            let packed = PackedRows::from_bytes(PackedRows::kept_format(dtype).unwrap(), n, k, q.data().unwrap().into_owned()).unwrap();
            let wf = Tensor::from_vec(packed.dequantize(), (n, k), &dev).unwrap();
            let x = Tensor::randn(0f32, 1.0, (2 * gemm_rows(DecodeActivations::Int8), k), &dev).unwrap();
            let y = packed_linear_rows(&x, &packed, DecodeActivations::F32, Batching::Fastest).unwrap();
            let want = x.matmul(&wf.t().unwrap()).unwrap();
            let d = (y - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-3, "{dtype:?}: differs by {d}");
        }
    }

    /// Several matrices in one parallel section give each one's own product, bit for bit.
    #[test]
    fn matrices_multiplied_together_give_each_ones_product() {
        let dev = Device::Cpu;
        let packed: Vec<PackedRows> = [(GgmlDType::Q4_0, 70), (GgmlDType::Q8_0, 30), (GgmlDType::Q6K, 5)]
            .into_iter()
            .map(|(dtype, rows)| {
                let q = QTensor::quantize(&Tensor::randn(0f32, 1.0, (rows, 256), &dev).unwrap(), dtype).unwrap();
                PackedRows::from_bytes(PackedRows::kept_format(dtype).unwrap(), rows, 256, q.data().unwrap().into_owned()).unwrap()
            })
            .collect();
        let mats: Vec<&PackedRows> = packed.iter().collect();
        for m in [1, 5, 16] {
            let x = Tensor::randn(0f32, 1.0, (m, 256), &dev).unwrap();
            for activations in [DecodeActivations::F32, DecodeActivations::Int8] {
                let together = packed_linear_each(&x, &mats, activations).unwrap();
                for (y, w) in together.iter().zip(&mats) {
                    let alone = packed_linear(&x, w, activations).unwrap().expect("qualifies");
                    assert_eq!(y.dims(), &[m, w.rows]);
                    assert_eq!(y.to_vec2::<f32>().unwrap(), alone.to_vec2::<f32>().unwrap(), "{:?}, {m} rows, {activations:?}", w.format);
                }
            }
            let wide = packed_linear_each(&Tensor::zeros((m, 512), candle_core::DType::F32, &dev).unwrap(), &mats, DecodeActivations::F32);
            assert!(wide.is_err(), "an input of another width is refused");
        }
    }
}
