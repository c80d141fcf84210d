//! Tests that render real PNGs, decode them again and look at the pixels.

use std::fs;
use std::path::Path;

use plotters::style::RGBColor;

use crate::style::PALETTE;
use crate::*;

struct Image {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl Image {
    /// Pixels exactly of `color` inside `[x0, x1) x [y0, y1)`.
    fn count(&self, color: RGBColor, (x0, y0): (u32, u32), (x1, y1): (u32, u32)) -> usize {
        let mut n = 0;
        for y in y0..y1.min(self.height) {
            for x in x0..x1.min(self.width) {
                let i = (y * self.width + x) as usize * 3;
                if self.rgb[i..i + 3] == [color.0, color.1, color.2] {
                    n += 1;
                }
            }
        }
        n
    }

    fn non_white(&self, from: (u32, u32), to: (u32, u32)) -> usize {
        let all = ((to.0 - from.0) * (to.1 - from.1)) as usize;
        all - self.count(RGBColor(255, 255, 255), from, to)
    }
}

fn decode(path: &Path) -> Image {
    let file = fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file)).read_info().unwrap();
    let mut rgb = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut rgb).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    rgb.truncate(info.buffer_size());
    Image { width: info.width, height: info.height, rgb }
}

fn series(name: &str, points: impl IntoIterator<Item = (f64, f64)>) -> Series {
    Series { name: name.into(), points: points.into_iter().collect() }
}

fn chart(title: &str, series: Vec<Series>) -> LineChart {
    LineChart { title: title.into(), x_label: "step".into(), y_label: "value".into(), series }
}

fn curve(scale: f64) -> impl Iterator<Item = (f64, f64)> {
    (0..60).map(move |i| (i as f64 * 10.0, scale * (i as f64 / 8.0).sin()))
}

#[test]
fn line_grid_has_grid_size_and_draws_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/curves.png");
    let charts = vec![
        chart("reward", vec![series("run-a", curve(1.0))]),
        chart("loss", vec![series("run-a", curve(2.0)), series("run-b", curve(3.0))]),
        chart("broken", vec![series("nan", [(0.0, f64::NAN), (1.0, f64::INFINITY)])]),
        chart("single", vec![series("one", [(5.0, 7.0)])]),
    ];
    write_line_charts(&path, &charts, 2).unwrap();

    let img = decode(&path);
    assert_eq!((img.width, img.height), (1000, 700));
    // Panel 0 (top left) has one series in the first palette colour and no legend: its
    // pixels can only come from the line itself.
    let drawn = img.count(PALETTE[0], (0, 0), (500, 350));
    assert!(drawn > 300, "first series barely drawn: {drawn} pixels");
    // Panel 1 has a second series in the second colour.
    assert!(img.count(PALETTE[1], (500, 0), (1000, 350)) > 300);
    // Panel 2 (bottom left) has only NaN/inf: no line, but a title and "no data" text.
    assert_eq!(img.count(PALETTE[0], (0, 350), (500, 700)), 0);
    assert!(img.non_white((0, 350), (500, 700)) > 100);
    // Panel 3: a single point is marked.
    assert!(img.count(PALETTE[0], (500, 350), (1000, 700)) > 5);
    // Nothing but the chart is left in the directory (the temporary file was renamed).
    let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec!["curves.png"]);
}

#[test]
fn fewer_charts_than_columns_uses_one_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.png");
    let charts = vec![chart("a", vec![series("s", curve(1.0))]); 3];
    write_line_charts(&path, &charts, 5).unwrap();
    let img = decode(&path);
    assert_eq!((img.width, img.height), (1500, 350));
    let charts = vec![chart("a", vec![series("s", curve(1.0))]); 3];
    write_line_charts(&path, &charts, 2).unwrap();
    let img = decode(&path);
    assert_eq!((img.width, img.height), (1000, 700));
}

#[test]
fn nan_only_chart_still_writes_a_png() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nan.png");
    let charts = vec![chart("all nan", vec![series("s", [(f64::NAN, f64::NAN)]), series("empty", [])])];
    write_line_charts(&path, &charts, 1).unwrap();
    let img = decode(&path);
    assert_eq!((img.width, img.height), (500, 350));
    assert!(img.non_white((0, 0), (500, 350)) > 100, "expected title and 'no data' text");
    assert_eq!(img.count(PALETTE[0], (0, 0), (500, 350)), 0);
}

#[test]
fn constant_values_render() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flat.png");
    let charts = vec![chart("flat", vec![series("s", (0..10).map(|i| (i as f64, 0.5)))])];
    write_line_charts(&path, &charts, 1).unwrap();
    assert!(decode(&path).count(PALETTE[0], (0, 0), (500, 350)) > 100);
}

#[test]
fn line_chart_input_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.png");
    let charts = vec![chart("a", vec![series("s", curve(1.0))])];
    let err = write_line_charts(&path, &charts, 0).unwrap_err();
    assert!(matches!(err, ChartError::ZeroColumns), "{err}");
    let err = write_line_charts(&path, &[], 2).unwrap_err();
    assert!(matches!(err, ChartError::NoCharts), "{err}");
    assert!(!path.exists());
}

