//! Causal attention over a tree of token spans, as one op with its backward.
//!
//! Why: the samples of a training step share tokens. The G samples of a group start with the same prompt
//! (system prompt, demonstration, question), and an agent that writes the same program as its neighbours
//! reads the same output: their sequences share a prefix far past the prompt, then part and maybe share
//! again. Forwarding each sample whole computes the shared tokens' activations once per sample, in the
//! policy's pass and in the KL reference's. Here the rows are the spans of a tree (a trie of the samples'
//! token sequences), each span after its parent's: a span's row `j` sees every row of its ancestors and its
//! own rows `0..=j`, as if the path from the root were one sequence. Everything else in a decoder block
//! works row by row, so it runs once on a shared span; a span's keys and values collect the gradient of
//! every descendant that reads them, which is exactly the sum the separate backward passes would make.
//! A shared prompt and the samples that continue it ([`TreeShape::prefixed`]) is the two-level tree.
//!
//! One task per (span, kv group). A task gathers its keys and values (its ancestors', then its own) into
//! one block, so the products are plain strided matrix products; in the backward each task returns its
//! keys' and values' gradients and they are added in a fixed order afterwards (an ancestor's rows are
//! shared by every descendant's task, so no task writes them directly).

use super::attention::{composed_causal_attention, AttentionShape, GroupedHeads};
use super::causal_softmax::{softmax_row, softmax_row_backward};
use super::contiguous_f32;
use super::gemm::matmul_strided;
use super::Shared;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// One span of a [`TreeShape`]: its rows continue its parent's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeSpan {
    /// The span it continues (an earlier one), or `None` for a root (a sequence's start).
    pub parent: Option<usize>,
    /// Its rows, laid out after every earlier span's.
    pub rows: usize,
}

/// The rows of one call: spans of tokens, each continuing its parent span (or starting a sequence).
#[derive(Clone, Debug, PartialEq)]
pub struct TreeShape {
    /// The spans, in row order; a parent comes before its children.
    pub spans: Vec<TreeSpan>,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Each span's first row (derived).
    starts: Vec<usize>,
    /// Each span's ancestors, root first (derived).
    ancestors: Vec<Vec<usize>>,
    /// Each span's depth: its ancestors' rows, the position of its first row in its sequence (derived).
    depths: Vec<usize>,
}

impl GroupedHeads for TreeShape {
    fn head_counts(&self) -> (usize, usize, usize) {
        (self.heads, self.kv_heads, self.head_dim)
    }
}

impl TreeShape {
    /// The tree of `spans` (a parent must come before its children; an error otherwise).
    pub fn new(spans: Vec<TreeSpan>, heads: usize, kv_heads: usize, head_dim: usize) -> candle_core::Result<TreeShape> {
        let mut starts = Vec::with_capacity(spans.len());
        let mut ancestors: Vec<Vec<usize>> = Vec::with_capacity(spans.len());
        let mut depths: Vec<usize> = Vec::with_capacity(spans.len());
        let mut row = 0;
        for (u, s) in spans.iter().enumerate() {
            starts.push(row);
            row += s.rows;
            let (chain, depth) = match s.parent {
                None => (Vec::new(), 0),
                Some(p) if p < u => {
                    let mut c = ancestors[p].clone();
                    c.push(p);
                    (c, depths[p] + spans[p].rows)
                }
                Some(p) => candle_core::bail!("tree span {u} continues span {p}, which does not come before it"),
            };
            ancestors.push(chain);
            depths.push(depth);
        }
        Ok(TreeShape { spans, heads, kv_heads, head_dim, starts, ancestors, depths })
    }

    /// A shared prefix of `prefix` rows and the segments that continue it, each as if it were the sequence
    /// `prefix ++ segment`; with no prefix, every segment is a sequence of its own.
    pub fn prefixed(prefix: usize, segments: &[usize], heads: usize, kv_heads: usize, head_dim: usize) -> candle_core::Result<TreeShape> {
        let root = (prefix > 0).then_some(0);
        let mut spans: Vec<TreeSpan> = root.map(|_| TreeSpan { parent: None, rows: prefix }).into_iter().collect();
        spans.extend(segments.iter().map(|&rows| TreeSpan { parent: root, rows }));
        TreeShape::new(spans, heads, kv_heads, head_dim)
    }

    /// All rows.
    pub fn rows(&self) -> usize {
        self.spans.iter().map(|s| s.rows).sum()
    }

    /// Span `u`'s first row.
    pub fn start(&self, u: usize) -> usize {
        self.starts[u]
    }

