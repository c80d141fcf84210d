//! Attention of a decoding step's few new positions over the KV cache, reading the cache in place.
//!
//! Why: in a rollout the cache is long (a system prompt, a demonstration and tool output: about a
//! thousand positions), and its keys and values outweigh the model: 8 rows x 1,000 positions of
//! SmolLM2-135M's are 368 MB a step against 84 MB of Q4_1 weights. Composed from candle ops, each layer's
//! scores went through a general matrix product that packed (copied) every cached key first. Here one
//! task per (row, kv group) streams its cached keys once through the decode kernels
//! (`agentrt_kernels::decode::rows_f32`: each key row dotted with the group's few query rows while it sits
//! in L1), and multiplies the probabilities into the values. No backward: sampling only.

use super::gemm::matmul_strided;
use super::Shared;
use candle_core::{CpuStorage, DType, Storage, Tensor};
use rayon::prelude::*;

/// Query rows (query heads of a group x new positions) up to which the streaming path is used; a longer
/// prefill goes through the composed ops, where the general product's packing pays for itself.
pub const MAX_QUERY_ROWS: usize = 16;

/// The f32 data of a CPU storage.
fn f32_data<'a>(s: &'a Storage, what: &str) -> candle_core::Result<&'a [f32]> {
    match s {
        Storage::Cpu(CpuStorage::F32(v)) => Ok(v),
        _ => candle_core::bail!("cached-attention: {what} must be an f32 CPU tensor"),
    }
}

/// `softmax(scale · q·kᵀ + mask) · v` for `q: (B, heads, t, hd)`, `k, v: (B, kv_heads, len, hd)` (views of
/// the cache's buffers) and an additive `mask: (B, 1, rep·t, len)` whose rows are a group's query heads
/// folded over `t` (head-major). Returns `(B, heads, t, hd)`. The composed candle ops where the streaming
/// path does not apply (off the CPU, other dtypes, more than [`MAX_QUERY_ROWS`] query rows a group, or
/// positions of a head not contiguous).
pub fn cached_attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
    let (b, nh, t, hd) = q.dims4()?;
    let (kb, nkv, len, khd) = k.dims4()?;
    if kb != b || khd != hd || v.dims() != k.dims() || nkv == 0 || !nh.is_multiple_of(nkv) {
        candle_core::bail!("cached-attention: q {:?}, k {:?}, v {:?} do not fit", q.shape(), k.shape(), v.shape());
    }
    let rep = nh / nkv;
    let rows = rep * t;
    if mask.dims() != [b, 1, rows, len] {
        candle_core::bail!("cached-attention: mask {:?} is not ({b}, 1, {rows}, {len})", mask.shape());
    }
    let on_cpu_f32 = [q, k, v, mask].iter().all(|x| x.device().is_cpu() && x.dtype() == DType::F32);
    let rows_contiguous = |x: &Tensor| x.stride()[3] == 1 && x.stride()[2] == hd;
    if !on_cpu_f32 || rows > MAX_QUERY_ROWS || !rows_contiguous(k) || !rows_contiguous(v) || len == 0 {
        return composed_cached_attention(q, k, v, mask, scale);
    }
    let q = q.contiguous()?;
    let mask = mask.contiguous()?;
    // The storages stay read-locked while the tasks read them in place.
    let (q_store, q_layout) = q.storage_and_layout();
    let (m_store, m_layout) = mask.storage_and_layout();
    let (k_store, k_layout) = k.storage_and_layout();
    let (v_store, v_layout) = v.storage_and_layout();
    let (qs, ms, ks, vs) = (f32_data(&q_store, "q")?, f32_data(&m_store, "mask")?, f32_data(&k_store, "k")?, f32_data(&v_store, "v")?);
    let (q0, m0, k0, v0) = (q_layout.start_offset(), m_layout.start_offset(), k_layout.start_offset(), v_layout.start_offset());
    let (kst, vst) = (k_layout.stride(), v_layout.stride());
    let path = agentrt_kernels::selected();
    let mut out = vec![0f32; b * nh * t * hd];
    let dst = Shared(out.as_mut_ptr());
    (0..b * nkv).into_par_iter().for_each(|task| {
        let (bi, g) = (task / nkv, task % nkv);
        // The group's queries: heads g·rep.., t positions each, contiguous rows of hd.
        let qg = ((bi * nh + g * rep) * t) * hd;
        let kg = k0 + bi * kst[0] + g * kst[1];
        let vg = v0 + bi * vst[0] + g * vst[1];
        // Scores, (len, rows): key j's dot with every query row of the group.
        let mut p = vec![0f32; len * rows];
        agentrt_kernels::decode::rows_f32(path, &qs[q0 + qg..q0 + qg + rows * hd], &ks[kg..kg + len * hd], &mut p, rows, hd);
        let mask_rows = &ms[m0 + bi * rows * len..m0 + (bi + 1) * rows * len];
        for (r, mr) in mask_rows.chunks(len).enumerate() {
            let mut max = f32::NEG_INFINITY;
            for (j, &m) in mr.iter().enumerate() {
                let s = &mut p[j * rows + r];
                *s = *s * scale as f32 + m;
                max = max.max(*s);
            }
            let mut sum = 0f32;
            for j in 0..len {
                let s = &mut p[j * rows + r];
                *s = (*s - max).exp();
                sum += *s;
            }
            let inv = 1.0 / sum;
            for j in 0..len {
                p[j * rows + r] *= inv;
            }
        }
        // SAFETY: p is (rows, len) read through strides (rows, 1), the values are len rows of hd at vg;
        // this task alone writes the group's rows of out.
        unsafe {
            matmul_strided((rows, hd, len), dst.at(qg), hd, false, p.as_ptr(), (rows, 1), vs[vg..].as_ptr(), (1, hd));
        }
    });
    drop((q_store, m_store, k_store, v_store));
    Tensor::from_vec(out, (b, nh, t, hd), q.device())
}

