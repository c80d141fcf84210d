//! The offline judge: SQuAD v1.1's official answer normalization, exact match and token F1.
//!
//! The three functions follow `evaluate-v1.1.py` line for line:
//! `normalize_answer` lowercases, drops ASCII punctuation (`string.punctuation`), replaces the
//! articles matched by `\b(a|an|the)\b` with a space, and collapses whitespace; `exact_match_score`
//! compares normalized strings; `f1_score` is the harmonic mean of token precision and recall over
//! the multiset of normalized tokens, and 0 when nothing is shared (so two empty answers score F1 0
//! but exact match 1, as in the official script). Python's Unicode `\w` (used by `\b`) is
//! reproduced as "alphanumeric or underscore".

use crate::{extract_answer, Judge, JudgeError, JudgeInput, Verdict, VerdictLabel};
use async_trait::async_trait;
use std::collections::HashMap;

/// The rule judge's default F1 threshold.
///
/// 0.8 accepts answers one token longer than a two-token alias or missing one token of five
/// ("Santa Clara, California" for "Santa Clara": F1 0.8; 4 of 5 tokens: 0.89) and rejects half
/// answers and padded ones ("Broncos", "Denver Broncos football team" or "The answer is Denver
/// Broncos" against "Denver Broncos": F1 0.67). For a reward that trains a policy, a lenient
/// threshold pays for hedging and verbosity; exact matches always count whatever the threshold.
pub const DEFAULT_F1_THRESHOLD: f64 = 0.8;

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `re.sub(r'\b(a|an|the)\b', ' ', text)` with Python 3's Unicode word boundaries.
fn remove_articles(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    'scan: while i < n {
        let boundary_before = i == 0 || !is_word_char(chars[i - 1]);
        if boundary_before && is_word_char(chars[i]) {
            for article in ["a", "an", "the"] {
                let len = article.len();
                let matches = i + len <= n && chars[i..i + len].iter().copied().eq(article.chars()) && (i + len == n || !is_word_char(chars[i + len]));
                if matches {
                    out.push(' ');
                    i += len;
                    continue 'scan;
                }
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// SQuAD's `normalize_answer`: lowercase, strip punctuation, drop articles, collapse whitespace.
pub fn normalize_answer(s: &str) -> String {
    let lowered = s.to_lowercase();
    let no_punct: String = lowered.chars().filter(|c| !c.is_ascii_punctuation()).collect();
    let no_articles = remove_articles(&no_punct);
    no_articles.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// SQuAD's `exact_match_score`: the normalized strings are equal.
pub fn exact_match_score(prediction: &str, ground_truth: &str) -> bool {
    normalize_answer(prediction) == normalize_answer(ground_truth)
}

/// The best [`f1_score`] of a reply's answer (the inside of its `<answer>`, when tagged) against any of the
/// gold `answers` (0 when there are none): the partial credit of a near miss.
pub fn best_f1(response: &str, answers: &[String]) -> f64 {
    best_f_beta(response, answers, 1.0)
}

/// The best [`f_beta_score`] of a reply's answer against any of the gold `answers` (0 when there are none):
/// with `beta` below 1, partial credit that weighs precision above recall.
pub fn best_f_beta(response: &str, answers: &[String], beta: f64) -> f64 {
    let answer = extract_answer(response);
    answers.iter().map(|gold| f_beta_score(answer, gold, beta)).fold(0.0, f64::max)
}

/// The token-level F-score between the normalized strings with recall weighed `beta` times as much as
/// precision (SQuAD's [`f1_score`] at 1; 0 when no token is shared). At 0.5, against `up to 3 pence`:
/// `3 pence` 0.83, `pence` 0.63, and a span that holds the gold and as many words again 0.56: the more
/// of the answer the better, and a longer span around it pays for its extra words, where F1 ranks
/// `3 pence` and that span alike (0.67).
pub fn f_beta_score(prediction: &str, ground_truth: &str, beta: f64) -> f64 {
    let Some((precision, recall)) = token_overlap(prediction, ground_truth) else { return 0.0 };
    let b2 = beta * beta;
    (1.0 + b2) * precision * recall / (b2 * precision + recall)
}

/// SQuAD's `f1_score`: token-level F1 between the normalized strings (0 when no token is shared). At
/// beta 1, [`f_beta_score`]'s arithmetic is SQuAD's `2·p·r / (p + r)` operation for operation (`1 + 1`
/// and `1·p` are exact), so the bits are the same.
pub fn f1_score(prediction: &str, ground_truth: &str) -> f64 {
    f_beta_score(prediction, ground_truth, 1.0)
}

/// The token precision and recall of `prediction` against `ground_truth`, normalized as SQuAD does;
/// `None` when no token is shared.
fn token_overlap(prediction: &str, ground_truth: &str) -> Option<(f64, f64)> {
    let pred = normalize_answer(prediction);
    let gold = normalize_answer(ground_truth);
    let pred_tokens: Vec<&str> = pred.split_whitespace().collect();
    let gold_tokens: Vec<&str> = gold.split_whitespace().collect();
    let mut gold_counts: HashMap<&str, usize> = HashMap::new();
    for t in &gold_tokens {
        *gold_counts.entry(t).or_insert(0) += 1;
    }
    let mut num_same = 0usize;
    for t in &pred_tokens {
        if let Some(count) = gold_counts.get_mut(t) {
            if *count > 0 {
                *count -= 1;
                num_same += 1;
            }
        }
    }
    if num_same == 0 {
        return None;
    }
    Some((num_same as f64 / pred_tokens.len() as f64, num_same as f64 / gold_tokens.len() as f64))
}

/// The offline judge: reward 1 on an exact match with any alias, or when the best token F1 over
/// the aliases reaches the threshold; 0 otherwise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleJudge {
    f1_threshold: f64,
}

impl Default for RuleJudge {
    fn default() -> Self {
        RuleJudge { f1_threshold: DEFAULT_F1_THRESHOLD }
    }
}

impl RuleJudge {
    /// A rule judge with the given F1 threshold, which must lie in `(0, 1]`.
    pub fn new(f1_threshold: f64) -> Result<Self, JudgeError> {
        if !(f1_threshold > 0.0 && f1_threshold <= 1.0) {
            return Err(JudgeError::InvalidSpec {
                spec: format!("rule:{f1_threshold}"),
                reason: "the F1 threshold must be greater than 0 and at most 1".into(),
            });
        }
        Ok(RuleJudge { f1_threshold })
    }

    /// The F1 threshold in use.
    pub fn f1_threshold(&self) -> f64 {
        self.f1_threshold
    }

    /// Judges synchronously (the rule judge never waits on anything).
    pub fn score(&self, item: &JudgeInput) -> Result<Verdict, JudgeError> {
        if item.answers.is_empty() {
            return Err(JudgeError::InvalidInput("no gold answers were given".into()));
        }
        let graded = extract_answer(&item.response);
        let mut best: Option<(bool, f64, &str)> = None;
        for alias in &item.answers {
            let em = exact_match_score(graded, alias);
            let f1 = f1_score(graded, alias);
            let better = match best {
                None => true,
                Some((best_em, best_f1, _)) => (em && !best_em) || (em == best_em && f1 > best_f1),
            };
            if better {
                best = Some((em, f1, alias.as_str()));
            }
        }
        let (em, f1, alias) = best.unwrap_or((false, 0.0, ""));
        let (reward, label) = if em {
            (1.0, VerdictLabel::ExactMatch)
        } else if f1 + 1e-9 >= self.f1_threshold {
            // The epsilon keeps F1 = 4/5 computed as 0.7999… from missing a 0.8 threshold.
            (1.0, VerdictLabel::F1Match)
        } else {
            (0.0, VerdictLabel::NoMatch)
        };
        let raw = format!("em={} f1={:.3} threshold={} alias={:?} graded={:?}", u8::from(em), f1, self.f1_threshold, alias, graded);
        Ok(Verdict { reward, label, raw })
    }
}

#[async_trait]
impl Judge for RuleJudge {
    fn name(&self) -> String {
        format!("rule(f1>={})", self.f1_threshold)
    }

    async fn judge(&self, item: &JudgeInput) -> Result<Verdict, JudgeError> {
        self.score(item)
    }
}
