//! The pure parts: rate and ETA of a count, when a plain line is due, and how times and lines read.
//! Every time is a `Duration` since the count began, passed in, so tests choose it.

use std::time::Duration;

/// Where a count stands: `total` items, `start` of them done before it began (a resumed run), `pos` now,
/// when `pos` last moved and by how much (the items a caller reports at once: one training step, a batch
/// of sections).
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    total: u64,
    start: u64,
    pos: u64,
    last_change: Duration,
    last_step: u64,
}

impl Estimate {
    /// A count of `total` items resuming at `start`, its clock at zero.
    pub fn new(total: u64, start: u64) -> Self {
        Estimate { total, start, pos: start, last_change: Duration::ZERO, last_step: 1 }
    }

    /// Records the position at time `now`; the time counts only when the position moved.
    pub fn update(&mut self, pos: u64, now: Duration) {
        if pos != self.pos {
            self.last_step = pos.saturating_sub(self.pos).max(1);
            self.pos = pos;
            self.last_change = now;
        }
    }

    /// Items done now, counting the `start` it resumed from.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Items in the whole count.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Items done since the count began (not counting the `start` it resumed from).
    pub fn done(&self) -> u64 {
        self.pos.saturating_sub(self.start)
    }

    /// Items still to do (0 once `pos` reaches `total`).
    pub fn left(&self) -> u64 {
        self.total.saturating_sub(self.pos)
    }

    /// Share done, 0 to 1 (an empty count is done).
    pub fn fraction(&self) -> f64 {
        if self.total == 0 {
            1.0
        } else {
            (self.pos as f64 / self.total as f64).min(1.0)
        }
    }

    /// Time per item: the time until the last move over the items done since the count began. `None`
    /// before the first item is done.
    pub fn per_item(&self) -> Option<Duration> {
        let done = self.done();
        (done > 0).then(|| Duration::from_secs_f64(self.last_change.as_secs_f64() / done as f64))
    }

    /// Items per second, as [`Estimate::per_item`].
    pub fn rate(&self) -> Option<f64> {
        let per = self.per_item()?.as_secs_f64();
        (per > 0.0).then(|| 1.0 / per)
    }

    /// Time left at `now`: `per_item × left` as of the last move, counted down since then, but never below
    /// the items after those under way (`per_item × (left − last step)`: a slow step does not show 0:00:00
    /// while others wait). `None` before the first item is done; zero when all are.
    pub fn eta(&self, now: Duration) -> Option<Duration> {
        let per = self.per_item()?;
        let left = self.left();
        if left == 0 {
            return Some(Duration::ZERO);
        }
        let since = now.saturating_sub(self.last_change);
        let counted_down = per.mul_f64(left as f64).saturating_sub(since);
        Some(counted_down.max(per.mul_f64(left.saturating_sub(self.last_step) as f64)))
    }
}

/// When a plain line is due: `every` since the last one, or each time the count crosses another multiple
/// of `percent` %, whichever comes first.
#[derive(Clone, Debug)]
pub struct Throttle {
    every: Duration,
    percent: u64,
    last_at: Duration,
    last_bucket: u64,
}

impl Throttle {
    /// A throttle for a count that begins at `pos` of `total` at time zero.
    pub fn new(every: Duration, percent: u64, pos: u64, total: u64) -> Self {
        let percent = percent.max(1);
        Throttle { every, percent, last_at: Duration::ZERO, last_bucket: bucket(pos, total, percent) }
    }

    /// Whether a line is due at `now` with `pos` of `total` done; a `true` counts as the line printed.
    pub fn due(&mut self, now: Duration, pos: u64, total: u64) -> bool {
        let b = bucket(pos, total, self.percent);
        let due = now.saturating_sub(self.last_at) >= self.every || b > self.last_bucket;
        if due {
            self.last_at = now;
            self.last_bucket = self.last_bucket.max(b);
        }
        due
    }
}

/// Which multiple of `percent` % `pos / total` has reached (exact integer arithmetic).
fn bucket(pos: u64, total: u64, percent: u64) -> u64 {
    if total == 0 {
        return 100 / percent;
    }
    let pos = pos.min(total) as u128;
    (pos * 100 / (total as u128 * percent as u128)) as u64
}

