//! GGUF weight rows repacked for the 8-bit products: panels of [`PANEL_ROWS`] weight rows in which one
//! 512-bit register holds the same four inputs of all 16 rows, and the plain reference of their product.
//!
//! Why: on the GGUF blocks a register's lanes belong to one weight row, so every integer dot product of
//! 64 weights is followed, for every input row, by a conversion, a scale product and a fused add in
//! floats; on a Xeon whose 512-bit arithmetic issues on one port that bounds the product at ~16
//! multiply-adds an operation (bench/decode_results.md, "Where the time of Qwen's prompt goes"). In a
//! panel, eight `vpdpbusd`s sum a block of 32 inputs for 16 weight rows exactly, and one conversion,
//! product and add finish the block for all 16 (`kernels/examples/repacked_rows.rs`: 4.9-5.4x at 16 rows,
//! 1.24-1.34x at one).
//!
//! The arithmetic, the same bits on every path and for any number of input rows: for each output (weight
//! row `j`, input row `r`) and each block `b` of 32 inputs in order, the integer sum of the codes times
//! the quantised inputs, exact in `i32` (Q6_K: each half's sum times its 8-bit scale, added, also exact),
//! then `acc = fma(sum as f32, scale[j][b] · x_scale[r][b], acc)`, and where the format has an offset
//! `acc = fma(offset[j][b], x_scaled_sum[r][b], acc)`. The sums being exact, no lane order or register
//! width shows in the result, so the AVX2 kernel (`maddubs` on the codes' magnitudes) and the AVX-512
//! one (`vpdpbusd` on the inputs plus 128) give the reference's bits, and a row alone the bits it gets
//! among others.
//!
//! The codes of the 4- and 5-bit formats (Q4_0, Q4_1, Q4_K, Q5_0) are kept as nibbles, two groups of four
//! inputs in one register's bytes (inputs `4j + t` low, `16 + 4j + t` high, the pairing of the GGUF blocks
//! themselves), Q5_0's fifth bits as one 64-bit mask a group and each row's code sums in 16 bits, so that
//! a panel reads a few bytes above its blocks (Q5_0: 0.81 bytes a weight against the blocks' 0.69; 1.31 at
//! a byte a code), and a decoding step of one sequence is bound by reading them. The kernels widen them in
//! registers; Q8_0 and Q6_K keep a byte a code. Where widening costs more than the bytes save (Q5_0's
//! fifth bits on AVX2, [`PanelCodes`]), a format's codes can be kept as bytes; the bits are the same.

use super::generic::{unpack_sub_i8, BlockFormat, Q8Rows, BLOCK};
use crate::half::f16_le_to_f32;
use crate::path::KernelPath;

/// Weight rows a panel holds: the lanes of a 512-bit register of `i32` sums.
pub const PANEL_ROWS: usize = 16;

/// Bytes of one panel block's codes at a byte a code: 32 inputs of 16 rows, eight groups of four inputs.
pub(super) const BLOCK_CODES: usize = PANEL_ROWS * BLOCK;

/// Bytes of one panel block's codes as nibbles: four registers, each two groups.
pub(super) const BLOCK_NIBBLES: usize = BLOCK_CODES / 2;

/// How the 4- and 5-bit formats' codes are kept in [`Panels`] (Q8_0's and Q6_K's are bytes either way).
/// On one thread of a Zen 4 (`kernels/examples/repacked_rows.rs`, a matrix in its L3), AVX2 multiplies a
/// row with Q5_0's codes at 16.7 GMAC/s as nibbles against 33.3 as bytes, Q4_K's at 33.2 against 28.7;
/// decoding, which reads a model from memory, gains more from the bytes saved (bench/decode_results.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanelCodes {
    /// A byte a code: no widening in the kernels, 1.31 bytes a weight read for Q5_0 (what the AVX2 path
    /// keeps Q5_0's codes as: spreading its fifth bits takes AVX2 four operations a register).
    Bytes,
    /// Nibbles (and Q5_0's fifth bits as masks), widened in registers: about a GGUF block's bytes read
    /// (Qwen2.5-Coder-0.5B at batch 1 on a Zen 4, AVX-512: 34.3 -> 40.8 tok/s against bytes).
    Nibbles,
}

