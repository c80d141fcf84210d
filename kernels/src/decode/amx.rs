//! Intel AMX for the weight panels' 8-bit products (Sapphire Rapids and later): a panel block's 512 bytes of
//! codes are exactly AMX's right-hand tile for 32 inputs (8 rows, each the 16 weight rows' four codes), and
//! up to 16 input rows' quantised values are the left-hand one (16 rows of 32 bytes, read in place with the
//! rows' stride), so one `tdpbssd` (signed by signed bytes: no `+ 128` and no bias to take off) sums a
//! block for 16 weight rows times 16 input rows exactly in integers, where the VNNI kernel spends eight
//! `vpdpbusd`s and eight broadcasts on every input row.
//!
//! The float finish is the VNNI kernel's, operation for operation and block after block (`avx512.rs`,
//! `panels_of`): the exact sum converted once, the same scale product and fused add. So the tiles give the
//! panels' bits (module `panels`), and a row's product is the same alone (VNNI) as among 15 others
//! (tiles): decoding stays batch-invariant whichever kernel a row count takes.
//!
//! The sums of a set of two blocks (Q6_K: one, whose halves of 16 inputs have 8-bit scales of their own
//! and so a tile each) go through memory (a tile store, 2 KB in L1) to the floats; two sets of sum
//! tiles (`tmm0-1`, `tmm2-3`) take turns, so the tile unit multiplies the next set while the floats finish
//! this one. Rust has no stable AMX intrinsics: the instructions are `asm!`, the tile registers named in
//! the templates, and nothing else in the program uses them.

use super::avx512::panel_codes;
use super::generic::BlockFormat;
use super::generic::{Q8Rows, BLOCK};
use super::panels::{
    by_panel_format, CodeStore, Panels, BLOCK_CODES, BYTES, NIBBLES, NIBBLES_FIFTH_BIT, NIBBLES_LESS_8, OFFSETS, PANEL_ROWS, PLAIN, SUB_SCALES,
};
use std::arch::asm;
use std::arch::x86_64::*;

/// Blocks one set of sum tiles holds: two, each a tile (Q6_K: one, a tile per half).
const SET_TILES: usize = 2;

/// The 64-byte tile configuration `ldtilecfg` reads (palette 1).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    /// `tmm0-3`: `m` rows of 16 sums (two sets of two); `tmm4-5`: `m` rows of `inputs` activation bytes;
    /// `tmm6-7`: the panel's `inputs / 4` rows of 64 code bytes.
    fn new(m: usize, inputs: usize) -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1;
        let sums = (m, 64);
        let tiles = [sums, sums, sums, sums, (m, inputs), (m, inputs), (inputs / 4, 64), (inputs / 4, 64)];
        for (t, (rows, bytes)) in tiles.into_iter().enumerate() {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&(bytes as u16).to_le_bytes());
            c[48 + t] = rows as u8;
        }
        TileConfig(c)
    }
}

/// One set's sum tiles as stored: tile, input row, weight row.
#[repr(C, align(64))]
struct Sums([[[i32; PANEL_ROWS]; 16]; SET_TILES]);

/// `$sum = x tile · w tile` (signed bytes by signed bytes), both loaded first: the activations from `$xp`
/// with the input rows' stride, the codes from `$wp`, 64 bytes a row.
macro_rules! sum_tile {
    ($sum:literal, $x:literal, $w:literal, $xp:expr, $stride:expr, $wp:expr) => {
        asm!(
            concat!("tilezero ", $sum),
            concat!("tileloadd ", $x, ", [{x} + {stride}*1]"),
            concat!("tileloadd ", $w, ", [{w} + {row}*1]"),
            concat!("tdpbssd ", $sum, ", ", $x, ", ", $w),
            x = in(reg) $xp, stride = in(reg) $stride, w = in(reg) $wp, row = in(reg) 64usize,
            options(nostack, readonly),
        )
    };
}

