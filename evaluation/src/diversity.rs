//! Template collapse: a policy that writes the same reply whatever the question can still earn reward
//! (the rule of reward-hacking research: high reward with low diversity is collapse), so every
//! evaluation and every training step reports how varied its samples are, and flags the set as
//! degenerate past a threshold.
//!
//! A sample is an episode's replies, joined. Similarity is the Jaccard index of two samples' word sets
//! (lowercased runs of letters and digits): 1 for the same words, 0 for none shared.

use crate::Rate;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// When a set of samples counts as degenerate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DegeneracyThresholds {
    /// Degenerate above this mean pairwise Jaccard similarity.
    pub max_jaccard: f64,
    /// Degenerate below this share of distinct samples.
    pub min_unique: f64,
}

impl Default for DegeneracyThresholds {
    fn default() -> Self {
        DegeneracyThresholds { max_jaccard: 0.7, min_unique: 0.5 }
    }
}

/// How varied a set of samples is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diversity {
    /// Distinct samples (byte-equal text counts once), of all samples.
    pub unique_samples: Rate,
    /// Mean Jaccard similarity over pairs of samples (over an evenly spaced subset of at most
    /// [`MAX_PAIRED_SAMPLES`] when there are more); 0 with fewer than two samples.
    pub mean_jaccard: f64,
    /// The same within each question's samples, averaged over the questions that have two or more
    /// (`None` when none has: one greedy sample per question).
    pub mean_jaccard_within_question: Option<f64>,
    /// `mean_jaccard > max_jaccard` or `unique_samples < min_unique`.
    pub degenerate: bool,
    /// The thresholds `degenerate` was judged by.
    pub thresholds: DegeneracyThresholds,
}

/// Pairs grow with the square of the samples; past this many, an evenly spaced subset is paired.
pub const MAX_PAIRED_SAMPLES: usize = 1000;

impl Diversity {
    /// The diversity of `samples`, each tagged with its question's id.
    pub fn of<'a>(samples: impl IntoIterator<Item = (&'a str, String)>, thresholds: DegeneracyThresholds) -> Diversity {
        let samples: Vec<(&str, String)> = samples.into_iter().collect();
        let distinct: HashSet<&str> = samples.iter().map(|(_, s)| s.as_str()).collect();
        let unique_samples = Rate::new(distinct.len(), samples.len());
        let words: Vec<BTreeSet<String>> = samples.iter().map(|(_, s)| word_set(s)).collect();

        let step = samples.len().div_ceil(MAX_PAIRED_SAMPLES).max(1);
        let subset: Vec<usize> = (0..samples.len()).step_by(step).collect();
        let mean_jaccard = mean_pairwise(&subset, &words).unwrap_or(0.0);

        let mut by_question: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, (question, _)) in samples.iter().enumerate() {
            by_question.entry(question).or_default().push(i);
        }
        let within: Vec<f64> = by_question.values().filter_map(|group| mean_pairwise(group, &words)).collect();
        let mean_jaccard_within_question = (!within.is_empty()).then(|| within.iter().sum::<f64>() / within.len() as f64);

        let degenerate = !samples.is_empty() && (mean_jaccard > thresholds.max_jaccard || unique_samples.value < thresholds.min_unique);
        Diversity { unique_samples, mean_jaccard, mean_jaccard_within_question, degenerate, thresholds }
    }
}

/// Up to `n` of `samples`, spread evenly over them: the few printed beside the diversity numbers, to
/// look at.
pub fn spread<T>(samples: &[T], n: usize) -> impl Iterator<Item = &T> {
    samples.iter().step_by(samples.len().div_ceil(n).max(1)).take(n)
}

/// The first `lines` lines of `text` on one line (joined by ⏎), with … when more were cut.
pub fn preview(text: &str, lines: usize) -> String {
    let shown: Vec<&str> = text.lines().take(lines).collect();
    format!("{}{}", shown.join(" ⏎ "), if text.lines().count() > lines { " …" } else { "" })
}

fn word_set(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// Jaccard similarity of two word sets (1 for two empty sets: they are the same).
pub fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

/// Mean Jaccard over the pairs of `indices`; `None` with fewer than two.
fn mean_pairwise(indices: &[usize], words: &[BTreeSet<String>]) -> Option<f64> {
    let (mut sum, mut pairs) = (0.0, 0usize);
    for (k, &i) in indices.iter().enumerate() {
        for &j in &indices[k + 1..] {
            sum += jaccard(&words[i], &words[j]);
            pairs += 1;
        }
    }
    (pairs > 0).then(|| sum / pairs as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(texts: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        texts.iter().map(|(q, t)| (*q, t.to_string())).collect()
    }

    #[test]
    fn the_same_reply_everywhere_is_degenerate_and_varied_replies_are_not() {
        let same = samples(&[("a", "<answer>Paris</answer>"), ("b", "<answer>Paris</answer>"), ("c", "<answer>Paris</answer>")]);
        let d = Diversity::of(same, DegeneracyThresholds::default());
        assert_eq!((d.unique_samples.successes, d.mean_jaccard), (1, 1.0));
        assert!(d.degenerate);
        assert_eq!(d.mean_jaccard_within_question, None, "one sample per question");

        let varied = samples(&[("a", "search for the Broncos"), ("b", "the capital of France is Paris"), ("c", "oxygen was found by Scheele")]);
        let d = Diversity::of(varied, DegeneracyThresholds::default());
        assert_eq!(d.unique_samples.successes, 3);
        assert!(d.mean_jaccard < 0.2 && !d.degenerate, "{d:?}");
    }

    #[test]
    fn jaccard_and_the_within_question_mean_are_the_definitions() {
        let a = word_set("The cat sat");
        let b = word_set("the CAT ran");
        assert_eq!(jaccard(&a, &b), 2.0 / 4.0);
        let d = Diversity::of(samples(&[("q", "the cat sat"), ("q", "the cat ran"), ("r", "dogs")]), DegeneracyThresholds::default());
        assert_eq!(d.mean_jaccard_within_question, Some(0.5));
        assert!((d.mean_jaccard - 0.5 / 3.0).abs() < 1e-12, "{}", d.mean_jaccard);
        // A distinct-sample share under the threshold flags the set even with a low similarity.
        let strict = DegeneracyThresholds { max_jaccard: 0.9, min_unique: 1.0 };
        assert!(Diversity::of(samples(&[("q", "x y"), ("r", "x y"), ("s", "z")]), strict).degenerate);
        assert!(!Diversity::of(Vec::new(), DegeneracyThresholds::default()).degenerate, "nothing sampled is not collapse");
    }
}
