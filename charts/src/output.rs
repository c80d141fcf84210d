//! Turning a drawing into a file: an in-memory RGB canvas, PNG encoding, and an atomic write
//! (temporary file in the target directory, then rename) so a crash or a full disk never leaves a
//! truncated PNG where a previous good one was.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use plotters::coord::Shift;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::prelude::*;

use crate::{font, ChartError};

/// Largest image side accepted, in pixels: beyond this a layout is surely a mistake (thousands
/// of panels or bars) and the canvas alone would need gigabytes.
pub(crate) const MAX_SIDE: u32 = 16_384;

/// The whole image, or one panel of it.
pub(crate) type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// A drawing failure inside plotters, as text; `render_png` adds the output path.
pub(crate) struct DrawError(String);

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for DrawError {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        DrawError(e.to_string())
    }
}

/// Draws with `draw` on a white `width` x `height` canvas, then writes it to `path` as a PNG,
/// atomically, creating parent directories.
pub(crate) fn render_png<F>(path: &Path, width: u64, height: u64, draw: F) -> Result<(), ChartError>
where
    F: FnOnce(&Area<'_>) -> Result<(), DrawError>,
{
    if width == 0 || height == 0 || width > MAX_SIDE as u64 || height > MAX_SIDE as u64 {
        return Err(ChartError::TooLarge { path: path.to_path_buf(), width, height, max: MAX_SIDE });
    }
    let (w, h) = (width as u32, height as u32);
    font::ensure_registered()?;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        let drawn = root.fill(&WHITE).map_err(DrawError::from).and_then(|()| draw(&root)).and_then(|()| root.present().map_err(DrawError::from));
        drawn.map_err(|DrawError(message)| ChartError::Render { path: path.to_path_buf(), message })?;
    }
    write_png_atomic(path, w, h, &rgb)
}

/// Encodes `rgb` (8-bit RGB, row-major) as a PNG into a temporary file next to `path`, syncs it,
/// and renames it over `path`.
fn write_png_atomic(path: &Path, width: u32, height: u32, rgb: &[u8]) -> Result<(), ChartError> {
    let io_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| ChartError::Io { path: p, source }
    };
    let file_name = path.file_name().ok_or_else(|| io_err(path)(io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name")))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir).map_err(io_err(dir))?;

    let prefix = format!(".{}.", file_name.to_string_lossy());
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    #[cfg(unix)]
    {
        // tempfile's default 0600 would make the chart unreadable to anyone else once renamed.
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(fs::Permissions::from_mode(0o644));
    }
    let mut tmp = builder.tempfile_in(dir).map_err(io_err(dir))?;

    let png_io = |e: png::EncodingError| match e {
        png::EncodingError::IoError(e) => e,
        other => io::Error::other(other),
    };
    let encoded = (|| {
        let mut out = BufWriter::new(tmp.as_file_mut());
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        // Charts are mostly flat colour: the slower, stronger setting shrinks them several-fold.
        encoder.set_compression(png::Compression::Best);
        encoder.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
        let mut writer = encoder.write_header().map_err(png_io)?;
        writer.write_image_data(rgb).map_err(png_io)?;
        writer.finish().map_err(png_io)?;
        out.flush()?;
        drop(out);
        tmp.as_file().sync_all()
    })();
    encoded.map_err(io_err(tmp.path()))?;
    // On failure the temporary file is removed when the returned error drops it.
    tmp.persist(path).map_err(|e| io_err(path)(e.error))?;
    Ok(())
}
