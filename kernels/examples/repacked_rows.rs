//! The measurement behind the next layout of the 8-bit decode products (bench/decode_results.md, "Where
//! the time of Qwen's prompt goes"): Q8_0 weights repacked so that one AVX-512 register holds the same four
//! inputs of 16 weight rows, against today's `rows_blocks_q8` on the GGUF blocks, one thread.
//!
//! Today's kernel keeps a register's lanes on one weight row, so each `vpdpbusd` of 64 weights is followed
//! by a conversion, a scale product and a fused add in floats (four operations on the one port that runs
//! 512-bit arithmetic on most Xeons). Repacked, eight `vpdpbusd`s sum a 32-weight block of 16 weight rows
//! exactly in integers, and one conversion, product and add finish the block for all 16: about 43
//! multiply-adds an operation instead of 16. The sums are exact, so the only roundings left are one per
//! block and output, in block order, the same on any instruction set.
//!
//! `cargo run --release -p agentrt-kernels --example repacked_rows` (x86-64 with AVX-512 VNNI)

#[cfg(target_arch = "x86_64")]
mod repacked {
    use agentrt_kernels::decode::{self, BlockFormat, Q8Rows};
    use agentrt_kernels::KernelPath;
    use std::arch::x86_64::*;
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

    /// Q8_0 weights of `n` rows (a multiple of 16) by `k`: for each group of 16 rows and each block of 32
    /// inputs, eight 64-byte registers (register `j`: inputs `4j..4j + 4` of the 16 rows, a row a lane),
    /// then the block's 16 scales and its 16 `128 · Σ w` (the activations meet the weights as `x + 128`).
    struct Repacked {
        weights: Vec<u8>,
        scales: Vec<f32>,
        biases: Vec<i32>,
        n: usize,
        k: usize,
    }

    impl Repacked {
        fn new(w: &[i8], scales: &[f32], n: usize, k: usize) -> Repacked {
            let blocks = k / 32;
            let mut p = Repacked { weights: vec![0; n * k], scales: vec![0.0; n * blocks], biases: vec![0; n * blocks], n, k };
            for g in 0..n / 16 {
                for b in 0..blocks {
                    let at = g * blocks + b;
                    for r in 0..16 {
                        let row = &w[(g * 16 + r) * k + b * 32..][..32];
                        for (i, &v) in row.iter().enumerate() {
                            p.weights[(at * 8 + i / 4) * 64 + r * 4 + i % 4] = v as u8;
                        }
                        p.scales[at * 16 + r] = scales[(g * 16 + r) * blocks + b];
                        p.biases[at * 16 + r] = 128 * row.iter().map(|&v| v as i32).sum::<i32>();
                    }
                }
            }
            p
        }

