//! Two evaluations of the same questions, compared question by question: the accuracy difference with a
//! paired 95% interval and McNemar's exact test. Newcombe's interval ([`crate::difference_interval`])
//! treats the two runs as independent samples; on the same questions most of the variance is the
//! questions' own and cancels in the pairs, so the paired interval is the one that can show a small
//! gain (the RL-over-SFT comparison of `bench/learning.md`).

use crate::EvalError;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The file of every episode of an evaluation, one JSON object a line: the report writes it, and the
/// paired comparison reads two of them question by question.
pub const TRANSCRIPTS: &str = "transcripts.jsonl";

/// Resamples of the paired bootstrap.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// The question-by-question comparison of B against A.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Paired {
    /// Questions both evaluations played.
    pub questions: usize,
    /// Right in both.
    pub both: usize,
    /// Right in A only.
    pub only_a: usize,
    /// Right in B only.
    pub only_b: usize,
    /// Right in neither.
    pub neither: usize,
    /// B's accuracy minus A's.
    pub difference: f64,
    /// The 95% interval of the difference: percentiles of a paired bootstrap over the questions
    /// ([`BOOTSTRAP_RESAMPLES`] resamples, seed 0).
    pub ci95: (f64, f64),
    /// McNemar's exact two-sided p-value: the chance of a split of the discordant questions at least this
    /// uneven if A and B were equally good.
    pub mcnemar_p: f64,
}

/// Whether each question was answered right, by question id, from an evaluation's transcripts. A question
/// played more than once is an error: a paired comparison needs one episode per question.
fn outcomes(dir: &Path) -> Result<BTreeMap<String, bool>, EvalError> {
    let p = dir.join(TRANSCRIPTS);
    let text = std::fs::read_to_string(&p).map_err(|e| EvalError::Io { path: p.clone(), source: e })?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let bad = |reason: String| EvalError::Malformed { path: p.clone(), reason: format!("line {}: {reason}", i + 1) };
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
        let id = v["question"]["id"].as_str().ok_or_else(|| bad("no question.id".into()))?;
        let outcome = v["outcome"].as_str().ok_or_else(|| bad("no outcome".into()))?;
        if out.insert(id.to_string(), outcome == "correct").is_some() {
            return Err(bad(format!("question {id} was played twice: a paired comparison needs one episode per question")));
        }
    }
    Ok(out)
}

/// B against A on the questions both evaluated (their transcripts); an error when they share none, or
/// when one played questions the other did not (then they are not the same questions).
pub fn paired(a: &Path, b: &Path) -> Result<Paired, EvalError> {
    let (oa, ob) = (outcomes(a)?, outcomes(b)?);
    let only: Vec<&String> = oa.keys().filter(|k| !ob.contains_key(*k)).chain(ob.keys().filter(|k| !oa.contains_key(*k))).collect();
    if !only.is_empty() || oa.is_empty() {
        return Err(EvalError::Invalid(format!(
            "{} and {} did not play the same questions ({} vs {}; {} in one only, e.g. {:?}): evaluate both with the same --split, --num-samples and --seed",
            a.display(),
            b.display(),
            oa.len(),
            ob.len(),
            only.len(),
            only.first()
        )));
    }
    let pairs: Vec<(bool, bool)> = oa.iter().map(|(k, &x)| (x, ob[k])).collect();
    Ok(paired_outcomes(&pairs))
}