/// Sum tile `$sum` to `$to`, 64 bytes a row.
macro_rules! store_tile {
    ($sum:literal, $to:expr) => {
        asm!(concat!("tilestored [{o} + {row}*1], ", $sum), o = in(reg) $to, row = in(reg) 64usize, options(nostack))
    };
}

/// The product of weight panels on AMX tiles, with the arithmetic of `super::panels_q8`.
///
/// # Safety
/// The CPU must have the AVX-512 path's features and AMX must be usable ([`crate::path::amx_usable`]);
/// sizes as `super::panels_q8` checks them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn panels_q8(p: &Panels, first: usize, x: &Q8Rows, out_rows: &mut [f32]) {
    by_panel_format!(p, x.m, panels_of(p, first, x, out_rows))
}

/// One set's codes widened to a byte each, a block a tile (the nibble formats: `tdpbssd` reads bytes).
#[repr(C, align(64))]
struct Codes([[u8; BLOCK_CODES]; SET_TILES]);

/// Where the tiles of one set read: the activations and the codes of each of its tiles.
struct SetOperands {
    x: [*const i8; SET_TILES],
    w: [*const i8; SET_TILES],
    tiles: usize,
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn panels_of<const M: usize, const KIND: u8, const STORE: u8>(p: &Panels, first: usize, x: &Q8Rows, out_rows: &mut [f32]) {
    let (sub_scales, offsets_too) = (KIND == SUB_SCALES, KIND == OFFSETS);
    let (blocks, k) = (p.blocks(), x.k);
    let panels = out_rows.len() / (PANEL_ROWS * M);
    // A tile sums `inputs` inputs: a block, or half of one where each half has its own 8-bit scale.
    let inputs = if sub_scales { BLOCK / 2 } else { BLOCK };
    let per_block = BLOCK / inputs;
    let set_blocks = SET_TILES / per_block;
    let sets_per_panel = blocks.div_ceil(set_blocks);
    let config = TileConfig::new(M, inputs);
    asm!("ldtilecfg [{0}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
    // Nibbles are widened to a byte a code in a buffer of the set's (the tile loads from memory); codes
    // kept as bytes are loaded where they lie.
    let widened = CodeStore::from_id(STORE) != CodeStore::Bytes;
    let mut codes = [Codes([[0; BLOCK_CODES]; SET_TILES]), Codes([[0; BLOCK_CODES]; SET_TILES])];
    // Set `s` (over all the call's panels, in order): panel `s / sets_per_panel`, blocks from
    // `(s % sets_per_panel) · set_blocks`, `tiles_of(s)` tiles (a widened block is one: only Q6_K's
    // halves take two, and its codes are bytes).
    let tiles_of = |s: usize| (blocks - (s % sets_per_panel) * set_blocks).min(set_blocks) * per_block;
    let mut operands = |s: usize| {
        let (g, b0) = (s / sets_per_panel, (s % sets_per_panel) * set_blocks);
        let unit = (first + g) * blocks + b0;
        let mut o = SetOperands { x: [std::ptr::null(); SET_TILES], w: [std::ptr::null(); SET_TILES], tiles: tiles_of(s) };
        for t in 0..o.tiles {
            o.x[t] = x.q.as_ptr().add((b0 + t / per_block) * BLOCK + (t % per_block) * inputs);
            o.w[t] = if widened {
                let buffer = &mut codes[s % 2].0[t];
                for (g, c) in panel_codes::<STORE>(p, unit + t).iter().enumerate() {
                    _mm512_storeu_si512(buffer.as_mut_ptr().add(g * 4 * PANEL_ROWS) as *mut __m512i, *c);
                }
                buffer.as_ptr() as *const i8
            } else {
                p.codes.as_ptr().add((unit + t / per_block) * BLOCK_CODES + (t % per_block) * inputs * PANEL_ROWS) as *const i8
            };
        }
        o
    };
    let mut sums = [Sums([[[0; PANEL_ROWS]; 16]; SET_TILES]), Sums([[[0; PANEL_ROWS]; 16]; SET_TILES])];
    let load_i32 = |at: *const i32| _mm512_loadu_si512(at as *const __m512i);
    let sets = panels * sets_per_panel;
    // Two sets of sum tiles in turn (tmm0-1, tmm2-3): the tile unit computes set `s + 1` while the floats
    // finish set `s` from memory, so neither waits for the other.
    let mut fill = |s: usize| {
        let o = operands(s);
        if s.is_multiple_of(2) {
            sum_tile!("tmm0", "tmm4", "tmm6", o.x[0], k, o.w[0]);
            if o.tiles > 1 {
                sum_tile!("tmm1", "tmm5", "tmm7", o.x[1], k, o.w[1]);
            }
        } else {
            sum_tile!("tmm2", "tmm4", "tmm6", o.x[0], k, o.w[0]);
            if o.tiles > 1 {
                sum_tile!("tmm3", "tmm5", "tmm7", o.x[1], k, o.w[1]);
            }
        }
    };
    let mut acc = [_mm512_setzero_ps(); M];
    fill(0);
    for s in 0..sets {
        let tiles = tiles_of(s);
        let buffer = &mut sums[s % 2];
        if s.is_multiple_of(2) {
            store_tile!("tmm0", buffer.0[0].as_mut_ptr());
            if tiles > 1 {
                store_tile!("tmm1", buffer.0[1].as_mut_ptr());
            }
        } else {
            store_tile!("tmm2", buffer.0[0].as_mut_ptr());
            if tiles > 1 {
                store_tile!("tmm3", buffer.0[1].as_mut_ptr());
            }
        }
        if s + 1 < sets {
            fill(s + 1);
        }
        let (g, b0) = (s / sets_per_panel, (s % sets_per_panel) * set_blocks);
        let buffer = &sums[s % 2];
        for i in 0..tiles / per_block {
            let (b, unit) = (b0 + i, (first + g) * blocks + b0 + i);
            let (sc_lo, sc_hi) = if sub_scales {
                let sc = p.sub_scales.as_ptr().add(unit * 2 * PANEL_ROWS);
                (load_i32(sc), load_i32(sc.add(PANEL_ROWS)))
            } else {
                (_mm512_setzero_si512(), _mm512_setzero_si512())
            };
            let scales = _mm512_loadu_ps(p.scales.as_ptr().add(unit * PANEL_ROWS));
            let offsets = if offsets_too { _mm512_loadu_ps(p.offsets.as_ptr().add(unit * PANEL_ROWS)) } else { _mm512_setzero_ps() };
            for (r, acc) in acc.iter_mut().enumerate() {
                let sum = if sub_scales {
                    let (lo, hi) = (load_i32(buffer.0[0][r].as_ptr()), load_i32(buffer.0[1][r].as_ptr()));
                    _mm512_add_epi32(_mm512_mullo_epi32(lo, sc_lo), _mm512_mullo_epi32(hi, sc_hi))
                } else {
                    load_i32(buffer.0[i][r].as_ptr())
                };
                let scale = _mm512_mul_ps(scales, _mm512_set1_ps(*x.scale.get_unchecked(r * blocks + b)));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, *acc);
                if offsets_too {
                    *acc = _mm512_fmadd_ps(offsets, _mm512_set1_ps(*x.scaled_sum_by_run.get_unchecked(b * M + r)), *acc);
                }
            }
        }
        if s % sets_per_panel == sets_per_panel - 1 {
            // Lane `j` of row `r`'s accumulator is weight row `j`'s output for it: `out[j][r]`.
            let out = &mut out_rows[g * PANEL_ROWS * M..][..PANEL_ROWS * M];
            let mut lanes = [[0f32; PANEL_ROWS]; M];
            for (lanes, acc) in lanes.iter_mut().zip(&acc) {
                _mm512_storeu_ps(lanes.as_mut_ptr(), *acc);
            }
            for (j, out) in out.chunks_exact_mut(M).enumerate() {
                for (o, lanes) in out.iter_mut().zip(&lanes) {
                    *o = lanes[j];
                }
            }
            acc = [_mm512_setzero_ps(); M];
        }
    }
    asm!("tilerelease", options(nostack, nomem));
}