impl PanelCodes {
    /// How the panels for `path`'s kernels keep `format`'s codes: bytes where spreading them costs more
    /// than the bytes save (Q5_0's fifth bits on AVX2, which has no mask registers: a shuffle, a compare
    /// and two logic operations a register), nibbles elsewhere.
    pub fn for_path(path: KernelPath, format: BlockFormat) -> PanelCodes {
        if path == KernelPath::Avx2 && format == BlockFormat::Q5_0 {
            PanelCodes::Bytes
        } else {
            PanelCodes::Nibbles
        }
    }
}

/// How a panel block's codes are kept, and how a kernel makes the signed code of each: the kernels are
/// built once for each (their const parameter: [`BYTES`] and the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CodeStore {
    /// A signed byte a code (Q8_0, Q6_K).
    Bytes,
    /// Nibbles, the code itself (Q4_1, Q4_K: unsigned codes beside an offset).
    Nibbles,
    /// Nibbles less 8 (Q4_0).
    NibblesLess8,
    /// Nibbles with a fifth bit, less 16 (Q5_0): where the bit is clear the code is the nibble less 16,
    /// so the masks mark those.
    NibblesFifthBit,
}

impl CodeStore {
    /// The store of a format's codes.
    pub(super) fn of(format: BlockFormat, codes: PanelCodes) -> CodeStore {
        match format {
            _ if codes == PanelCodes::Bytes => CodeStore::Bytes,
            BlockFormat::Q8_0 | BlockFormat::Q6K => CodeStore::Bytes,
            BlockFormat::Q4_1 | BlockFormat::Q4K => CodeStore::Nibbles,
            BlockFormat::Q4_0 => CodeStore::NibblesLess8,
            BlockFormat::Q5_0 => CodeStore::NibblesFifthBit,
        }
    }

    /// The store an id names (the kernels' const parameter).
    #[cfg(target_arch = "x86_64")]
    pub(super) const fn from_id(id: u8) -> CodeStore {
        match id {
            0 => CodeStore::Bytes,
            1 => CodeStore::Nibbles,
            2 => CodeStore::NibblesLess8,
            _ => CodeStore::NibblesFifthBit,
        }
    }

    /// What is added to a nibble (and its fifth bit times 16) to make the signed code.
    fn base(self) -> i32 {
        match self {
            CodeStore::Bytes | CodeStore::Nibbles => 0,
            CodeStore::NibblesLess8 => -8,
            CodeStore::NibblesFifthBit => -16,
        }
    }

    /// Bytes of one panel block's codes.
    pub(super) fn block_bytes(self) -> usize {
        if self == CodeStore::Bytes {
            BLOCK_CODES
        } else {
            BLOCK_NIBBLES
        }
    }
}

/// What a panel block holds beside its codes and scales: the kernels are built once for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PanelKind {
    /// `scale · code` (Q4_0, Q5_0 and Q8_0, their offsets folded into signed codes).
    Plain,
    /// `scale · code + offset` (Q4_1, Q4_K).
    Offsets,
    /// `scale · sub_scale · code`, a sub-scale per 16 codes (Q6_K).
    SubScales,
}

/// [`PanelKind`] as the intrinsics kernels' const parameter.
#[cfg(target_arch = "x86_64")]
pub(super) const PLAIN: u8 = 0;
/// See [`PLAIN`].
#[cfg(target_arch = "x86_64")]
pub(super) const OFFSETS: u8 = 1;
/// See [`PLAIN`].
#[cfg(target_arch = "x86_64")]
pub(super) const SUB_SCALES: u8 = 2;

/// [`CodeStore`] as the intrinsics kernels' const parameter.
#[cfg(target_arch = "x86_64")]
pub(super) const BYTES: u8 = CodeStore::Bytes as u8;
/// See [`BYTES`].
#[cfg(target_arch = "x86_64")]
pub(super) const NIBBLES: u8 = CodeStore::Nibbles as u8;
/// See [`BYTES`].
#[cfg(target_arch = "x86_64")]
pub(super) const NIBBLES_LESS_8: u8 = CodeStore::NibblesLess8 as u8;
/// See [`BYTES`].
#[cfg(target_arch = "x86_64")]
pub(super) const NIBBLES_FIFTH_BIT: u8 = CodeStore::NibblesFifthBit as u8;

