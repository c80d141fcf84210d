//! Weight matrices kept in their GGUF block format (Q4_1, Q8_0) for decoding steps.
//!
//! Why: a decoding step reads every weight once and is bound by memory (540 MB of f32 per token for
//! SmolLM2-135M, at ~7.8 GB/s here). The default model ships as Q4_1 (20 bytes per 32 weights) with a Q8_0
//! embedding; dequantising each block in registers, with the same formula the loader used for the f32
//! copy (`q·d + m`), gives the very same weight values from 6.4x (Q4_1) and 3.8x (Q8_0) fewer bytes. The
//! f32 copy stays for training; a test holds the two to bit equality. The block kernels, one per
//! instruction set, are `agentrt_kernels::decode`.

use super::with_f32_slice;
pub use agentrt_kernels::decode::BlockFormat;
use agentrt_kernels::decode::{unpack_block, BLOCK};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Tensor};

/// A `(rows, cols)` matrix as row-major GGUF blocks.
#[derive(Debug, Clone)]
pub struct PackedRows {
    /// The GGUF block format the bytes are in (Q4_1 or Q8_0).
    pub format: BlockFormat,
    /// Output features: one row of blocks each.
    pub rows: usize,
    /// Input features per row (a multiple of the block size).
    pub cols: usize,
    bytes: Vec<u8>,
}

impl PackedRows {
    /// The blocks of a GGUF tensor of shape `(rows, cols)` in a kept format; `None` for other formats.
    pub fn from_gguf(q: &QTensor) -> candle_core::Result<Option<PackedRows>> {
        let format = match q.dtype() {
            GgmlDType::Q4_1 => BlockFormat::Q4_1,
            GgmlDType::Q8_0 => BlockFormat::Q8_0,
            _ => return Ok(None),
        };
        let (rows, cols) = q.shape().dims2()?;
        let bytes = q.data()?.into_owned();
        if cols % BLOCK != 0 || bytes.len() != rows * cols / BLOCK * format.block_bytes() {
            candle_core::bail!("packed rows: {} bytes do not hold a ({rows}, {cols}) {format:?} matrix", bytes.len());
        }
        Ok(Some(PackedRows { format, rows, cols, bytes }))
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

    /// Every weight as f32, row-major (tests hold it equal to the loader's f32 copy).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        let mut w = [0f32; BLOCK];
        for block in self.bytes.chunks_exact(self.format.block_bytes()) {
            unpack_block(self.format, block, &mut w);
            out.extend_from_slice(&w);
        }
        out
    }

    /// `out (m×rows) = x (m×cols) · Wᵀ`, for up to [`super::decode_linear::MAX_ROWS`] input rows, on the
    /// selected kernel path.
    pub fn few_rows_a_bt(&self, x: &[f32], out: &mut [f32], m: usize) {
        let (n, k) = (self.rows, self.cols);
        assert!(m <= super::decode_linear::MAX_ROWS, "{m} input rows: the packed kernel takes at most {}", super::decode_linear::MAX_ROWS);
        assert_eq!(x.len(), m * k, "input is not {m}x{k}");
        let (path, format) = (agentrt_kernels::selected(), self.format);
        let per_row = k / BLOCK * format.block_bytes();
        super::decode_linear::by_weight_rows(&self.bytes, per_row, (m, n), out, |wc, oc| agentrt_kernels::decode::rows_blocks(path, format, x, wc, oc, m, k));
    }
}

/// `x · Wᵀ` for `x: (.., cols)` f32 CPU with at most [`super::decode_linear::MAX_ROWS`] rows, from packed
/// weights; `None` when the input does not qualify (the caller uses the f32 weights then).
pub fn packed_linear(x: &Tensor, w: &PackedRows) -> candle_core::Result<Option<Tensor>> {
    let dims = x.dims().to_vec();
    let k = *dims.last().unwrap_or(&0);
    let m = x.elem_count() / k.max(1);
    if k != w.cols || m > super::decode_linear::MAX_ROWS || !x.device().is_cpu() || x.dtype() != DType::F32 {
        return Ok(None);
    }
    let x = x.contiguous()?;
    let mut out = vec![0f32; m * w.rows];
    with_f32_slice(&x, "packed-linear: input", |xs| w.few_rows_a_bt(xs, &mut out, m))?;
    let mut out_dims = dims;
    *out_dims.last_mut().expect("checked: the input has a last dimension") = w.rows;
    Ok(Some(Tensor::from_vec(out, out_dims, x.device())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn both_formats_dequantize_like_candle_and_multiply_like_the_f32_weights() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1.0, (70, 96), &dev).unwrap();
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0] {
            let q = QTensor::quantize(&w, dtype).unwrap();
            let packed = PackedRows::from_gguf(&q).unwrap().expect("a kept format");
            let reference = q.dequantize(&dev).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(packed.dequantize(), reference, "{dtype:?}: not the loader's weights, bit for bit");
            let wf = Tensor::from_vec(reference, (70, 96), &dev).unwrap();
            for m in [1, 5, 16] {
                let x = Tensor::randn(0f32, 1.0, (m, 96), &dev).unwrap();
                let y = packed_linear(&x, &packed).unwrap().expect("qualifies");
                let y_ref = x.matmul(&wf.t().unwrap()).unwrap();
                let d = (y - y_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(d < 1e-4, "{dtype:?}, {m} rows: differs by {d}");
            }
            let x = Tensor::randn(0f32, 1.0, (17, 96), &dev).unwrap();
            assert!(packed_linear(&x, &packed).unwrap().is_none(), "17 rows go to the gemm");
            let order: Vec<usize> = (0..70).rev().collect();
            let flipped = packed.reorder_rows(&order).dequantize();
            assert_eq!(&flipped[..96], &packed.dequantize()[69 * 96..]);
        }
    }
}
