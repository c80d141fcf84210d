//! Which questions a step plays: the seeded order over the training questions, walked position by
//! position, with each question's record of the groups this run (and an earlier one) drew for it.
//!
//! Why: from an SFT start most groups are settled, 8 of 8 right or 0 of 8, and teach nothing (two-thirds
//! of the last campaign's groups). Under `rollout.draw = "unsettled"` a question whose last
//! `rollout.settled_after` groups were each all right or all wrong is passed over, except for a share
//! `rollout.settled_share` of the positions (decided by the run's seed and the position, so that nothing
//! is forgotten and a resumed run passes over the same ones). A question never drawn is drawn. Every
//! group's outcome goes to `groups.jsonl`, one line a step, which a resume reads back (its lines past the
//! saved step dropped with the other logs) and another run may start from (`rollout.draw_records`).

use crate::error::TrainError;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// `rollout.draw`: how the next questions are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DrawRule {
    /// Every question in the seeded order (each epoch a new permutation).
    #[default]
    Order,
    /// The seeded order, passing over settled questions but for `settled_share` of them.
    Unsettled,
}

/// One group's outcome: how many of its rollouts the grader called correct.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupOutcome {
    /// The question's id.
    pub id: String,
    /// Rollouts judged correct.
    pub correct: usize,
    /// Rollouts in the group.
    pub of: usize,
}

/// A line of `groups.jsonl`: the groups one step drew, in the order drawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepGroups {
    /// The step that drew them.
    pub step: usize,
    /// Their outcomes.
    pub groups: Vec<GroupOutcome>,
}

/// Each question's groups so far, oldest first.
#[derive(Debug, Clone, Default)]
pub struct QuestionRecords {
    by_id: HashMap<String, Vec<(usize, usize)>>,
}

impl QuestionRecords {
    /// The records in a `groups.jsonl` file (none when the file does not exist); a bad line is an error
    /// naming the file and the line.
    pub fn read(path: &Path) -> Result<QuestionRecords, TrainError> {
        let mut records = QuestionRecords::default();
        if !path.exists() {
            return Ok(records);
        }
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::Run(format!("{}: {e}", path.display())))?;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let step: StepGroups =
                serde_json::from_str(line).map_err(|e| TrainError::Run(format!("{}:{}: not a line of group outcomes: {e}", path.display(), i + 1)))?;
            for g in &step.groups {
                if g.of == 0 || g.correct > g.of {
                    return Err(TrainError::Run(format!("{}:{}: question {}: {} correct of {}", path.display(), i + 1, g.id, g.correct, g.of)));
                }
            }
            records.add(&step.groups);
        }
        Ok(records)
    }

    /// Adds groups' outcomes, in order.
    pub fn add(&mut self, groups: &[GroupOutcome]) {
        for g in groups {
            self.by_id.entry(g.id.clone()).or_default().push((g.correct, g.of));
        }
    }

    /// Whether `id`'s last `after` groups (at least `after` of them) were each all right or all wrong.
    pub fn settled(&self, id: &str, after: usize) -> bool {
        let groups = self.by_id.get(id).map_or(&[][..], Vec::as_slice);
        after > 0 && groups.len() >= after && groups[groups.len() - after..].iter().all(|&(correct, of)| correct == 0 || correct == of)
    }

    /// `other`'s groups after this one's, question by question.
    pub fn merge(&mut self, other: QuestionRecords) {
        for (id, groups) in other.by_id {
            self.by_id.entry(id).or_default().extend(groups);
        }
    }

    /// Questions with a record.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no question has a record.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// Whether a settled question at `position` is drawn all the same: true for about `share` of the
/// positions, by a hash of the run's seed and the position (so a resumed run decides alike).
pub fn keeps_settled(seed: u64, position: usize, share: f64) -> bool {
    // SplitMix64's finaliser: well mixed for consecutive positions.
    let mut z = seed ^ (position as u64).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 11) as f64 / (1u64 << 53) as f64) < share
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(id: &str, correct: usize) -> GroupOutcome {
        GroupOutcome { id: id.into(), correct, of: 8 }
    }

    #[test]
    fn a_question_is_settled_by_its_last_groups_all_equal() {
        let mut r = QuestionRecords::default();
        r.add(&[group("a", 8), group("b", 0), group("c", 3)]);
        assert!(!r.settled("a", 2), "one group is not two");
        assert!(r.settled("a", 1) && r.settled("b", 1) && !r.settled("c", 1));
        r.add(&[group("a", 0), group("b", 5), group("c", 8)]);
        assert!(r.settled("a", 2), "8 of 8 then 0 of 8: both settled");
        assert!(!r.settled("b", 2) && !r.settled("c", 2));
        r.add(&[group("c", 0)]);
        assert!(r.settled("c", 2) && !r.settled("c", 3));
        assert!(!r.settled("never drawn", 1) && !r.settled("a", 0));
    }

    #[test]
    fn records_read_back_from_their_file_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("groups.jsonl");
        assert!(QuestionRecords::read(&path).unwrap().is_empty(), "no file: no records");
        let lines = [StepGroups { step: 1, groups: vec![group("a", 8)] }, StepGroups { step: 2, groups: vec![group("a", 8), group("b", 2)] }];
        std::fs::write(&path, lines.iter().map(|l| serde_json::to_string(l).unwrap() + "\n").collect::<String>()).unwrap();
        let r = QuestionRecords::read(&path).unwrap();
        assert_eq!(r.len(), 2);
        assert!(r.settled("a", 2) && !r.settled("b", 1));
        std::fs::write(&path, "{\"step\": 1, \"groups\": [{\"id\": \"a\", \"correct\": 9, \"of\": 8}]}\n").unwrap();
        let e = QuestionRecords::read(&path).unwrap_err().to_string();
        assert!(e.contains("groups.jsonl:1") && e.contains("9 correct of 8"), "{e}");
    }

    #[test]
    fn the_settled_share_is_about_its_value_and_depends_on_seed_and_position_only() {
        let kept = (0..20_000).filter(|&p| keeps_settled(7, p, 0.1)).count();
        assert!((1_700..2_300).contains(&kept), "{kept} of 20000 at 0.1");
        assert_eq!((0..100).map(|p| keeps_settled(7, p, 0.5)).collect::<Vec<_>>(), (0..100).map(|p| keeps_settled(7, p, 0.5)).collect::<Vec<_>>());
        assert_ne!((0..100).map(|p| keeps_settled(7, p, 0.5)).collect::<Vec<_>>(), (0..100).map(|p| keeps_settled(8, p, 0.5)).collect::<Vec<_>>());
        assert!((0..1000).all(|p| !keeps_settled(3, p, 0.0)) && (0..1000).all(|p| keeps_settled(3, p, 1.0)));
    }
}
