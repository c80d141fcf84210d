//! Throughput of each kernel path on this CPU, single-threaded, for the shapes the project runs: the
//! MiniLM layers (a 15-word-piece query and a 128-word-piece section; weights to ±127, ±64 and ±32), SmolLM2-135M's decode products and
//! attention's values step over a rollout's cache (the generic path is the loop the sampler ran before the
//! intrinsics paths had one).
//!
//! `cargo run --release -p agentrt-kernels --example kernel_speed`

use agentrt_kernels::decode::{self, BlockFormat};
use agentrt_kernels::int8::{Int8Kernel, Int8Weights};
use agentrt_kernels::KernelPath;
use std::time::Instant;

fn time<F: FnMut()>(mut f: F) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let mut n = 0;
        while t.elapsed().as_secs_f64() < 0.2 {
            f();
            n += 1;
        }
        best = best.min(t.elapsed().as_secs_f64() / n as f64);
    }
    best
}

fn main() {
    println!("{}", agentrt_kernels::describe());
    let (in_dim, out_dim) = (384, 1536);
    let q: Vec<i8> = (0..in_dim * out_dim).map(|i| ((i * 7919) % 255) as i8).collect();
    let full = Int8Weights::new(&q, out_dim, in_dim);
    let q: Vec<i8> = (0..in_dim * out_dim).map(|i| ((i * 7919) % 129) as i8 - 64).collect();
    let narrow = Int8Weights::new(&q, out_dim, in_dim);
    let q: Vec<i8> = (0..in_dim * out_dim).map(|i| ((i * 7919) % 65) as i8 - 32).collect();
    let paired = Int8Weights::new(&q, out_dim, in_dim);
    for (rows, (weights, w)) in [15, 128].into_iter().flat_map(|r| [(r, ("±127", &full)), (r, ("±64", &narrow)), (r, ("±32", &paired))]) {
        let x: Vec<u8> = (0..rows * in_dim).map(|i| ((i * 31) % 255 + 1) as u8).collect();
        let mut sums = vec![0i32; rows * out_dim];
        for kernel in Int8Kernel::supported() {
            let s = time(|| w.signed_sums_with(kernel, &x, rows, &mut sums));
            let macs = (rows * in_dim * out_dim) as f64;
            println!("int8 {out_dim}x{in_dim} {weights:>4}, {rows:>3} rows, {:<13} {:>8.1} µs  {:>6.1} GMAC/s", kernel.name(), s * 1e6, macs / s / 1e9);
        }
    }
    // SmolLM2-135M's MLP (1536 x 576) and Qwen2.5-Coder-0.5B's (4864 x 896); 1, 8 and 16 rows (a wide batch's run).
    for ((n, k), m) in [((1536, 576), 8), ((1536, 576), 16), ((4864, 896), 1), ((4864, 896), 8), ((4864, 896), 16)] {
        let k = k / 256 * 256; // whole K-quant super-blocks
        let x: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.1).collect();
        let wf: Vec<f32> = (0..n * k).map(|i| (i % 17) as f32 * 0.01).collect();
        let mut out = vec![0f32; n * m];
        for path in KernelPath::supported() {
            let s = time(|| decode::rows_f32(path, &x, &wf, &mut out, m, k));
            let mut line = format!("decode {n}x{k}, {m} rows, {:<8} f32 {:>7.1} µs", path.name(), s * 1e6);
            use BlockFormat::*;
            for format in [Q4_0, Q4_1, Q5_0, Q8_0, Q4K, Q6K] {
                let bb = format.block_bytes();
                // Small f16 scales at the start of each block (and Q6_K's at its end), other bytes varied.
                let blocks: Vec<u8> = (0..format.row_bytes(k) * n).map(|i| if i % bb < 4 || i % bb >= bb - 2 { 0x20 } else { (i * 13) as u8 }).collect();
                let b = time(|| decode::rows_blocks(path, format, &x, &blocks, &mut out, m, k));
                let q = time(|| decode::rows_blocks_q8(path, format, &decode::Q8Rows::quantize(&x, m, k), &blocks, &mut out));
                line += &format!("  {format:?} {:>6.1} / {:>6.1}", b * 1e6, q * 1e6);
            }
            println!("{line}  (µs, f32 / 8-bit activations)");
        }
    }
    // One kv group's values step while decoding: its query heads as rows (SmolLM2-135M 3, Qwen2.5-Coder-0.5B
    // 7), 64 values a head, over a cache of 1,000 positions (a rollout's prompt, program and output).
    for rows in [3, 7] {
        let (hd, keys) = (64, 1000);
        let p: Vec<f32> = (0..keys * rows).map(|i| (i % 11) as f32 * 1e-3).collect();
        let v: Vec<f32> = (0..keys * hd).map(|i| (i % 19) as f32 * 0.1).collect();
        let seen = vec![keys; rows];
        let mut out = vec![0f32; rows * hd];
        for path in KernelPath::supported() {
            let s = time(|| decode::add_weighted_rows(path, &mut out, &p, rows, &v, &seen));
            let macs = (rows * hd * keys) as f64;
            println!("attention values {rows} rows x {hd}, {keys} keys, {:<8} {:>7.1} µs  {:>6.1} GMAC/s", path.name(), s * 1e6, macs / s / 1e9);
        }
    }
}
