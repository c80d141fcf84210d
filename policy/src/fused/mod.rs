//! CPU training ops with hand-written backward passes, where composing candle ops costs many passes over
//! large tensors (each a fresh allocation, most single-threaded) or computes gradients nobody needs. Each
//! op is parallel over rows with rayon, falls back to composed candle ops off the CPU, and has a test that
//! compares its values and gradients with that composed reference.

pub mod attention;
pub mod cached_attention;
pub mod causal_softmax;
pub mod decode_linear;
pub mod frozen_int8;
pub mod gemm;
pub mod log_prob_head;
pub mod packed_rows;
pub mod projection;
pub mod rms_norm;
pub mod rope;
pub mod silu_mul;
pub mod tree_attention;

pub use attention::{causal_attention, AttentionShape};
pub use cached_attention::{cached_attention, CachedSequence};
pub use decode_linear::{decode_linear, Batching, MAX_ROWS};
pub use frozen_int8::{FrozenInt8, LearnerProducts};
pub use log_prob_head::head_log_probs;
pub use packed_rows::{packed_linear, packed_linear_each, packed_linear_rows, DecodeActivations, PackedRows};
pub use projection::{add_lora_delta, projection};
pub use rms_norm::rms_norm;
pub use rope::{rope, rope_token_major};
pub use silu_mul::silu_mul;
pub use tree_attention::{tree_attention, TreeShape, TreeSpan};

use candle_core::{CpuStorage, Layout, Storage, Tensor};

/// A raw pointer to one output buffer, handed to the parallel tasks of an op that each write their own
/// disjoint part of it (a sequence's or a unit's rows of one kv group: see each op).
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: the ops hand a `Shared` only to tasks that write disjoint elements of its buffer.
unsafe impl Send for Shared {}
// SAFETY: as for Send: no two tasks touch the same element, so shared references race on nothing.
unsafe impl Sync for Shared {}

impl Shared {
    /// A method, not the field, so closures capture the whole `Shared` (which is `Send`).
    fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: callers keep `offset` inside the buffer.
        unsafe { self.0.add(offset) }
    }
}

/// Borrows a contiguous f32 CPU tensor's data for `f`; `what` names the tensor in errors.
fn with_f32_slice<R>(t: &Tensor, what: &str, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what} must be contiguous");
    };
    match &*storage {
        Storage::Cpu(CpuStorage::F32(v)) => Ok(f(&v[start..end])),
        _ => candle_core::bail!("{what} must be an f32 CPU tensor"),
    }
}

/// The data of a contiguous f32 CPU storage under `layout`.
fn contiguous_f32<'a>(s: &'a CpuStorage, layout: &Layout, op: &str) -> candle_core::Result<&'a [f32]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{op}: input must be contiguous");
    };
    match s {
        CpuStorage::F32(v) => Ok(&v[start..end]),
        _ => candle_core::bail!("{op}: input must be f32"),
    }
}

/// Rows of width `h` per parallel task: about 16 K elements, at least one row.
fn par_rows(h: usize) -> usize {
    (16_384 / h.max(1)).max(1)
}
