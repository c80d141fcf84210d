use agentrt_charts::*;
use std::path::Path;
fn main() {
    let c = |t: &str, s: Vec<Series>| LineChart { title: t.into(), x_label: "step".into(), y_label: "value".into(), series: s };
    let curve = |k: f64| (0..60).map(move |i| (i as f64 * 10.0, k * (i as f64 / 8.0).sin())).collect::<Vec<_>>();
    let charts = vec![
        c("reward", vec![Series { name: "run-a".into(), points: curve(1.0) }]),
        c("loss", vec![Series { name: "run-a".into(), points: curve(2.0) }, Series { name: "run-b".into(), points: curve(3.0) }]),
        c("broken", vec![Series { name: "nan".into(), points: vec![(0.0, f64::NAN)] }]),
        c("single", vec![Series { name: "one".into(), points: vec![(5.0, 7.0)] }]),
    ];
    write_line_charts(Path::new("/tmp/charts-demo/lines.png"), &charts, 2).unwrap();
    let b = |l: &str, v: f64, i| Bar { label: l.into(), value: v, interval: i };
    write_bar_chart(Path::new("/tmp/charts-demo/bars.png"), &BarChart { title: "eval".into(), y_label: "score".into(), bars: vec![b("accuracy", 0.72, Some((0.65, 0.79))), b("a very long metric name indeed", 0.31, None), b("missing", f64::NAN, None), b("negative", -0.2, Some((-0.3, -0.1)))] }).unwrap();
    let groups: Vec<String> = ["accuracy", "f1", "recall"].map(String::from).to_vec();
    write_grouped_bar_chart(Path::new("/tmp/charts-demo/grouped.png"), "runs", "score", &groups, &[("run-a".into(), vec![0.7, 0.5, f64::NAN]), ("run-b".into(), vec![0.6, 0.55, 0.4]), ("run-c".into(), vec![0.9, 0.2, 0.3])]).unwrap();
}