/// `0:04:08`, `12:00:05`, `3d 04:05:06` (rounded to the second).
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    let (days, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if days > 0 {
        format!("{days}d {h:02}:{m:02}:{s:02}")
    } else {
        format!("{h}:{m:02}:{s:02}")
    }
}

/// `41.2/s` at one item a second or more, else the seconds each item takes: `118.2 s each`.
pub fn format_rate(per_second: f64) -> String {
    if per_second >= 1.0 {
        format!("{per_second:.1}/s")
    } else {
        format!("{:.1} s each", 1.0 / per_second)
    }
}

/// The plain line of a count at `now`:
/// `embedding: 1234/11471 sections (10.8%), 41.2/s, elapsed 0:00:30, eta 0:04:08[, message]`.
/// Rate and ETA appear once an item is done; the ETA goes once all are.
pub fn status_line(label: &str, unit: &str, est: &Estimate, now: Duration, message: &str) -> String {
    let mut line = format!("{label}: {}/{}", est.pos(), est.total());
    if !unit.is_empty() {
        line.push(' ');
        line.push_str(unit);
    }
    line.push_str(&format!(" ({:.1}%)", est.fraction() * 100.0));
    if let Some(r) = est.rate() {
        line.push_str(&format!(", {}", format_rate(r)));
    }
    line.push_str(&format!(", elapsed {}", format_duration(now)));
    if est.left() > 0 {
        if let Some(eta) = est.eta(now) {
            line.push_str(&format!(", eta {}", format_duration(eta)));
        }
    }
    if !message.is_empty() {
        line.push_str(", ");
        line.push_str(message);
    }
    line
}

