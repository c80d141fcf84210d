//! Weight matrices kept in their GGUF block format (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K) for decoding steps.
//!
//! Why: a decoding step reads every weight once and is bound by memory (540 MB of f32 per token for
//! SmolLM2-135M, at ~7.8 GB/s here). The default model ships as Q4_1 (20 bytes per 32 weights) with a Q8_0
//! embedding; dequantising each block in registers, with the same formula the loader used for the f32
//! copy (`q·d + m`), gives the very same weight values from 6.4x (Q4_1) and 3.8x (Q8_0) fewer bytes. The
//! f32 copy stays for training; a test holds the two to bit equality. The block kernels, one per
//! instruction set, are `agentrt_kernels::decode`.

use super::with_f32_slice;
use agentrt_kernels::decode::unpack_block;
pub use agentrt_kernels::decode::BlockFormat;
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Tensor};

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
    /// in bench/decode_results.md; the trainer reports it as `logprob_gap_*`).
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

/// A `(rows, cols)` matrix as row-major GGUF blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedRows {
    /// The GGUF block format the bytes are in.
    pub format: BlockFormat,
    /// Output features: one row of blocks each.
    pub rows: usize,
    /// Input features per row (a multiple of the format's block).
    pub cols: usize,
    bytes: Vec<u8>,
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
        Ok(PackedRows { format, rows, cols, bytes })
    }

    /// The rows reordered: row `i` of the result is row `order[i]` of `self`.
    pub fn reorder_rows(&self, order: &[usize]) -> PackedRows {
        assert_eq!(order.len(), self.rows, "a row order must name every row once");
        let rb = self.bytes.len() / self.rows;
        let mut bytes = Vec::with_capacity(self.bytes.len());
        for &r in order {
            bytes.extend_from_slice(&self.bytes[r * rb..(r + 1) * rb]);
        }
        PackedRows { bytes, ..*self }
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

    /// `out (m×rows) = x (m×cols) · Wᵀ`, for up to [`super::decode_linear::MAX_ROWS`] input rows, on the
    /// selected kernel path, with `x` as `activations` says.
    pub fn few_rows_a_bt(&self, x: &[f32], out: &mut [f32], m: usize, activations: DecodeActivations) {
        let (n, k) = (self.rows, self.cols);
        assert!(m <= super::decode_linear::MAX_ROWS, "{m} input rows: the packed kernel takes at most {}", super::decode_linear::MAX_ROWS);
        assert_eq!(x.len(), m * k, "input is not {m}x{k}");
        let (path, format) = (agentrt_kernels::selected(), self.format);
        let per_row = format.row_bytes(k);
        match activations {
            DecodeActivations::F32 => super::decode_linear::by_weight_rows(&self.bytes, per_row, (m, n), out, |wc, oc| {
                agentrt_kernels::decode::rows_blocks(path, format, x, wc, oc, m, k)
            }),
            DecodeActivations::Int8 => {
                let xq = agentrt_kernels::decode::Q8Rows::quantize(x, m, k);
                super::decode_linear::by_weight_rows(&self.bytes, per_row, (m, n), out, |wc, oc| {
                    agentrt_kernels::decode::rows_blocks_q8(path, format, &xq, wc, oc)
                })
            }
        }
    }
}

/// `x · Wᵀ` for `x: (.., cols)` f32 CPU with at most [`super::decode_linear::MAX_ROWS`] rows, from packed
/// weights; `None` when the input does not qualify (the caller uses the f32 weights then).
pub fn packed_linear(x: &Tensor, w: &PackedRows, activations: DecodeActivations) -> candle_core::Result<Option<Tensor>> {
    let dims = x.dims().to_vec();
    let k = *dims.last().unwrap_or(&0);
    let m = x.elem_count() / k.max(1);
    if k != w.cols || m > super::decode_linear::MAX_ROWS || !x.device().is_cpu() || x.dtype() != DType::F32 {
        return Ok(None);
    }
    let x = x.contiguous()?;
    let mut out = vec![0f32; m * w.rows];
    with_f32_slice(&x, "packed-linear: input", |xs| w.few_rows_a_bt(xs, &mut out, m, activations))?;
    let mut out_dims = dims;
    *out_dims.last_mut().expect("checked: the input has a last dimension") = w.rows;
    Ok(Some(Tensor::from_vec(out, out_dims, x.device())?))
}

/// [`packed_linear`] for any number of rows (in runs of [`super::decode_linear::MAX_ROWS`]): the product
/// of a model whose weights have no f32 copy ([`crate::ModelWeights::blocks_only`]), prompts included.
pub fn packed_linear_rows(x: &Tensor, w: &PackedRows, activations: DecodeActivations) -> candle_core::Result<Tensor> {
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
    let run = super::decode_linear::MAX_ROWS;
    with_f32_slice(&x, "packed-linear: input", |xs| {
        for (xc, oc) in xs.chunks(run * k).zip(out.chunks_mut(run * w.rows)) {
            w.few_rows_a_bt(xc, oc, xc.len() / k, activations);
        }
    })?;
    let mut out_dims = dims;
    *out_dims.last_mut().expect("checked: the input has a last dimension") = w.rows;
    Tensor::from_vec(out, out_dims, x.device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QTensor;
    use candle_core::Device;

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
            // ... unless the f32 weights are not there: runs of 16 rows through the blocks.
            let y = packed_linear_rows(&x, &packed, DecodeActivations::F32).unwrap();
            let d = (y - x.matmul(&wf.t().unwrap()).unwrap()).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-3, "{dtype:?}, 37 rows in runs of 16: differs by {d}");
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
}