/// The same function from candle ops (the reference, and the path where the streaming one does not apply).
pub fn composed_cached_attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
    let (b, nh, t, hd) = q.dims4()?;
    let nkv = k.dim(1)?;
    let qg = q.reshape((b, nkv, nh / nkv * t, hd))?;
    let p = candle_nn::ops::softmax_last_dim(&(qg.matmul(&k.t()?)? * scale)?.broadcast_add(mask)?)?;
    p.matmul(v)?.reshape((b, nh, t, hd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Against the composed ops on cache-like views (a narrowed buffer with room to grow) and a mask
    /// with padding and causality, for one new position and for several.
    #[test]
    fn equals_the_composed_ops_on_views_of_a_growable_cache() {
        let dev = Device::Cpu;
        for (b, nh, nkv, t, len, cap) in [(3, 6, 2, 1, 37, 64), (2, 4, 4, 3, 20, 20), (1, 9, 3, 2, 130, 200)] {
            let hd = 16;
            let q = Tensor::randn(0f32, 1.0, (b, nh, t, hd), &dev).unwrap();
            let kbuf = Tensor::randn(0f32, 1.0, (b, nkv, cap, hd), &dev).unwrap();
            let vbuf = Tensor::randn(0f32, 1.0, (b, nkv, cap, hd), &dev).unwrap();
            let (k, v) = (kbuf.narrow(2, 0, len).unwrap(), vbuf.narrow(2, 0, len).unwrap());
            let rep = nh / nkv;
            // Row bi hides keys 2..2+bi (padding); query i sees keys up to len - t + i.
            let mut m = Vec::new();
            for bi in 0..b {
                for _ in 0..rep {
                    for i in 0..t {
                        m.extend((0..len).map(|j| if j <= len - t + i && !(2..2 + bi).contains(&j) { 0f32 } else { f32::NEG_INFINITY }));
                    }
                }
            }
            let mask = Tensor::from_vec(m, (b, 1, rep * t, len), &dev).unwrap();
            let got = cached_attention(&q, &k, &v, &mask, 0.25).unwrap();
            let want = composed_cached_attention(&q, &k.contiguous().unwrap(), &v.contiguous().unwrap(), &mask, 0.25).unwrap();
            let d = (got - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-5, "b {b}, heads {nh}/{nkv}, t {t}, len {len}: differs by {d}");
        }
    }
}
