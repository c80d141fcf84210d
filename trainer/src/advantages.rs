//! Advantages from rewards, per group of rollouts of one question.

use crate::config::AdvantageKind;

/// For each sample, whether its group carries no signal and is skipped: all its rewards are equal and the
/// advantage is relative to the group (RLOO, GRPO). REINFORCE's constant baseline skips nothing.
pub fn skipped_samples(rewards: &[f32], group_size: usize, kind: AdvantageKind) -> Vec<bool> {
    assert!(group_size > 0 && rewards.len().is_multiple_of(group_size), "{} rewards in groups of {group_size}", rewards.len());
    rewards
        .chunks(group_size)
        .flat_map(|g| {
            let skip = kind != AdvantageKind::Reinforce && g.iter().all(|&r| r == g[0]);
            std::iter::repeat_n(skip, g.len())
        })
        .collect()
}

/// Advantages in the order of `rewards` (groups are consecutive runs of `group_size`), and for each sample
/// whether its group carried no signal (every reward equal) and was zeroed ([`skipped_samples`]). REINFORCE
/// subtracts a constant baseline and keeps every group.
pub fn advantages(rewards: &[f32], group_size: usize, kind: AdvantageKind, baseline: f64, scale_by_std: bool) -> (Vec<f32>, Vec<bool>) {
    assert!(rewards.iter().all(|r| r.is_finite()), "a reward is not finite: {rewards:?}");
    let skip = skipped_samples(rewards, group_size, kind); // also checks the grouping
    let mut out = Vec::with_capacity(rewards.len());
    for (g, skip) in rewards.chunks(group_size).zip(skip.chunks(group_size)) {
        let n = g.len() as f64;
        let mean = g.iter().map(|&r| r as f64).sum::<f64>() / n;
        match kind {
            _ if skip[0] => out.extend(std::iter::repeat_n(0.0, g.len())),
            AdvantageKind::Reinforce => out.extend(g.iter().map(|&r| (r as f64 - baseline) as f32)),
            AdvantageKind::Rloo => out.extend(g.iter().map(|&r| ((r as f64 - mean) * n / (n - 1.0)) as f32)),
            AdvantageKind::Grpo => {
                let std = (g.iter().map(|&r| (r as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
                let scale = if scale_by_std { 1.0 / (std + 1e-4) } else { 1.0 };
                out.extend(g.iter().map(|&r| ((r as f64 - mean) * scale) as f32));
            }
        }
    }
    (out, skip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_groups_are_skipped_except_under_a_constant_baseline() {
        let r = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0];
        assert_eq!(skipped_samples(&r, 2, AdvantageKind::Grpo), [true, true, false, false, true, true]);
        assert_eq!(skipped_samples(&r, 2, AdvantageKind::Rloo), [true, true, false, false, true, true]);
        assert_eq!(skipped_samples(&r, 2, AdvantageKind::Reinforce), [false; 6]);
        assert_eq!(advantages(&r, 2, AdvantageKind::Grpo, 0.5, true).1, [true, true, false, false, true, true]);
    }

    #[test]
    fn the_three_estimators() {
        let r = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
        let (a, skipped) = advantages(&r, 4, AdvantageKind::Grpo, 0.5, false);
        assert_eq!(skipped, [false, false, false, false, true, true, true, true]);
        assert_eq!(a, vec![0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0, 0.0]);
        // RLOO: r_i minus the mean of the others = (r_i - mean) * n / (n - 1).
        let (a, _) = advantages(&r, 4, AdvantageKind::Rloo, 0.5, false);
        assert!((a[0] - 1.0).abs() < 1e-6 && (a[1] + 1.0 / 3.0).abs() < 1e-6);
        let (a, skipped) = advantages(&r, 4, AdvantageKind::Reinforce, 0.5, false);
        assert_eq!((a[0], a[1], a[4]), (0.5, -0.5, 0.5));
        assert_eq!(skipped, [false; 8]);
        let (a, _) = advantages(&r, 4, AdvantageKind::Grpo, 0.5, true);
        let std = (0.75f64.powi(2) + 3.0 * 0.25f64.powi(2)).sqrt() / 2.0;
        assert!((a[0] as f64 - 0.75 / (std + 1e-4)).abs() < 1e-4, "{a:?}");
    }
}