/// `by_panel_format!(p, m, f(args))` calls `f::<M, KIND, STORE>(args)` for the panels' kind and code store
/// and `m` input rows from 1 to 16 (`by_group_size!`'s `up_to_16`): one instance a format and row count;
/// `by_panel_format!(p, f(args))` calls `f::<KIND, STORE>(args)`, for a kernel whose rows are a variable.
#[cfg(target_arch = "x86_64")]
macro_rules! by_panel_format {
    ($p:expr, $m:expr, $f:ident($($arg:expr),* $(,)?)) => {
        by_panel_format!(@table $p, [$m] $f ($($arg),*))
    };
    ($p:expr, $f:ident($($arg:expr),* $(,)?)) => {
        by_panel_format!(@table $p, [] $f ($($arg),*))
    };
    (@table $p:expr, $rows:tt $f:ident $args:tt) => {
        match ($p.format(), $p.store) {
            (BlockFormat::Q8_0 | BlockFormat::Q4_0 | BlockFormat::Q5_0, CodeStore::Bytes) => by_panel_format!(@call $rows $f $args PLAIN BYTES),
            (BlockFormat::Q4_0, _) => by_panel_format!(@call $rows $f $args PLAIN NIBBLES_LESS_8),
            (BlockFormat::Q5_0, _) => by_panel_format!(@call $rows $f $args PLAIN NIBBLES_FIFTH_BIT),
            (BlockFormat::Q4_1 | BlockFormat::Q4K, CodeStore::Bytes) => by_panel_format!(@call $rows $f $args OFFSETS BYTES),
            (BlockFormat::Q4_1 | BlockFormat::Q4K, _) => by_panel_format!(@call $rows $f $args OFFSETS NIBBLES),
            (BlockFormat::Q6K, _) => by_panel_format!(@call $rows $f $args SUB_SCALES BYTES),
            (BlockFormat::Q8_0, _) => unreachable!("Q8_0 panels keep a byte a code"),
        }
    };
    (@call [$m:expr] $f:ident ($($arg:expr),*) $kind:ident $store:ident) => {
        by_group_size!(up_to_16: $m, $f::<_, $kind, $store>($($arg),*))
    };
    (@call [] $f:ident ($($arg:expr),*) $kind:ident $store:ident) => {
        $f::<$kind, $store>($($arg),*)
    };
}
#[cfg(target_arch = "x86_64")]
pub(super) use by_panel_format;

/// Weight rows of one GGUF format as panels (see the module's documentation). Rows are a multiple of
/// [`PANEL_ROWS`]; the values are the loader's: `scale · code + offset` per block of 32 (Q6_K: the
/// super-block's scale times each 16 codes' own 8-bit scale).
#[derive(Debug, Clone)]
pub struct Panels {
    format: BlockFormat,
    rows: usize,
    cols: usize,
    /// How the codes are kept.
    pub(super) store: CodeStore,
    /// Per panel and block ([`CodeStore::block_bytes`]): a byte a code, eight groups of four inputs, each
    /// the 16 rows' four codes in row order (byte `64 g + 4 · row + t`: input `4g + t`); or nibbles, four
    /// registers of 64 bytes whose low nibbles are groups 0-3 and high ones groups 4-7.
    pub(super) codes: Vec<u8>,
    /// Q5_0 only, per panel and block: for each of the eight groups, bit `4 · row + t` set where the code's
    /// fifth bit is clear (its code is the nibble less 16).
    pub(super) minus_16: Vec<u64>,
    /// Per panel and block: `Σ codes` of each row (Q6_K: of its first 16 inputs, then of its last 16),
    /// 128 times which the AVX-512 kernel takes off: it meets the inputs as `x + 128`, unsigned. At most
    /// 32 · 128 in magnitude, so 16 bits: a decoding step of one sequence reads every panel byte from
    /// memory, and `i32`s were a seventh of Q5_0's.
    pub(super) code_sums: Vec<i16>,
    /// Q6_K only, per panel and block: each row's 8-bit scale of its first 16 inputs, then of its last 16.
    pub(super) sub_scales: Vec<i32>,
    /// Per panel and block: each row's scale.
    pub(super) scales: Vec<f32>,
    /// Formats with an offset only, per panel and block: each row's offset.
    pub(super) offsets: Vec<f32>,
}

