//! Weight panels against the GGUF blocks, one thread: every panel kernel this CPU runs
//! (`decode::panels_q8_on`: `maddubs`, VNNI, AMX tiles; weights repacked so that a register holds the same
//! four inputs of 16 weight rows, see `kernels/src/decode/panels.rs`) beside the block kernel
//! `decode::rows_blocks_q8`, for the formats Qwen2.5-Coder-0.5B Q4_K_M is made of, on its MLP's shape, with
//! 1 to 16 input rows; bench/decode_results.md has the numbers.
//!
//! `cargo run --release -p agentrt-kernels --example repacked_rows`

use agentrt_kernels::decode::{self, BlockFormat, PanelCodes, PanelKernel, Panels, Q8Rows};
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
    // Qwen2.5-Coder-0.5B's MLP (4864 × 896, cut to whole K-quant super-blocks as kernel_speed does); `N=256`
    // for a matrix that stays in L2, as a task's slice of weight rows does across a prompt's runs of rows.
    let (n, k) = (std::env::var("N").ok().and_then(|v| v.parse().ok()).unwrap_or(4864), 768);
    let path = KernelPath::best();
    let kernels: Vec<PanelKernel> = PanelKernel::supported().into_iter().filter(|&p| p != PanelKernel::Reference).collect();
    print!("{:<6} {:>4}  {:>8}", "format", "rows", "blocks");
    for kernel in &kernels {
        print!("  {:>13}  {:>13}", kernel.name(), format!("{} bytes", kernel.name()));
    }
    println!("   (GMAC/s, one thread; blocks: rows_blocks_q8 on {path}; largest difference to the blocks, relative)");
    for format in [BlockFormat::Q5_0, BlockFormat::Q8_0, BlockFormat::Q4K, BlockFormat::Q6K] {
        let bb = format.block_bytes();
        // Small f16 scales at the start of each block (and Q6_K's at its end), other bytes varied.
        let blocks: Vec<u8> = (0..format.row_bytes(k) * n).map(|i| if i % bb < 4 || i % bb >= bb - 2 { 0x20 } else { (i * 13) as u8 }).collect();
        // The 4- and 5-bit formats' codes as nibbles (the AVX-512 kernels' panels) and as bytes (AVX2's).
        let panels = [PanelCodes::Nibbles, PanelCodes::Bytes].map(|codes| Panels::new(format, &blocks, n, k, codes));
        for m in [1usize, 2, 4, 8, 12, 16] {
            let x: Vec<f32> = (0..m * k).map(|i| ((i % 13) as f32 - 6.0) * 0.1).collect();
            let q8 = Q8Rows::quantize(&x, m, k);
            let gmacs = |t: f64| (m * n * k) as f64 / t / 1e9;
            let mut today = vec![0f32; n * m];
            print!("{:<6} {m:>4}  {:>8.1}", format!("{format:?}"), gmacs(time(|| decode::rows_blocks_q8(path, format, &q8, &blocks, &mut today))));
            let mut worst = 0f32;
            for &kernel in &kernels {
                for panels in &panels {
                    let mut repacked = vec![0f32; n * m];
                    print!("  {:>13.1}", gmacs(time(|| decode::panels_q8_on(kernel, panels, 0, &q8, &mut repacked))));
                    worst = today.iter().zip(&repacked).map(|(a, b)| (a - b).abs() / a.abs().max(1.0)).fold(worst, f32::max);
                }
            }
            println!("   {worst:.1e}");
        }
    }
}
