//! Progress of the long commands (`agentrt index`, `train`, `eval`), on a terminal and off it.
//!
//! On a terminal (stderr), a [`Progress`] is an indicatif spinner for stages and a bar for counts. Anywhere
//! else (a pipe, a log file) it writes plain lines to stderr: one per stage, and for a count one at most
//! every [`LINE_EVERY`] or each time another [`LINE_PERCENT`] % is done, whichever comes first, and one at
//! the end:
//!
//! ```text
//! index: full-text index of 11471 sections
//! embedding: 1234/11471 sections (10.8%), 41.2/s, elapsed 0:00:30, eta 0:04:08
//! ```
//!
//! The rate and the ETA are ours, not indicatif's (whose estimator, built for many fast steps, showed
//! `5d 14:06:57` for a twenty-minute run of two-minute steps): the time until the last item over the items
//! done since the count began, times the items left, so a resumed run is measured from where it resumed,
//! and there is no ETA until the first item is done. Those parts are pure functions of times passed in
//! ([`Estimate`], [`Throttle`], [`status_line`], [`format_duration`]) and are tested as such.

mod estimate;

pub use estimate::{bar_timing, format_duration, format_rate, status_line, Estimate, Throttle};

use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use std::io::IsTerminal;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Off a terminal, the longest gap between two lines of a count that is moving.
pub const LINE_EVERY: Duration = Duration::from_secs(10);
/// Off a terminal, a line each time the count crosses another multiple of this many percent.
pub const LINE_PERCENT: u64 = 5;

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// An indicatif spinner or bar on stderr.
    Bar,
    /// Plain, throttled lines on stderr.
    Lines,
}

impl Output {
    /// A bar when stderr is a terminal, lines otherwise.
    pub fn detect() -> Output {
        if std::io::stderr().is_terminal() {
            Output::Bar
        } else {
            Output::Lines
        }
    }
}

