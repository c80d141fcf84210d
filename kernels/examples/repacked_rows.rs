//! Weight panels against the GGUF blocks, one thread: `decode::panels_q8` (weights repacked so that a
//! register holds the same four inputs of 16 weight rows; see `kernels/src/decode/panels.rs`) beside
//! today's `decode::rows_blocks_q8`, for the formats Qwen2.5-Coder-0.5B Q4_K_M is made of, on its MLP's
//! shape, with 1 and 16 input rows; bench/decode_results.md has the numbers.
//!
//! `cargo run --release -p agentrt-kernels --example repacked_rows`

use agentrt_kernels::decode::{self, BlockFormat, Panels, Q8Rows};
use agentrt_kernels::KernelPath;
use std::time::Instant;

/// Seconds per call, the best of three 0.15 s windows.
fn time<F: FnMut()>(mut f: F) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let mut n = 0;
        while t.elapsed().as_secs_f64() < 0.15 {
            f();
            n += 1;
        }
        best = best.min(t.elapsed().as_secs_f64() / n as f64);
    }
    best
}

fn main() {
    println!("{}", agentrt_kernels::describe());
    // Qwen2.5-Coder-0.5B's MLP (4864 × 896, cut to whole K-quant super-blocks as kernel_speed does).
    let (n, k) = (4864, 768);
    for path in KernelPath::supported() {
        for format in [BlockFormat::Q5_0, BlockFormat::Q8_0, BlockFormat::Q4K, BlockFormat::Q6K] {
            let bb = format.block_bytes();
            // Small f16 scales at the start of each block (and Q6_K's at its end), other bytes varied.
            let blocks: Vec<u8> = (0..format.row_bytes(k) * n).map(|i| if i % bb < 4 || i % bb >= bb - 2 { 0x20 } else { (i * 13) as u8 }).collect();
            let panels = Panels::new(format, &blocks, n, k);
            for m in [1usize, 16] {
                let x: Vec<f32> = (0..m * k).map(|i| ((i % 13) as f32 - 6.0) * 0.1).collect();
                let q8 = Q8Rows::quantize(&x, m, k);
                let (mut today, mut repacked) = (vec![0f32; n * m], vec![0f32; n * m]);
                let t_today = time(|| decode::rows_blocks_q8(path, format, &q8, &blocks, &mut today));
                let t_panels = time(|| decode::panels_q8(path, &panels, 0, &q8, &mut repacked));
                let worst = today.iter().zip(&repacked).map(|(a, b)| (a - b).abs() / a.abs().max(1.0)).fold(0f32, f32::max);
                let gmacs = |t: f64| (m * n * k) as f64 / t / 1e9;
                println!(
                    "{:<8} {format:?} {n}x{k}, {m:>2} rows: blocks {:>6.1} GMAC/s   panels {:>6.1} GMAC/s   {:>5.2}x   largest difference {worst:.1e} (relative)",
                    path.name(),
                    gmacs(t_today),
                    gmacs(t_panels),
                    t_today / t_panels
                );
            }
        }
    }
}