    /// The rows before span `u` on its path: its ancestors' (its first row's position in its sequence).
    pub fn depth(&self, u: usize) -> usize {
        self.depths[u]
    }

    /// Each row's position in its sequence (the RoPE angles of the rows): span `u`'s rows are at
    /// `depth(u)..depth(u) + rows`.
    pub fn positions(&self) -> Vec<u32> {
        let mut p = Vec::with_capacity(self.rows());
        for (u, s) in self.spans.iter().enumerate() {
            let d = self.depth(u) as u32;
            p.extend(d..d + s.rows as u32);
        }
        p
    }

    /// The rows span `u`'s queries read, in order: each ancestor's, root first, then its own.
    fn key_rows(&self, u: usize) -> impl Iterator<Item = usize> + '_ {
        self.ancestors[u].iter().copied().chain(std::iter::once(u)).flat_map(move |a| self.starts[a]..self.starts[a] + self.spans[a].rows)
    }

    /// Keys span `u`'s queries read.
    fn keys(&self, u: usize) -> usize {
        self.depth(u) + self.spans[u].rows
    }

    /// Keys query `i` of span `u` may see.
    fn seen(&self, u: usize, i: usize) -> usize {
        self.depth(u) + i + 1
    }
}

struct TreeAttention {
    shape: TreeShape,
}

impl TreeAttention {
    /// The keys (or values) span `u` reads, group `g`, gathered into a contiguous `(keys, hd)` block.
    fn gather(&self, x: &[f32], u: usize, g: usize) -> Vec<f32> {
        let s = &self.shape;
        let (hd, w) = (s.head_dim, s.kv_width());
        let mut out = Vec::with_capacity(s.keys(u) * hd);
        for r in s.key_rows(u) {
            out.extend_from_slice(&x[r * w + g * hd..r * w + (g + 1) * hd]);
        }
        out
    }

    /// `p ← softmax(scale · q_h · kᵀ + mask)` for the queries of span `u`, `p: (len, keys)`.
    fn probabilities(&self, q: &[f32], kcat: &[f32], u: usize, h: usize, p: &mut [f32]) {
        let s = &self.shape;
        let (start, len) = (s.start(u), s.spans[u].rows);
        let nk = s.keys(u);
        // SAFETY: the queries of head h span rows start..start+len of q at column h·hd; kcat is (nk, hd); p is (len, nk).
        unsafe {
            matmul_strided(
                (len, nk, s.head_dim),
                p.as_mut_ptr(),
                nk,
                false,
                q[start * s.q_width() + h * s.head_dim..].as_ptr(),
                (1, s.q_width()),
                kcat.as_ptr(),
                (s.head_dim, 1),
            );
        }
        for (i, row) in p.chunks_mut(nk).enumerate() {
            softmax_row(row, s.seen(u, i), s.scale());
        }
    }

    fn units(&self) -> usize {
        self.shape.spans.len()
    }
}

impl CustomOp3 for TreeAttention {
    fn name(&self) -> &'static str {
        "tree-attention"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let s = &self.shape;
        let rows = s.rows();
        if l1.shape().dims() != [rows, s.q_width()] || l2.shape().dims() != [rows, s.kv_width()] || l3.shape().dims() != [rows, s.kv_width()] {
            candle_core::bail!("tree-attention: q {:?}, k {:?}, v {:?} do not fit {s:?}", l1.shape(), l2.shape(), l3.shape());
        }
        let (q, k, v) = (contiguous_f32(s1, l1, self.name())?, contiguous_f32(s2, l2, self.name())?, contiguous_f32(s3, l3, self.name())?);
        let (hd, rep) = (s.head_dim, s.heads / s.kv_heads);
        let mut out = vec![0f32; rows * s.q_width()];
        let dst = Shared(out.as_mut_ptr());
        (0..self.units() * s.kv_heads).into_par_iter().for_each(|task| {
            let (u, g) = (task / s.kv_heads, task % s.kv_heads);
            let (start, len) = (s.start(u), s.spans[u].rows);
            let nk = s.keys(u);
            if len == 0 {
                return;
            }
            let (kcat, vcat) = (self.gather(k, u, g), self.gather(v, u, g));
            let mut p = vec![0f32; len * nk];
            for h in g * rep..(g + 1) * rep {
                self.probabilities(q, &kcat, u, h, &mut p);
                // SAFETY: this task alone writes head h of span u's rows of out.
                unsafe {
                    let d = dst.at(start * s.q_width() + h * hd);
                    matmul_strided((len, hd, nk), d, s.q_width(), false, p.as_ptr(), (1, nk), vcat.as_ptr(), (1, hd));
                }
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((rows, s.q_width()))))
    }