        /// `out (M × n) = x · wᵀ`, `x_plus_128` the activations' bytes plus 128, `x_scales` theirs (`M × k/32`).
        ///
        /// # Safety
        /// The CPU must have AVX-512 F/BW/VL and VNNI; `x_plus_128` holds `M × k` bytes, `out` `M × n`.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn product<const M: usize>(&self, x_plus_128: &[u8], x_scales: &[f32], out: &mut [f32]) {
            let (k, blocks) = (self.k, self.k / 32);
            for g in 0..self.n / 16 {
                let mut acc = [_mm512_setzero_ps(); M];
                for b in 0..blocks {
                    let at = g * blocks + b;
                    let wp = self.weights.as_ptr().add(at * 512);
                    let w: [__m512i; 8] = std::array::from_fn(|j| _mm512_loadu_si512(wp.add(j * 64) as *const _));
                    let w_scales = _mm512_loadu_ps(self.scales.as_ptr().add(at * 16));
                    let minus_bias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(self.biases.as_ptr().add(at * 16) as *const _));
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let xp = x_plus_128.as_ptr().add(r * k + b * 32) as *const i32;
                        let mut sums = minus_bias;
                        for (j, w) in w.iter().enumerate() {
                            sums = _mm512_dpbusd_epi32(sums, _mm512_set1_epi32(xp.add(j).read_unaligned()), *w);
                        }
                        let scale = _mm512_mul_ps(w_scales, _mm512_set1_ps(x_scales[r * blocks + b]));
                        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, *acc);
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    _mm512_storeu_ps(out.as_mut_ptr().add(r * self.n + g * 16), *acc);
                }
            }
        }
    }

    pub fn main() {
        if !(KernelPath::Avx512.is_supported() && std::arch::is_x86_feature_detected!("avx512vnni")) {
            println!("this CPU has no AVX-512 VNNI: nothing to measure");
            return;
        }
        println!("{}", agentrt_kernels::describe());
        // Qwen2.5-Coder-0.5B's MLP (4864 × 896, cut to whole K-quant super-blocks as kernel_speed does).
        let (n, k) = (4864, 768);
        let blocks = k / 32;
        let w: Vec<i8> = (0..n * k).map(|i| ((i * 7919) % 255) as i8).collect();
        // Scales f16 holds exactly, so both sides multiply by the same numbers.
        let scales: Vec<f32> = (0..n * blocks).map(|i| (1 + i % 7) as f32 / 1024.0).collect();
        let repacked = Repacked::new(&w, &scales, n, k);
        let mut gguf = Vec::with_capacity(n * blocks * 34);
        for r in 0..n {
            for b in 0..blocks {
                // (1 + i) / 1024 as f16: exponent 15 - 10 + ⌊log2(1 + i)⌋, the rest in the mantissa.
                let s = scales[r * blocks + b].to_bits();
                let half = ((((s >> 23) & 0xff) as i32 - 127 + 15) as u16) << 10 | ((s >> 13) & 0x3ff) as u16;
                gguf.extend_from_slice(&half.to_le_bytes());
                gguf.extend(w[r * k + b * 32..][..32].iter().map(|&v| v as u8));
            }
        }
        for m in [1usize, 16] {
            let x: Vec<f32> = (0..m * k).map(|i| ((i % 13) as f32 - 6.0) * 0.1).collect();
            let q8 = Q8Rows::quantize(&x, m, k);
            let x_plus_128: Vec<u8> = q8.q.iter().map(|&v| (v as i32 + 128) as u8).collect();
            let mut today = vec![0f32; n * m];
            let t_today = time(|| decode::rows_blocks_q8(KernelPath::Avx512, BlockFormat::Q8_0, &q8, &gguf, &mut today));
            let mut out = vec![0f32; n * m];
            let t_repacked = match m {
                // SAFETY: AVX-512 VNNI was checked above; the buffers have the sizes `product` needs.
                1 => time(|| unsafe { repacked.product::<1>(&x_plus_128, &q8.scale, &mut out) }),
                // SAFETY: as above.
                _ => time(|| unsafe { repacked.product::<16>(&x_plus_128, &q8.scale, &mut out) }),
            };
            // Today's output is transposed: a weight row's m values side by side.
            let worst = (0..m)
                .flat_map(|r| (0..n).map(move |j| (r, j)))
                .map(|(r, j)| (today[j * m + r] - out[r * n + j]).abs() / today[j * m + r].abs().max(1.0))
                .fold(0f32, f32::max);
            let macs = (m * n * k) as f64;
            println!(
                "Q8_0 {n}x{k}, {m:>2} rows: today {:>7.1} µs {:>6.1} GMAC/s   repacked {:>7.1} µs {:>6.1} GMAC/s   {:.2}x   largest difference {worst:.1e} (relative)",
                t_today * 1e6,
                macs / t_today / 1e9,
                t_repacked * 1e6,
                macs / t_repacked / 1e9,
                t_today / t_repacked
            );
        }
    }
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    repacked::main();
    #[cfg(not(target_arch = "x86_64"))]
    println!("the repacked layout is measured on x86-64 with AVX-512 VNNI");
}
