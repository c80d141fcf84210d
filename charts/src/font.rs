//! The bundled font. CI machines have no fontconfig and maybe no fonts at all, so plotters' `ttf`
//! feature (font-kit) is off and text is rasterised by ab_glyph from DejaVu Sans compiled into the
//! binary. See `fonts/LICENSE-DejaVu.txt` for its (free to redistribute) licence.

use std::sync::OnceLock;

use plotters::style::{register_font, FontStyle};

use crate::ChartError;

/// DejaVu Sans, unmodified.
static DEJAVU_SANS: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// The family name every text style in this crate uses. Plotters' default label and caption
/// styles also ask for "sans-serif", so registering under that name covers them too.
pub(crate) const FAMILY: &str = "sans-serif";

/// Registers the bundled font with plotters, once per process; later calls return the first
/// outcome. Must run before anything draws text, or plotters fails with "font unavailable".
pub(crate) fn ensure_registered() -> Result<(), ChartError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    // Other styles (bold, italic) fall back to the Normal face registered here.
    let ok = *REGISTERED.get_or_init(|| register_font(FAMILY, FontStyle::Normal, DEJAVU_SANS).is_ok());
    if ok {
        Ok(())
    } else {
        Err(ChartError::Font("ab_glyph rejected the font data".into()))
    }
}