impl Panels {
    /// The `rows × cols` weights held as GGUF blocks of `format` (`rows` a multiple of [`PANEL_ROWS`],
    /// `cols` of the format's block), repacked, their codes kept as `codes` says.
    ///
    /// # Panics
    /// When the sizes disagree.
    pub fn new(format: BlockFormat, blocks: &[u8], rows: usize, cols: usize, codes: PanelCodes) -> Panels {
        let row_bytes = format.row_bytes(cols);
        assert!(
            rows.is_multiple_of(PANEL_ROWS) && cols.is_multiple_of(format.block_weights()) && blocks.len() == rows * row_bytes,
            "Panels: {} bytes are not {rows} rows (a multiple of {PANEL_ROWS}) of {cols} {format:?} weights",
            blocks.len()
        );
        let per_row = cols / BLOCK;
        let (units, q6k, store) = (rows / PANEL_ROWS * per_row, format == BlockFormat::Q6K, CodeStore::of(format, codes));
        let halves = if q6k { 2 } else { 1 };
        let mut p = Panels {
            format,
            rows,
            cols,
            store,
            codes: vec![0; units * store.block_bytes()],
            minus_16: if store == CodeStore::NibblesFifthBit { vec![0; units * 8] } else { Vec::new() },
            code_sums: vec![0; units * halves * PANEL_ROWS],
            sub_scales: if q6k { vec![0; units * 2 * PANEL_ROWS] } else { Vec::new() },
            scales: vec![0.0; units * PANEL_ROWS],
            offsets: if format.has_offset() { vec![0.0; units * PANEL_ROWS] } else { Vec::new() },
        };
        let subs = format.block_weights() / BLOCK;
        for (row, bytes) in blocks.chunks_exact(row_bytes).enumerate() {
            let (panel, lane) = (row / PANEL_ROWS, row % PANEL_ROWS);
            for b in 0..per_row {
                let block = &bytes[b / subs * format.block_bytes()..][..format.block_bytes()];
                let (q, [s0, s1], offset) = unpack_sub_i8(format, block, b % subs);
                let unit = panel * per_row + b;
                let codes = &mut p.codes[unit * store.block_bytes()..][..store.block_bytes()];
                for (i, &c) in q.iter().enumerate() {
                    let (group, t) = (i / 4, i % 4);
                    if store == CodeStore::Bytes {
                        codes[group * 4 * PANEL_ROWS + lane * 4 + t] = c as u8;
                        continue;
                    }
                    let stored = c as i32 - store.base();
                    assert!((0..32).contains(&stored) && (stored < 16 || store == CodeStore::NibblesFifthBit), "{format:?}: code {c} does not fit its store");
                    let at = (group % 4) * 4 * PANEL_ROWS + lane * 4 + t;
                    codes[at] |= ((stored & 15) as u8) << (4 * (group / 4));
                    if store == CodeStore::NibblesFifthBit && stored < 16 {
                        p.minus_16[unit * 8 + group] |= 1 << (lane * 4 + t);
                    }
                }
                for half in 0..halves {
                    let part = &q[half * (BLOCK / halves)..][..BLOCK / halves];
                    p.code_sums[(unit * halves + half) * PANEL_ROWS + lane] = part.iter().map(|&c| c as i16).sum::<i16>();
                }
                if q6k {
                    // The super-block's scale apart from each half's integer one (`unpack_sub_i8` gives
                    // their products), so that the halves add up exactly before any rounding.
                    let (half, quarter) = ((b % subs) / 4, (b % subs) % 4);
                    for i in 0..2 {
                        p.sub_scales[(unit * 2 + i) * PANEL_ROWS + lane] = block[192 + 8 * half + 2 * quarter + i] as i8 as i32;
                    }
                    p.scales[unit * PANEL_ROWS + lane] = f16_le_to_f32(&block[208..210]);
                } else {
                    assert_eq!(s0.to_bits(), s1.to_bits(), "{format:?}: a block of 32 with two scales");
                    p.scales[unit * PANEL_ROWS + lane] = s0;
                }
                if format.has_offset() {
                    p.offsets[unit * PANEL_ROWS + lane] = offset;
                }
            }
        }
        p
    }