/// What a terminal bar shows after the bar itself: `0:00:30<0:04:08, 41.2/s` (elapsed < ETA, rate); only
/// the elapsed time before the first item is done; no ETA once all are.
pub fn bar_timing(est: &Estimate, now: Duration) -> String {
    let mut s = format_duration(now);
    if est.left() > 0 {
        if let Some(eta) = est.eta(now) {
            s.push_str(&format!("<{}", format_duration(eta)));
        }
    }
    if let Some(rate) = est.rate() {
        s.push_str(&format!(", {}", format_rate(rate)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn no_eta_before_the_first_item() {
        let mut e = Estimate::new(10, 0);
        assert_eq!(e.eta(secs(300)), None);
        assert_eq!(e.rate(), None);
        // a message-only update at the same position is not an item
        e.update(0, secs(100));
        assert_eq!(e.eta(secs(300)), None);
        e.update(1, secs(120));
        assert_eq!(e.eta(secs(120)), Some(secs(9 * 120)));
    }

    #[test]
    fn eta_of_a_resumed_run_counts_only_items_done_since_the_start() {
        // Resumed at step 1 of 10; step 2 took 290 s. indicatif showed `[00:04:50<5d 14:06:57]` here.
        let mut e = Estimate::new(10, 1);
        assert_eq!(e.eta(secs(290)), None, "the resumed step is not a measured one");
        e.update(2, secs(290));
        assert_eq!(e.done(), 1);
        assert_eq!(e.eta(secs(290)), Some(secs(8 * 290)));
        // three steps of ~120 s after that: 650 s for 4 steps
        e.update(5, secs(650));
        let per = 650.0 / 4.0;
        assert_eq!(e.eta(secs(650)).unwrap().as_secs_f64().round(), (per * 5.0_f64).round());
        assert!((e.rate().unwrap() - 4.0 / 650.0).abs() < 1e-12);
    }

    #[test]
    fn eta_counts_down_between_items_but_not_below_the_items_after_the_current_one() {
        let mut e = Estimate::new(10, 0);
        e.update(1, secs(120));
        e.update(2, secs(240)); // 120 s each, 8 left: 960 s
        assert_eq!(e.eta(secs(240)), Some(secs(960)));
        assert_eq!(e.eta(secs(300)), Some(secs(900)));
        assert_eq!(e.eta(secs(360)), Some(secs(840)));
        // step 3 is slow: the ETA stays at the 7 steps after it
        assert_eq!(e.eta(secs(1000)), Some(secs(840)));
        e.update(10, secs(1200));
        assert_eq!(e.eta(secs(1300)), Some(Duration::ZERO));
    }

    #[test]
    fn eta_of_batches_counts_down_to_the_batches_after_the_current_one() {
        let mut e = Estimate::new(1000, 0);
        e.update(100, secs(10)); // batches of 100, 10 s each: 900 left, 90 s
        assert_eq!(e.eta(secs(10)), Some(secs(90)));
        assert_eq!(e.eta(secs(15)), Some(secs(85)));
        assert_eq!(e.eta(secs(30)), Some(secs(80)), "no lower than the 800 after this batch");
        e.update(1000, secs(100));
        e.update(950, secs(100)); // a position going back does not break the estimate
        assert!(e.eta(secs(100)).is_some());
    }

    #[test]
    fn throttle_by_time() {
        // a million items: no percent step is crossed by a few
        let mut t = Throttle::new(secs(10), 5, 0, 1_000_000);
        assert!(!t.due(secs(3), 10, 1_000_000));
        assert!(!t.due(Duration::from_millis(9_999), 20, 1_000_000));
        assert!(t.due(secs(10), 30, 1_000_000));
        assert!(!t.due(secs(15), 40, 1_000_000), "counted from the last line");
        assert!(t.due(secs(20), 40, 1_000_000));
    }

    #[test]
    fn throttle_by_percent() {
        let mut t = Throttle::new(secs(10), 5, 0, 1000);
        assert!(!t.due(secs(1), 49, 1000));
        assert!(t.due(secs(1), 50, 1000), "5% crossed");
        assert!(!t.due(secs(2), 99, 1000));
        assert!(t.due(secs(2), 100, 1000), "10% crossed");
        assert!(t.due(secs(3), 400, 1000), "a jump over several steps prints once");
        assert!(!t.due(secs(4), 420, 1000));
        assert!(t.due(secs(5), 1000, 1000), "the end is a step");
    }

    #[test]
    fn throttle_of_a_resumed_count_starts_from_its_position() {
        // resumed at 33%: the next line is due at 35%, not at once
        let mut t = Throttle::new(secs(10), 5, 33, 100);
        assert!(!t.due(secs(1), 34, 100));
        assert!(t.due(secs(2), 35, 100));
        // ten steps: each is 10%, so each prints
        let mut t = Throttle::new(secs(10), 5, 0, 10);
        assert!((1..=10).all(|s| t.due(secs(s), s, 10)));
    }

    #[test]
    fn durations() {
        assert_eq!(format_duration(Duration::ZERO), "0:00:00");
        assert_eq!(format_duration(secs(248)), "0:04:08");
        assert_eq!(format_duration(Duration::from_millis(29_600)), "0:00:30");
        assert_eq!(format_duration(secs(12 * 3600 + 5)), "12:00:05");
        assert_eq!(format_duration(secs(5 * 86_400 + 14 * 3600 + 6 * 60 + 57)), "5d 14:06:57");
    }

    #[test]
    fn rates() {
        assert_eq!(format_rate(41.23), "41.2/s");
        assert_eq!(format_rate(1.0 / 118.2), "118.2 s each");
    }

    #[test]
    fn lines() {
        let mut e = Estimate::new(11471, 0);
        assert_eq!(status_line("embedding", "sections", &e, secs(5), ""), "embedding: 0/11471 sections (0.0%), elapsed 0:00:05");
        e.update(1234, secs(30));
        assert_eq!(status_line("embedding", "sections", &e, secs(30), ""), "embedding: 1234/11471 sections (10.8%), 41.1/s, elapsed 0:00:30, eta 0:04:09");
        e.update(11471, secs(280));
        assert_eq!(status_line("embedding", "sections", &e, secs(280), ""), "embedding: 11471/11471 sections (100.0%), 41.0/s, elapsed 0:04:40");
        let mut e = Estimate::new(10, 1);
        e.update(2, secs(120));
        assert_eq!(
            status_line("train", "steps", &e, secs(120), "reward 0.125 acc 0.000"),
            "train: 2/10 steps (20.0%), 120.0 s each, elapsed 0:02:00, eta 0:16:00, reward 0.125 acc 0.000"
        );
        assert_eq!(bar_timing(&e, secs(180)), "0:03:00<0:15:00, 120.0 s each");
        assert_eq!(bar_timing(&Estimate::new(10, 1), secs(3)), "0:00:03");
        e.update(10, secs(960));
        assert_eq!(bar_timing(&e, secs(961)), "0:16:01, 106.7 s each");
        assert_eq!(status_line("x", "", &Estimate::new(0, 0), secs(0), ""), "x: 0/0 (100.0%), elapsed 0:00:00");
    }
}