/// The bars on the terminal now, newest last: a log line is written with them lifted
/// ([`StderrAboveBars`]), so it lands above them instead of through them.
static BARS: Mutex<Vec<(u64, ProgressBar)>> = Mutex::new(Vec::new());
/// Tells the bars in [`BARS`] apart.
static NEXT_BAR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn bars() -> MutexGuard<'static, Vec<(u64, ProgressBar)>> {
    BARS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Standard error for log lines: while a bar is on the terminal, each write lifts it (clears it, writes,
/// draws it again below), so logging and a bar never interleave on one line. The command's log subscriber
/// writes through it (`tracing_subscriber::fmt().with_writer(|| StderrAboveBars)`).
pub struct StderrAboveBars;

impl std::io::Write for StderrAboveBars {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let write = || std::io::stderr().write_all(buf);
        match bars().last() {
            Some((_, bar)) => bar.suspend(write)?,
            None => write()?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// A long task's progress: stages (a message each) and counts (`pos` of `total` items).
pub struct Progress {
    label: String,
    output: Output,
    bar: Option<ProgressBar>,
    /// The bar's entry in [`BARS`].
    bar_id: u64,
    /// Read by the bar's timing key while it draws: never call the bar with this lock held.
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    count: Option<Count>,
    message: String,
}

struct Count {
    label: String,
    unit: String,
    began: Instant,
    estimate: Estimate,
    throttle: Throttle,
    /// The position of the last line written, so the line at the end is not written twice.
    printed: Option<u64>,
}

impl Count {
    fn line(&self, now: Duration, message: &str) -> String {
        status_line(&self.label, &self.unit, &self.estimate, now, message)
    }
}

impl Progress {
    /// A count of `total` `unit` (e.g. "sections"), `start` of them already done (a resumed run).
    pub fn new(label: &str, unit: &str, total: u64, start: u64) -> Self {
        let p = Progress::stages(label);
        p.count(label, unit, total, start);
        p
    }

    /// Stages with no count yet (see [`Progress::stage`] and [`Progress::count`]).
    pub fn stages(label: &str) -> Self {
        Progress::with_output(label, Output::detect())
    }

    /// As [`Progress::stages`], shown as `output` says whatever stderr is.
    pub fn with_output(label: &str, output: Output) -> Self {
        let bar = (output == Output::Bar).then(|| {
            let b = ProgressBar::new_spinner();
            b.set_style(spinner_style());
            b.set_prefix(label.to_string());
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        let bar_id = NEXT_BAR.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(b) = &bar {
            bars().push((bar_id, b.clone()));
        }
        Progress { label: label.to_string(), output, bar, bar_id, state: Arc::default() }
    }

    /// Whether this shows a bar (stderr is a terminal) rather than lines.
    pub fn is_terminal(&self) -> bool {
        self.output == Output::Bar
    }

    /// A new stage: the spinner's message on a terminal, a line `label: message` elsewhere. Ends a count
    /// under way (its last line is written).
    pub fn stage(&self, message: impl Into<String>) {
        let message = message.into();
        self.end_count();
        match &self.bar {
            Some(b) => {
                b.set_prefix(self.label.clone());
                b.set_message(message);
                b.set_style(spinner_style());
            }
            None => eprintln!("{}: {message}", self.label),
        }
    }

    /// Begins a count of `total` `unit`, `start` done already; its clock starts now. Ends a count under way.
    pub fn count(&self, label: &str, unit: &str, total: u64, start: u64) {
        self.end_count();
        {
            let mut s = self.lock();
            s.message.clear();
            s.count = Some(Count {
                label: label.to_string(),
                unit: unit.to_string(),
                began: Instant::now(),
                estimate: Estimate::new(total, start),
                throttle: Throttle::new(LINE_EVERY, LINE_PERCENT, start, total),
                printed: None,
            });
        }
        if let Some(b) = &self.bar {
            // everything the new style shows first, so no frame mixes the old state into it
            b.set_message("");
            b.set_length(total);
            b.set_position(start);
            b.set_prefix(label.to_string());
            b.set_style(bar_style(self.state.clone(), unit));
        }
    }

    /// Sets the count's position and message.
    pub fn set(&self, pos: u64, message: impl Into<String>) {
        self.update(Some(pos), Some(message.into()));
    }

    /// Sets the count's position, keeping its message.
    pub fn set_position(&self, pos: u64) {
        self.update(Some(pos), None);
    }

    /// Sets the message shown after the count, keeping its position.
    pub fn set_message(&self, message: impl Into<String>) {
        self.update(None, Some(message.into()));
    }

    /// Adds `n` to the count's position.
    pub fn inc(&self, n: u64) {
        let pos = self.lock().count.as_ref().map_or(0, |c| c.estimate.pos()) + n;
        self.set_position(pos);
    }

    /// Done: the bar stays on a terminal; elsewhere the count's last line is written.
    pub fn finish(self) {
        if let Some(b) = &self.bar {
            b.finish();
        }
        self.end_count();
    }

    /// Done: the bar is cleared from a terminal; elsewhere the count's last line is written.
    pub fn finish_and_clear(self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        self.end_count();
    }
}

impl Drop for Progress {
    /// A bar no longer drawn is no longer lifted for log lines.
    fn drop(&mut self) {
        if self.bar.is_some() {
            bars().retain(|(id, _)| *id != self.bar_id);
        }
    }
}

impl Progress {
    fn update(&self, pos: Option<u64>, message: Option<String>) {
        let line = {
            let mut s = self.lock();
            let State { count, message: current } = &mut *s;
            if let Some(m) = &message {
                current.clone_from(m);
            }
            match count {
                Some(c) => {
                    let now = c.began.elapsed();
                    if let Some(p) = pos {
                        c.estimate.update(p, now);
                    }
                    let (p, total) = (c.estimate.pos(), c.estimate.total());
                    (self.output == Output::Lines && c.throttle.due(now, p, total)).then(|| {
                        c.printed = Some(p);
                        c.line(now, current)
                    })
                }
                None => None,
            }
        };
        if let Some(l) = line {
            eprintln!("{l}");
        }
        if let Some(b) = &self.bar {
            if let Some(p) = pos {
                b.set_position(p);
            }
            if let Some(m) = message {
                b.set_message(m);
            }
        }
    }

    /// Ends the count under way; off a terminal, writes its last line unless it was just written.
    fn end_count(&self) {
        let line = {
            let mut s = self.lock();
            let message = std::mem::take(&mut s.message);
            s.count.take().and_then(|c| {
                let fresh = c.printed != Some(c.estimate.pos());
                (self.output == Output::Lines && fresh).then(|| c.line(c.began.elapsed(), &message))
            })
        };
        if let Some(l) = line {
            eprintln!("{l}");
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {prefix}: {wide_msg}").expect("valid template")
}

/// `⠋ train 3/10 steps  reward 0.412 acc 0.375  ████░░░░░░ 30% 0:01:00<0:02:20, 23.3 s/step`, the timing
/// ours: the message comes before the bar, which takes what width is left, so an 80-column terminal shows
/// the message whole (the bar shrinks first) and the line never wraps.
fn bar_style(state: Arc<Mutex<State>>, unit: &str) -> ProgressStyle {
    let unit = unit.to_string();
    ProgressStyle::with_template("{spinner} {prefix} {pos}/{len}{unit}  {msg}  {wide_bar} {percent}% {timing}")
        .expect("valid template")
        .with_key("unit", move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
            if !unit.is_empty() {
                let _ = write!(w, " {unit}");
            }
        })
        .with_key("timing", move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
            let s = state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = &s.count {
                let _ = w.write_str(&bar_timing(&c.estimate, c.began.elapsed()));
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_in_lines_mode_tracks_position_and_ends() {
        let p = Progress::with_output("test", Output::Lines);
        p.stage("reading");
        p.count("items", "items", 100, 10);
        p.set(50, "half");
        p.inc(4);
        {
            let s = p.lock();
            let c = s.count.as_ref().unwrap();
            assert_eq!(c.estimate.pos(), 54);
            assert_eq!(c.estimate.done(), 44);
            assert_eq!(s.message, "half");
            assert_eq!(c.printed, Some(50), "15% .. 50% wrote a line at 50; 54 crossed no step");
        }
        p.stage("writing");
        assert!(p.lock().count.is_none());
        p.finish();
    }

    #[test]
    fn bar_style_renders() {
        // the keys and the template parse; drawing is indicatif's (hidden off a terminal)
        let p = Progress::with_output("test", Output::Bar);
        p.count("items", "items", 10, 0);
        p.set(1, "x");
        p.finish_and_clear();
    }
}