    /// The signed code of weight row `lane` of panel block `unit` for its input `i` (the reference's, and
    /// the tests'; the kernels widen whole registers).
    pub(super) fn code(&self, unit: usize, lane: usize, i: usize) -> i8 {
        let (group, t) = (i / 4, i % 4);
        let codes = &self.codes[unit * self.store.block_bytes()..][..self.store.block_bytes()];
        if self.store == CodeStore::Bytes {
            return codes[group * 4 * PANEL_ROWS + lane * 4 + t] as i8;
        }
        let nibble = (codes[(group % 4) * 4 * PANEL_ROWS + lane * 4 + t] >> (4 * (group / 4))) & 15;
        let fifth = self.store == CodeStore::NibblesFifthBit && self.minus_16[unit * 8 + group] >> (lane * 4 + t) & 1 == 0;
        (nibble as i32 + if fifth { 16 } else { 0 } + self.store.base()) as i8
    }

    /// The GGUF format the panels came from.
    pub fn format(&self) -> BlockFormat {
        self.format
    }

    /// Weight rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inputs per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// What its blocks hold beside codes and scales.
    pub(super) fn kind(&self) -> PanelKind {
        match (self.sub_scales.is_empty(), self.offsets.is_empty()) {
            (false, _) => PanelKind::SubScales,
            (true, false) => PanelKind::Offsets,
            (true, true) => PanelKind::Plain,
        }
    }

    /// Blocks of 32 inputs a row.
    pub(super) fn blocks(&self) -> usize {
        self.cols / BLOCK
    }

    /// Bytes the panels take.
    pub fn bytes(&self) -> usize {
        self.codes.len() + 8 * self.minus_16.len() + 2 * self.code_sums.len() + 4 * (self.sub_scales.len() + self.scales.len() + self.offsets.len())
    }
}

/// The reference product (see [`super::panels_q8`]): panels `first .. first + out_rows.len() / (16 · m)`.
pub(super) fn panels_q8(p: &Panels, first: usize, x: &Q8Rows, out_rows: &mut [f32]) {
    let (m, blocks) = (x.m, p.blocks());
    let (q6k, offsets) = (p.kind() == PanelKind::SubScales, p.kind() == PanelKind::Offsets);
    for (g, out) in out_rows.chunks_exact_mut(PANEL_ROWS * m).enumerate() {
        for lane in 0..PANEL_ROWS {
            for r in 0..m {
                let mut acc = 0f32;
                for b in 0..blocks {
                    let unit = (first + g) * blocks + b;
                    let xq = &x.q[(r * blocks + b) * BLOCK..][..BLOCK];
                    let mut halves = [0i32; 2];
                    for (i, &xv) in xq.iter().enumerate() {
                        halves[i / 16] += p.code(unit, lane, i) as i32 * xv as i32;
                    }
                    let sum = if q6k {
                        halves[0] * p.sub_scales[unit * 2 * PANEL_ROWS + lane] + halves[1] * p.sub_scales[(unit * 2 + 1) * PANEL_ROWS + lane]
                    } else {
                        halves[0] + halves[1]
                    };
                    let scale = p.scales[unit * PANEL_ROWS + lane] * x.scale[r * blocks + b];
                    acc = (sum as f32).mul_add(scale, acc);
                    if offsets {
                        acc = p.offsets[unit * PANEL_ROWS + lane].mul_add(x.scaled_sum_by_run[b * m + r], acc);
                    }
                }
                out[lane * m + r] = acc;
            }
        }
    }
}