    fn bwd(&self, q: &Tensor, k: &Tensor, v: &Tensor, _out: &Tensor, grad: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let s = &self.shape;
        let (hd, rep) = (s.head_dim, s.heads / s.kv_heads);
        let (qs, ks, vs) = (q.flatten_all()?.to_vec1::<f32>()?, k.flatten_all()?.to_vec1::<f32>()?, v.flatten_all()?.to_vec1::<f32>()?);
        let dout = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let mut dq = vec![0f32; qs.len()];
        let dq_p = Shared(dq.as_mut_ptr());
        // Each task's key and value gradients, (keys, hd) in its gathered order.
        let parts: Vec<(usize, usize, Vec<f32>, Vec<f32>)> = (0..self.units() * s.kv_heads)
            .into_par_iter()
            .map(|task| {
                let (u, g) = (task / s.kv_heads, task % s.kv_heads);
                let (start, len) = (s.start(u), s.spans[u].rows);
                let nk = s.keys(u);
                let (mut dk, mut dv) = (vec![0f32; nk * hd], vec![0f32; nk * hd]);
                if len == 0 {
                    return (u, g, dk, dv);
                }
                let (kcat, vcat) = (self.gather(&ks, u, g), self.gather(&vs, u, g));
                let (mut p, mut ds) = (vec![0f32; len * nk], vec![0f32; len * nk]);
                for h in g * rep..(g + 1) * rep {
                    let q0 = start * s.q_width() + h * hd;
                    self.probabilities(&qs, &kcat, u, h, &mut p);
                    // SAFETY: (all four products) the operands lie inside their buffers at the offsets and
                    // strides given; this task alone writes head h of span u's rows of dq, and its own dk, dv.
                    unsafe {
                        // dP = dO_h · Vᵀ
                        matmul_strided((len, nk, hd), ds.as_mut_ptr(), nk, false, dout[q0..].as_ptr(), (1, s.q_width()), vcat.as_ptr(), (hd, 1));
                        for (i, (dr, pr)) in ds.chunks_mut(nk).zip(p.chunks(nk)).enumerate() {
                            softmax_row_backward(dr, pr, s.seen(u, i), s.scale());
                        }
                        // dQ_h = dS · K
                        matmul_strided((len, hd, nk), dq_p.at(q0), s.q_width(), false, ds.as_ptr(), (1, nk), kcat.as_ptr(), (1, hd));
                        // dK += dSᵀ · Q_h
                        matmul_strided((nk, hd, len), dk.as_mut_ptr(), hd, true, ds.as_ptr(), (nk, 1), qs[q0..].as_ptr(), (1, s.q_width()));
                        // dV += Pᵀ · dO_h
                        matmul_strided((nk, hd, len), dv.as_mut_ptr(), hd, true, p.as_ptr(), (nk, 1), dout[q0..].as_ptr(), (1, s.q_width()));
                    }
                }
                (u, g, dk, dv)
            })
            .collect();
        // Scatter in task order: an ancestor's rows sum what every descendant gave them, always in the same
        // order.
        let w = s.kv_width();
        let (mut dk, mut dv) = (vec![0f32; ks.len()], vec![0f32; vs.len()]);
        for (u, g, pk, pv) in parts {
            for (i, r) in s.key_rows(u).enumerate() {
                let (dst, src) = (r * w + g * hd, i * hd);
                for j in 0..hd {
                    dk[dst + j] += pk[src + j];
                    dv[dst + j] += pv[src + j];
                }
            }
        }
        let dev = q.device();
        Ok((Some(Tensor::from_vec(dq, q.shape(), dev)?), Some(Tensor::from_vec(dk, k.shape(), dev)?), Some(Tensor::from_vec(dv, v.shape(), dev)?)))
    }
}

/// Attention of `q: (rows, heads·hd)` over `k`, `v: (rows, kv_heads·hd)` (RoPE applied at
/// [`TreeShape::positions`]) for rows laid out as `shape` says; returns `(rows, heads·hd)`, differentiable
/// in all three. Off the CPU it is composed from candle ops ([`composed_tree_attention`]).
pub fn tree_attention(q: &Tensor, k: &Tensor, v: &Tensor, shape: &TreeShape) -> candle_core::Result<Tensor> {
    if shape.kv_heads == 0 || !shape.heads.is_multiple_of(shape.kv_heads) {
        candle_core::bail!("tree-attention: {} query heads do not group over {} kv heads", shape.heads, shape.kv_heads);
    }
    if !q.device().is_cpu() || q.dtype() != DType::F32 {
        return composed_tree_attention(q, k, v, shape);
    }
    let op = TreeAttention { shape: shape.clone() };
    q.contiguous()?.apply_op3_arc(&k.contiguous()?, &v.contiguous()?, Arc::new(Box::new(op)))
}

