//! The project's hand-written CPU kernels, each as a plain reference beside one file per instruction set,
//! and the run-time choice between them.
//!
//! The design in three parts:
//!
//! - **Who chooses** ([`path`]): a [`KernelPath`] is the widest instruction set the kernels may use:
//!   `generic` (plain Rust for the build target), `avx2` (x86-64-v3: AVX2 + FMA + F16C), `avx512` (AVX-512 F/BW/
//!   VL/DQ, and VNNI or AMX tiles where present) or `neon` (aarch64). [`selected`] picks the best one the
//!   CPU has, once, unless `AGENTRT_KERNELS=generic|avx2|avx512|neon` forces one; forcing a path the CPU
//!   lacks is an error that says what is missing. [`describe`] names the CPU, its features and the
//!   kernels that run, so every benchmark line can say where it came from.
//! - **What computes** ([`int8`], [`decode`]): the int8 products of the MiniLM encoder and the section
//!   scan (exact integer sums, so every path gives the same bits), and the few-row products of a decoding
//!   step, from f32 rows or from GGUF blocks (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K), with f32 activations
//!   or with activations rounded to 8 bits and integer dot products (the NEON path gives the reference's
//!   bits; the AVX2 and AVX-512 paths use fused multiply-adds and agree to rounding, within
//!   `1e-5 · Σ|x·w|`). Each module has `generic.rs` (the reference) and a file per instruction set; the
//!   callers (`agentrt-search`, `agentrt-policy`) own threading, tensors and model layouts.
//! - **Who checks**: each module's tests run every path the machine supports against the reference
//!   ([`KernelPath::supported`]), and CI runs them for aarch64 under qemu-user.
//!
//! Loops that are not kernels of their own (the encoder's layer norms, GELU and attention) get the same
//! choice by being compiled once per path with `#[target_feature]`; see `agentrt-search`'s `int8_bert`.

pub mod decode;
pub mod half;
pub mod int8;
pub mod path;
pub mod test_data;

pub use path::{selected, KernelPath};

/// One line for logs and benchmarks: the CPU, its features, and the kernels that run, e.g.
/// `cpu: AMD EPYC (x86_64); features: avx2 fma f16c ...; kernels: avx2 (int8 avx2-maddubs; panels
/// avx2-maddubs)`, or on a Xeon with AMX `... (int8 amx; panels avx512-vnni, amx from 12 rows)`.
pub fn describe() -> String {
    let path = path::selected();
    let forced = std::env::var(path::KERNELS_ENV).ok().filter(|v| !v.trim().is_empty() && v.trim() != "auto");
    let (one, many) = (decode::PanelKernel::for_rows(path, 1), decode::PanelKernel::for_rows(path, decode::MAX_ROWS));
    format!(
        "{}; kernels: {}{} (int8 {}; panels {})",
        path::cpu_line(),
        path,
        if forced.is_some() { format!(", forced by {}", path::KERNELS_ENV) } else { String::new() },
        int8::Int8Kernel::for_path(path).name(),
        if one == many { one.name().to_string() } else { format!("{}, {} from {} rows", one.name(), many.name(), decode::AMX_FROM_ROWS) }
    )
}