#[test]
fn write_error_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    // The target is an existing directory: the final rename must fail, loudly.
    let path = dir.path().join("taken");
    fs::create_dir(&path).unwrap();
    fs::write(path.join("keep"), b"x").unwrap();
    let charts = vec![chart("a", vec![series("s", curve(1.0))])];
    let err = write_line_charts(&path, &charts, 1).unwrap_err();
    assert!(matches!(err, ChartError::Io { .. }), "{err}");
    assert!(err.to_string().contains("taken"), "{err}");
    // No temporary file is left behind.
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn overwrites_existing_chart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.png");
    fs::write(&path, b"not a png").unwrap();
    let charts = vec![chart("a", vec![series("s", curve(1.0))])];
    write_line_charts(&path, &charts, 1).unwrap();
    assert_eq!(decode(&path).width, 500);
}

fn bar(label: &str, value: f64, interval: Option<(f64, f64)>) -> Bar {
    Bar { label: label.into(), value, interval }
}

#[test]
fn bar_chart_draws_bars() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eval/metrics.png");
    let chart = BarChart {
        title: "eval".into(),
        y_label: "score".into(),
        bars: vec![
            bar("accuracy", 0.72, Some((0.65, 0.79))),
            bar("a very long metric name indeed", 0.31, None),
            bar("missing", f64::NAN, None),
            bar("negative", -0.2, Some((-0.3, -0.1))),
        ],
    };
    write_bar_chart(&path, &chart).unwrap();
    let img = decode(&path);
    // The longest label, ellipsised to 18 characters, gives each bar 8 * 18 + 12 px.
    assert_eq!((img.width, img.height), (100 + 4 * 156, 400));
    let filled = img.count(PALETTE[0], (0, 0), (img.width, 400));
    assert!(filled > 2000, "bars barely drawn: {filled} pixels");
}

#[test]
fn bar_chart_width_grows_with_bars() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.png");
    let bars = (0..10).map(|i| bar(&format!("m{i}"), i as f64, None)).collect();
    let chart = BarChart { title: "many".into(), y_label: String::new(), bars };
    write_bar_chart(&path, &chart).unwrap();
    assert_eq!(decode(&path).width, 800);

    let long = BarChart {
        title: "long labels".into(),
        y_label: String::new(),
        bars: (0..5).map(|i| bar(&format!("SFT {i} + RL 15 steps"), i as f64, None)).collect(),
    };
    write_bar_chart(&path, &long).unwrap();
    assert_eq!(decode(&path).width, 100 + 5 * (8 * 18 + 12), "each bar has room for its label, ellipsised to 18 characters");
}

#[test]
fn bar_chart_with_only_nan_says_no_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nan.png");
    let chart = BarChart { title: "nan".into(), y_label: "score".into(), bars: vec![bar("a", f64::NAN, Some((0.0, 1.0)))] };
    write_bar_chart(&path, &chart).unwrap();
    let img = decode(&path);
    assert_eq!((img.width, img.height), (500, 400));
    assert_eq!(img.count(PALETTE[0], (0, 0), (500, 400)), 0);
    assert!(img.non_white((0, 0), (500, 400)) > 100);
}

#[test]
fn bar_chart_input_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.png");
    let empty = BarChart { title: "t".into(), y_label: String::new(), bars: vec![] };
    let err = write_bar_chart(&path, &empty).unwrap_err();
    assert!(matches!(err, ChartError::Empty { .. }), "{err}");
    let inverted = BarChart { title: "t".into(), y_label: String::new(), bars: vec![bar("acc", 0.5, Some((0.6, 0.4)))] };
    let err = write_bar_chart(&path, &inverted).unwrap_err();
    assert!(matches!(err, ChartError::InvertedInterval { .. }), "{err}");
    assert!(err.to_string().contains("acc"), "{err}");
    assert!(!path.exists());
}

#[test]
fn grouped_bar_chart_draws_each_series() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grouped.png");
    let groups: Vec<String> = ["accuracy", "f1", "recall"].map(String::from).to_vec();
    let series = vec![("run-a".to_string(), vec![0.7, 0.5, f64::NAN]), ("run-b".to_string(), vec![0.6, 0.55, 0.4])];
    write_grouped_bar_chart(&path, "runs", "score", &groups, &series).unwrap();
    let img = decode(&path);
    assert_eq!((img.width, img.height), (600, 420));
    assert!(img.count(PALETTE[0], (0, 0), (600, 420)) > 1000);
    assert!(img.count(PALETTE[1], (0, 0), (600, 420)) > 1000);
}

#[test]
fn grouped_bar_chart_input_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.png");
    let groups = vec!["a".to_string(), "b".to_string()];
    let err = write_grouped_bar_chart(&path, "t", "y", &groups, &[("r".into(), vec![1.0])]).unwrap_err();
    assert!(matches!(err, ChartError::LengthMismatch { expected: 2, got: 1, .. }), "{err}");
    let err = write_grouped_bar_chart(&path, "t", "y", &[], &[("r".into(), vec![])]).unwrap_err();
    assert!(matches!(err, ChartError::Empty { .. }), "{err}");
    let err = write_grouped_bar_chart(&path, "t", "y", &groups, &[]).unwrap_err();
    assert!(matches!(err, ChartError::Empty { .. }), "{err}");
    assert!(!path.exists());
}