/// The same function as separate sequences: each span's path from the root attended whole and the span's
/// rows kept (the reference the op is tested against, and the path off the CPU).
pub fn composed_tree_attention(q: &Tensor, k: &Tensor, v: &Tensor, s: &TreeShape) -> candle_core::Result<Tensor> {
    let one = |seq: usize| AttentionShape { batch: 1, seq, heads: s.heads, kv_heads: s.kv_heads, head_dim: s.head_dim };
    let mut parts = Vec::with_capacity(s.spans.len());
    for (u, span) in s.spans.iter().enumerate() {
        if span.rows == 0 {
            continue;
        }
        let idx: Vec<u32> = s.key_rows(u).map(|r| r as u32).collect();
        let n = idx.len();
        let idx = Tensor::from_vec(idx, n, q.device())?;
        let whole = composed_causal_attention(&q.index_select(&idx, 0)?, &k.index_select(&idx, 0)?, &v.index_select(&idx, 0)?, one(n))?;
        parts.push(whole.narrow(0, s.depth(u), span.rows)?);
    }
    Tensor::cat(&parts, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn span(parent: Option<usize>, rows: usize) -> TreeSpan {
        TreeSpan { parent, rows }
    }

    /// The op against the same attention computed path by path (each span with its ancestors in front):
    /// values, and the gradients of q, k and v, whose shared rows sum over every span that reads them.
    #[test]
    fn equals_attending_each_path_whole() {
        let dev = Device::Cpu;
        let trees = [
            TreeShape::prefixed(5, &[3, 7, 1], 6, 2, 8).unwrap(),
            TreeShape::prefixed(0, &[4, 2], 6, 2, 8).unwrap(),
            TreeShape::prefixed(6, &[], 6, 2, 8).unwrap(),
            TreeShape::prefixed(4, &[0, 3], 6, 2, 8).unwrap(),
            // A prompt, two samples that agree for 5 rows and then part, a third on its own, and a
            // second sequence of its own: three levels and two roots.
            TreeShape::new(
                vec![span(None, 4), span(Some(0), 5), span(Some(1), 2), span(Some(1), 3), span(Some(0), 6), span(None, 3), span(Some(5), 2)],
                6,
                2,
                8,
            )
            .unwrap(),
        ];
        for shape in trees {
            let rows = shape.rows();
            let q = Var::randn(0f32, 1.0, (rows, 48), &dev).unwrap();
            let k = Var::randn(0f32, 1.0, (rows, 16), &dev).unwrap();
            let v = Var::randn(0f32, 1.0, (rows, 16), &dev).unwrap();
            let probe = Tensor::randn(0f32, 1.0, (rows, 48), &dev).unwrap();
            let y = tree_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), &shape).unwrap();
            let y_ref = composed_tree_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), &shape).unwrap();
            let d = (&y - &y_ref).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-5, "{shape:?}: values differ by {d}");
            let g = (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
            let g_ref = (y_ref * &probe).unwrap().sum_all().unwrap().backward().unwrap();
            for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
                let d = (g.get(x.as_tensor()).unwrap() - g_ref.get(x.as_tensor()).unwrap()).unwrap();
                let d = d.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(d < 1e-4, "{shape:?}: gradients of {name} differ by {d}");
            }
        }
    }

    #[test]
    fn positions_continue_each_span_from_its_parent() {
        let shape = TreeShape::prefixed(3, &[2, 1], 2, 1, 4).unwrap();
        assert_eq!(shape.positions(), vec![0, 1, 2, 3, 4, 3]);
        assert_eq!(shape.rows(), 6);
        let tree = TreeShape::new(vec![span(None, 2), span(Some(0), 3), span(Some(1), 1), span(Some(0), 2)], 2, 1, 4).unwrap();
        assert_eq!(tree.positions(), vec![0, 1, 2, 3, 4, 5, 2, 3]);
        assert!(TreeShape::new(vec![span(Some(1), 2), span(None, 1)], 2, 1, 4).is_err(), "a parent after its child");
    }
}
