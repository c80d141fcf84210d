//! Training trajectories from episodes: the episodes worth learning from, written as the common chat
//! form (`{"messages": [{"role", "content"}, ...]}`, the form TRL and OpenAI fine-tuning read), each
//! conversation once, with a manifest beside the file that says how they were made.
//!
//! [`TrajectorySet::offer`] is the one gate: an episode reaches the output only when the judge marked it
//! correct and the caller's own check passed; identical message lists are kept once. `agentrt
//! trajectories` (both sources, `synth` and `sample`) writes through it.

use crate::episode::{Episode, EpisodeOutcome};
use crate::error::RolloutError;
use agentrt_assets::FileError;
use agentrt_policy::Message;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// One kept conversation, a line of the output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// System prompt, demonstration (when shown), question, then every reply and tool turn, exactly as
    /// the episode's conversation holds them.
    pub messages: Vec<Message>,
    /// The id of the question the conversation answers.
    pub question_id: String,
    /// `synth` or `sample`.
    pub source: String,
    /// The episode's reward.
    pub reward: f32,
    /// Tool calls the episode's programs made, over all turns.
    pub tool_calls: usize,
}

/// What happened to the episodes offered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrajectoryCounts {
    /// Episodes offered.
    pub played: usize,
    /// Episodes kept for the output.
    pub kept: usize,
    /// The judge did not mark them correct.
    pub rejected_by_judge: usize,
    /// Correct, but the caller's check refused them (for `synth`: an id or answer the model had not seen).
    pub rejected_by_check: usize,
    /// Correct and checked, but the same messages were already kept.
    pub duplicates_dropped: usize,
}

impl TrajectoryCounts {
    /// Kept over played (0 when nothing was played).
    pub fn yield_rate(&self) -> f64 {
        if self.played == 0 {
            0.0
        } else {
            self.kept as f64 / self.played as f64
        }
    }
}

/// What [`TrajectorySet::offer`] did with an episode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offered {
    /// Added to the set.
    Kept,
    /// The episode did not end correct (wrong answer, no answer, or out of turns).
    RejectedByJudge,
    /// Correct, but the caller's check refused it, for the reason given.
    RejectedByCheck(String),
    /// Correct and checked, but the same messages were kept already.
    Duplicate,
}

/// The kept trajectories of one run, in the order they were kept.
pub struct TrajectorySet {
    source: String,
    seen: HashSet<String>,
    kept: Vec<Trajectory>,
    counts: TrajectoryCounts,
}

impl TrajectorySet {
    /// An empty set whose trajectories are marked with `source` (`synth` or `sample`).
    pub fn new(source: impl Into<String>) -> TrajectorySet {
        TrajectorySet { source: source.into(), seen: HashSet::new(), kept: Vec::new(), counts: TrajectoryCounts::default() }
    }

    /// Keeps `episode` when the judge marked it correct and `check` passes, unless its messages are kept
    /// already. `check` runs only on correct episodes.
    pub fn offer(&mut self, episode: &Episode, check: impl FnOnce(&Episode) -> Result<(), String>) -> Offered {
        self.counts.played += 1;
        if episode.outcome != EpisodeOutcome::Correct {
            self.counts.rejected_by_judge += 1;
            return Offered::RejectedByJudge;
        }
        if let Err(why) = check(episode) {
            self.counts.rejected_by_check += 1;
            return Offered::RejectedByCheck(why);
        }
        let messages = episode.conversation.messages.clone();
        if !self.seen.insert(serde_json::to_string(&messages).expect("messages serialise")) {
            self.counts.duplicates_dropped += 1;
            return Offered::Duplicate;
        }
        self.counts.kept += 1;
        self.kept.push(Trajectory {
            messages,
            question_id: episode.question.id.clone(),
            source: self.source.clone(),
            reward: episode.reward,
            tool_calls: episode.tool_calls().count(),
        });
        Offered::Kept
    }

    /// What happened to the episodes offered so far.
    pub fn counts(&self) -> TrajectoryCounts {
        self.counts
    }

    /// The kept trajectories, in the order they were kept.
    pub fn trajectories(&self) -> &[Trajectory] {
        &self.kept
    }

    /// Writes the trajectories to `out` (JSON Lines) and the manifest to `<out>.manifest.json`, each
    /// atomically; `manifest` (an object: settings, command line, model, …) gets `source`, `output`,
    /// `counts`, `yield`, the mean tool calls and replies of the kept ones, and the time added. Returns
    /// the manifest's path.
    pub fn write(&self, out: &Path, manifest: serde_json::Value) -> Result<PathBuf, RolloutError> {
        let mut lines = String::new();
        for t in &self.kept {
            lines.push_str(&serde_json::to_string(t).expect("a trajectory serialises"));
            lines.push('\n');
        }
        agentrt_assets::write_atomic(out, lines.as_bytes()).map_err(FileError::io(out))?;
        let mut manifest = match manifest {
            serde_json::Value::Object(m) => m,
            serde_json::Value::Null => serde_json::Map::new(),
            other => return Err(RolloutError::Invalid(format!("a trajectory manifest must be a JSON object, not {other}"))),
        };
        let n = self.kept.len().max(1) as f64;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        manifest.insert("source".into(), self.source.clone().into());
        manifest.insert("output".into(), out.display().to_string().into());
        manifest.insert("counts".into(), serde_json::to_value(self.counts).expect("counts serialise"));
        manifest.insert("yield".into(), self.counts.yield_rate().into());
        manifest.insert("mean_tool_calls_kept".into(), (self.kept.iter().map(|t| t.tool_calls).sum::<usize>() as f64 / n).into());
        manifest.insert(
            "mean_replies_kept".into(),
            (self.kept.iter().map(|t| t.messages.iter().filter(|m| m.role == "assistant").count()).sum::<usize>() as f64 / n).into(),
        );
        manifest.insert("time_unix".into(), now.into());
        manifest.insert("time_utc".into(), utc(now).into());
        let path = manifest_path(out);
        let text = serde_json::to_string_pretty(&serde_json::Value::Object(manifest)).expect("the manifest serialises");
        agentrt_assets::write_atomic(&path, text.as_bytes()).map_err(FileError::io(&path))?;
        Ok(path)
    }
}

/// `<out>.manifest.json`.
pub fn manifest_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".manifest.json");
    PathBuf::from(s)
}

/// Seconds since 1970 as `YYYY-MM-DDTHH:MM:SSZ` (Howard Hinnant's civil-from-days).
fn utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
