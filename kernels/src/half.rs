//! IEEE half precision to f32, exactly, without a dependency: the scales of the GGUF blocks are f16.
//!
//! Every f16 value is an f32 value, so any correct conversion gives the same bits; this one is a few
//! integer operations that inline into the block kernels (the `half` crate's conversion is a call that
//! checks the CPU's F16C support each time).

/// The f32 with the same value as the f16 whose bits are `h` (NaN stays NaN, with its payload).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exponent = ((h >> 10) & 0x1f) as u32;
    let mantissa = (h & 0x3ff) as u32;
    let bits = match exponent {
        0 if mantissa == 0 => sign,
        // Subnormal: mantissa · 2⁻²⁴, exact in f32.
        0 => return f32::from_bits((mantissa as f32 * (1.0 / 16_777_216.0)).to_bits() | sign),
        0x1f => sign | 0x7f80_0000 | (mantissa << 13),
        _ => sign | ((exponent + 112) << 23) | (mantissa << 13),
    };
    f32::from_bits(bits)
}

/// The f16 at `bytes[0..2]`, little-endian, as f32.
#[inline(always)]
pub fn f16_le_to_f32(bytes: &[u8]) -> f32 {
    f16_to_f32(u16::from_le_bytes([bytes[0], bytes[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every one of the 65,536 bit patterns against the definition `(-1)ˢ · 2ᵉ⁻¹⁵ · (1 + m/1024)`.
    #[test]
    fn every_f16_converts_to_its_value() {
        for h in 0..=u16::MAX {
            let (s, e, m) = ((h >> 15) as i32, ((h >> 10) & 0x1f) as i32, (h & 0x3ff) as f64);
            let got = f16_to_f32(h);
            let sign = if s == 1 { -1.0 } else { 1.0 };
            let want = match e {
                0 => sign * m * 2f64.powi(-24),
                31 if m == 0.0 => sign * f64::INFINITY,
                31 => {
                    assert!(got.is_nan(), "{h:#06x}");
                    continue;
                }
                _ => sign * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
            };
            assert_eq!(got as f64, want, "{h:#06x}");
            assert_eq!(got.is_sign_negative(), s == 1, "{h:#06x} sign");
        }
    }
}
