//! The learner's frozen products at a Qwen2.5-Coder-0.5B MLP shape (1,024 rows × 896 → 4,864), f32 gemm
//! against the int8 kernel with weights to ±127, ±64 and ±32, on all threads: what
//! [`agentrt_policy::fused::frozen_int8`] can gain on this CPU.
//!
//! `cargo run --release -p agentrt-policy --example int8_learner_speed`

use agentrt_kernels::int8::{Int8Kernel, Int8Weights};
use agentrt_policy::fused::gemm::{matmul, Read};
use rayon::prelude::*;
use std::time::Instant;

fn main() {
    println!("{}", agentrt_kernels::describe());
    let (n, k, out) = (1024usize, 896usize, 4864usize);
    let x: Vec<f32> = (0..n * k).map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5).collect();
    let w: Vec<f32> = (0..out * k).map(|i| ((i * 104729) % 997) as f32 * 1e-4 - 0.05).collect();
    let mut y = vec![0f32; n * out];
    let t = Instant::now();
    for _ in 0..3 {
        matmul(&x, Read::AsIs, &w, Read::Transposed, &mut y, (n, out, k), false);
    }
    let f32_s = t.elapsed().as_secs_f64() / 3.0;
    let macs = (n * k * out) as f64;
    println!("f32 gemm: {:.1} ms, {:.1} GMAC/s", f32_s * 1e3, macs / f32_s / 1e9);
    for (name, reach) in [("±127", 127i32), ("±64", 64), ("±32", 32)] {
        let q: Vec<i8> = w.iter().map(|v| ((v / 0.05) * reach as f32).round().clamp(-(reach as f32), reach as f32) as i8).collect();
        let wq = Int8Weights::new(&q, out, k);
        let codes: Vec<u8> = x.iter().map(|v| ((v * 254.0).round() as i32 + 128).clamp(1, 255) as u8).collect();
        let mut sums = vec![0i32; n * out];
        let kernel = Int8Kernel::selected();
        const CHUNK: usize = 64;
        let t = Instant::now();
        for _ in 0..3 {
            sums.par_chunks_mut(CHUNK * out).zip(codes.par_chunks(CHUNK * k)).for_each(|(s, c)| {
                let rows = c.len() / k;
                wq.signed_sums_with(kernel, c, rows, s);
            });
        }
        let s = t.elapsed().as_secs_f64() / 3.0;
        println!("int8 {name}: {:.1} ms, {:.1} GMAC/s ({:.2}x)", s * 1e3, macs / s / 1e9, f32_s / s);
    }
}