/// The comparison of paired outcomes `(a right, b right)`, one per question.
pub fn paired_outcomes(pairs: &[(bool, bool)]) -> Paired {
    let n = pairs.len();
    let count = |f: fn(&(bool, bool)) -> bool| pairs.iter().filter(|p| f(p)).count();
    let (both, only_a, only_b) = (count(|p| p.0 && p.1), count(|p| p.0 && !p.1), count(|p| !p.0 && p.1));
    let diff_of = |sample: &mut dyn Iterator<Item = (bool, bool)>| {
        let (mut d, mut m) = (0i64, 0usize);
        for (x, y) in sample {
            d += y as i64 - x as i64;
            m += 1;
        }
        d as f64 / m.max(1) as f64
    };
    let difference = diff_of(&mut pairs.iter().copied());
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut resampled: Vec<f64> = (0..BOOTSTRAP_RESAMPLES).map(|_| diff_of(&mut (0..n).map(|_| pairs[rng.random_range(0..n.max(1))]))).collect();
    resampled.sort_by(f64::total_cmp);
    let at = |q: f64| resampled[((q * BOOTSTRAP_RESAMPLES as f64) as usize).min(BOOTSTRAP_RESAMPLES - 1)];
    let ci95 = if n == 0 { (0.0, 0.0) } else { (at(0.025), at(0.975)) };
    Paired { questions: n, both, only_a, only_b, neither: n - both - only_a - only_b, difference, ci95, mcnemar_p: mcnemar_exact(only_a, only_b) }
}

/// McNemar's exact test: two-sided binomial p-value of `b` successes in `b + c` trials at one half.
pub fn mcnemar_exact(b: usize, c: usize) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    // P(X <= min(b, c)) for X ~ Binomial(n, 1/2), doubled, in logs to stay finite for large n.
    let k = b.min(c);
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0; // ln C(n, 0)
    let mut tail = 0.0;
    for i in 0..=k {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_choose + ln_half_n).exp();
    }
    (2.0 * tail).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcnemar_matches_the_binomial_tail() {
        // 2 vs 8 discordant: 2 · P(X ≤ 2 | n = 10) = 2 · 56/1024.
        assert!((mcnemar_exact(2, 8) - 112.0 / 1024.0).abs() < 1e-12);
        assert_eq!(mcnemar_exact(5, 5), 1.0);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // 0 vs 20: 2 / 2^20.
        assert!((mcnemar_exact(0, 20) - 2.0 / 1_048_576.0).abs() < 1e-15);
        assert!(mcnemar_exact(300, 420) < 1e-4 && mcnemar_exact(300, 420) > 0.0, "large counts stay finite");
    }

    #[test]
    fn the_paired_interval_is_narrower_than_the_unpaired_one_when_outcomes_agree() {
        // 300 questions: 80 right in both, 4 in A only, 19 in B only (+5.0 points).
        let mut pairs = vec![(true, true); 80];
        pairs.extend(vec![(true, false); 4]);
        pairs.extend(vec![(false, true); 19]);
        pairs.extend(vec![(false, false); 197]);
        let p = paired_outcomes(&pairs);
        assert_eq!((p.questions, p.both, p.only_a, p.only_b, p.neither), (300, 80, 4, 19, 197));
        assert!((p.difference - 0.05).abs() < 1e-12);
        assert!(p.ci95.0 > 0.0 && p.ci95.1 > p.difference && p.ci95.0 < p.difference, "{p:?}");
        assert!(p.mcnemar_p < 0.01, "{p:?}");
        let a = crate::Rate::new(84, 300);
        let b = crate::Rate::new(99, 300);
        let (lo, _) = crate::difference_interval(&a, &b);
        assert!(lo < 0.0, "Newcombe's unpaired interval cannot see this gain: {lo}");
    }

    #[test]
    fn evaluations_of_other_questions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, rows: &[(&str, &str)]| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            let lines: Vec<String> = rows.iter().map(|(id, o)| serde_json::json!({"question": {"id": id}, "outcome": o}).to_string()).collect();
            std::fs::write(d.join(TRANSCRIPTS), lines.join("\n")).unwrap();
            d
        };
        let a = write("a", &[("q1", "correct"), ("q2", "wrong_answer")]);
        let b = write("b", &[("q2", "correct"), ("q1", "correct")]);
        let p = paired(&a, &b).unwrap();
        assert_eq!((p.both, p.only_b, p.only_a), (1, 1, 0));
        let c = write("c", &[("q1", "correct"), ("q3", "correct")]);
        assert!(paired(&a, &c).unwrap_err().to_string().contains("same questions"));
        let twice = write("twice", &[("q1", "correct"), ("q1", "wrong_answer")]);
        assert!(paired(&twice, &a).unwrap_err().to_string().contains("played twice"));
    }
}
