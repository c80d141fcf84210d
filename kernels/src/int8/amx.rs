//! Intel AMX: eight tile registers of up to 16 rows × 64 bytes and one multiply that adds a 16 × 64 u8
//! tile times a 64 × 16 i8 tile into a 16 × 16 i32 tile. A query's ≤ 16 rows fill one tile, so a layer
//! is `out/16 × in/64` tile products, each reading one 1 KB block of the packed weights (the packed
//! layout is exactly AMX's "VNNI" layout for the right-hand tile).
//!
//! Rust has no stable AMX intrinsics, so the instructions are written with `asm!`; tile registers are
//! named in the templates (they are no register class), and nothing else in the program uses them.
//!
//! The tiles sum the codes `c` themselves, so `128 · Σ w` is subtracted per output after each store.

use super::BLOCK_OUT as LANES;
use std::arch::asm;

/// The 64-byte tile configuration `ldtilecfg` reads.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    /// Tiles 0-3: sums (rows × 16 i32); tile 4: activations (rows × 64 u8); tiles 5-6: weights
    /// (16 rows of 16 outputs × 4 inputs).
    fn new(rows: usize) -> Self {
        let mut c = [0u8; 64];
        c[0] = 1; // palette 1
        for (tile, tile_rows) in [(0, rows), (1, rows), (2, rows), (3, rows), (4, rows), (5, 16), (6, 16)] {
            c[16 + 2 * tile..18 + 2 * tile].copy_from_slice(&64u16.to_le_bytes());
            c[48 + tile] = tile_rows as u8;
        }
        TileConfig(c)
    }
}

macro_rules! tile_product {
    ($sum:literal, $weights:literal, $w:expr) => {
        asm!(
            concat!("tileloadd ", $weights, ", [{w} + {stride}*1]"),
            concat!("tdpbusd ", $sum, ", tmm4, ", $weights),
            w = in(reg) $w, stride = in(reg) 64usize, options(nostack, readonly),
        )
    };
}

macro_rules! store_sums {
    ($sum:literal, $out:expr, $stride:expr) => {
        asm!(concat!("tilestored [{o} + {s}*1], ", $sum), o = in(reg) $out, s = in(reg) $stride, options(nostack))
    };
}

/// Same contract as the reference (`generic::signed_sums`), for `in_dim` a multiple of 64.
///
/// # Safety
/// AMX must be usable ([`crate::path::amx_usable`]); `sums` as the reference requires.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn signed_sums(
    x: &[u8],
    rows: usize,
    in_dim: usize,
    packed: &[i8],
    offsets: &[i32],
    out_dim: usize,
    columns: std::ops::Range<usize>,
    sums: *mut i32,
) {
    debug_assert!(in_dim.is_multiple_of(64) && out_dim.is_multiple_of(64) && columns.start.is_multiple_of(64) && columns.end <= out_dim);
    debug_assert!(x.len() >= rows * in_dim && packed.len() == in_dim * out_dim);
    let block_bytes = in_dim * LANES; // one 16-output block
                                      // Columns outside, rows inside: a 64-column slice of the weights (24-96 KB) is read from
                                      // memory once and reused from the cache by every 16-row tile of a long input.
    let mut configured_rows = 0;
    for col in columns.step_by(64) {
        let w = packed.as_ptr().add((col / LANES) * block_bytes);
        for r0 in (0..rows).step_by(16) {
            let m = (rows - r0).min(16);
            if m != configured_rows {
                let config = TileConfig::new(m);
                asm!("ldtilecfg [{0}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
                configured_rows = m;
            }
            let xp = x.as_ptr().add(r0 * in_dim);
            asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
            for k in (0..in_dim).step_by(64) {
                asm!("tileloadd tmm4, [{x} + {stride}*1]", x = in(reg) xp.add(k), stride = in(reg) in_dim, options(nostack, readonly));
                // Block j's 16 groups of 4 inputs starting at input k: 16 rows of 64 bytes.
                let wk = w.add(k * LANES);
                // Ask for the weights two steps ahead (4 × 1 KB): the tile loads otherwise wait on
                // the cache hierarchy one after another.
                let ahead = k * LANES + 2 * 64 * LANES;
                if r0 == 0 && ahead < block_bytes {
                    for j in 0..4 {
                        let p = w.add(j * block_bytes + ahead);
                        for line in 0..16 {
                            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.add(line * 64));
                        }
                    }
                }
                tile_product!("tmm0", "tmm5", wk);
                tile_product!("tmm1", "tmm6", wk.add(block_bytes));
                tile_product!("tmm2", "tmm5", wk.add(2 * block_bytes));
                tile_product!("tmm3", "tmm6", wk.add(3 * block_bytes));
            }
            let out = sums.add(r0 * out_dim + col);
            let stride = out_dim * 4;
            store_sums!("tmm0", out, stride);
            store_sums!("tmm1", out.add(LANES), stride);
            store_sums!("tmm2", out.add(2 * LANES), stride);
            store_sums!("tmm3", out.add(3 * LANES), stride);
            for r in 0..m {
                let row = std::slice::from_raw_parts_mut(out.add(r * out_dim), 64);
                for (s, o) in row.iter_mut().zip(&offsets[col..col + 64]) {
                    *s -= o;
                }
            }
        }
    }
    asm!("tilerelease", options(nostack, nomem));
}
