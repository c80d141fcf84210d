//! The metrics of a set of episodes: one definition, used by `agentrt eval`, by training's per-step
//! metrics and by its routing evaluation, so a number means the same wherever it is printed.

use crate::diversity::{DegeneracyThresholds, Diversity};
use agentrt_rollout::{Episode, EpisodeOutcome, TurnAction};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A proportion with its 95% Wilson score interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    /// `successes / total`, in [0, 1] (0 when `total` is 0).
    pub value: f64,
    /// How many of `total` counted (were correct, found the page, ran...).
    pub successes: usize,
    /// How many there were in all.
    pub total: usize,
    /// The 95% Wilson interval of `value`, as `(low, high)`.
    pub ci95: (f64, f64),
}

impl Rate {
    /// `successes` of `total`, with its interval.
    pub fn new(successes: usize, total: usize) -> Rate {
        let value = if total == 0 { 0.0 } else { successes as f64 / total as f64 };
        Rate { value, successes, total, ci95: wilson_interval(successes, total) }
    }
}

/// The 95% Wilson score interval of `k` successes in `n` trials (`(0, 1)` when `n` is 0): unlike the normal
/// approximation it stays inside [0, 1] and is sound at 0 and n successes.
pub fn wilson_interval(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * ((p * (1.0 - p) / n) + z * z / (4.0 * n * n)).sqrt() / denom;
    // At 0 and n successes the bounds are 0 and 1 exactly (the formula gives them up to rounding, which
    // printed as 5.55e-17).
    let low = if k == 0.0 { 0.0 } else { (centre - half).max(0.0) };
    let high = if k == n { 1.0 } else { (centre + half).min(1.0) };
    (low, high)
}

/// The 95% interval of `b − a` for two proportions (Newcombe's hybrid score method, from each one's
/// Wilson interval). It treats the two as independent, which is conservative when both were measured on
/// the same questions.
pub fn difference_interval(a: &Rate, b: &Rate) -> (f64, f64) {
    let d = b.value - a.value;
    let (la, ua) = a.ci95;
    let (lb, ub) = b.ci95;
    (d - ((b.value - lb).powi(2) + (ua - a.value).powi(2)).sqrt(), d + ((ub - b.value).powi(2) + (a.value - la).powi(2)).sqrt())
}

/// A mean over episodes with its 95% interval: the percentile bootstrap ([`crate::BOOTSTRAP_RESAMPLES`]
/// resamples, seed 0), which stays within the values' range, so the interval of a mean of values in [0, 1]
/// (answer F1) or of counts (tool calls) never leaves it, as the normal one (`mean ± 1.96·sd/√n`) did on few
/// samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Mean {
    /// The mean (0 over no values).
    pub value: f64,
    /// How many values were averaged.
    pub total: usize,
    /// The 95% interval of `value`, as `(low, high)` (a zero-width one at 0 over no values).
    pub ci95: (f64, f64),
}

impl Mean {
    /// The mean of `values`, with its interval.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Mean {
        let v: Vec<f64> = values.into_iter().collect();
        let n = v.len();
        if n == 0 {
            return Mean { value: 0.0, total: 0, ci95: (0.0, 0.0) };
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        Mean { value: mean, total: n, ci95: bootstrap_interval(&v) }
    }
}

/// The 95% percentile-bootstrap interval of the mean of `values` (not empty), seeded: the same values give
/// the same interval.
fn bootstrap_interval(values: &[f64]) -> (f64, f64) {
    use rand::{Rng, SeedableRng};
    let n = values.len();
    let (lowest, highest) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| (l.min(x), h.max(x)));
    if lowest == highest {
        return (lowest, highest);
    }
    let resamples = crate::BOOTSTRAP_RESAMPLES;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut means: Vec<f64> = (0..resamples).map(|_| (0..n).map(|_| values[rng.random_range(0..n)]).sum::<f64>() / n as f64).collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * resamples as f64) as usize).min(resamples - 1)];
    // A mean of resampled values stays within [lowest, highest], up to the sum's rounding.
    (at(0.025).clamp(lowest, highest), at(0.975).clamp(lowest, highest))
}

/// Everything `agentrt eval` reports about a set of episodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Episodes measured (one per question).
    pub num_questions: usize,
    /// Episodes that ended with a correct answer.
    pub accuracy: Rate,
    /// Mean reward per episode.
    pub mean_reward: f64,
    /// The best SQuAD token F1 of the final answer against the gold answers (0 without an answer).
    pub answer_f1: Mean,
    /// Tool calls per episode.
    pub tool_calls: Mean,
    /// Mean calls per episode, per tool.
    pub avg_tool_calls_by_tool: BTreeMap<String, f64>,
    /// Turns (model replies) per episode.
    pub avg_turns: f64,
    /// Tokens the model wrote per episode (0 for text-only policies).
    pub avg_model_tokens: f64,
    /// The gold page among the first search's hits (`search_pages`, or `search_passages`' pages; episodes with
    /// a gold page and a search).
    pub search_hit_rate: Rate,
    /// Episodes with a gold page that made at least one successful search.
    pub searched: Rate,
    /// Mean 1-based rank of the gold page in the first search's hits, where found.
    pub mean_gold_rank: Option<f64>,
    /// Replies holding a program, of the replies that did not give an `<answer>`: the turns where a
    /// program was due. An answer ends an episode, so counting answers too put a perfect search-then-answer
    /// episode at 50%. Results written before this counted every reply (`total` tells which).
    pub program_replies: Rate,
    /// Replies holding a program that ran without error, of the same turns as `program_replies`.
    pub runnable_program_replies: Rate,
    /// Episodes whose model wrote a second program after reading the first's output (of episodes with a
    /// program): how often the agent reads on across turns. Absent in results written before it was
    /// reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_more: Option<Rate>,
    /// Programs that ran without error (of programs): training's `programs_ok`. Absent in results
    /// written before it was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runnable_programs: Option<Rate>,
    /// How varied the samples are, and whether they look collapsed (absent in older results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diversity: Option<Diversity>,
    /// Episodes whose tool outputs held a gold answer as a whole word (of episodes with gold answers and
    /// at least one tool output): the ceiling a perfect reader of what the programs printed would reach.
    /// Absent in results written before it was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_printed: Option<Rate>,
    /// Of the episodes counted in `answer_printed`, those answered correctly: how well the model reads the
    /// answer out of what its programs printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extraction: Option<Rate>,
    /// How episodes ended: `correct`, `wrong_answer`, `no_answer`, `max_turns` (each of all episodes).
    pub outcomes: BTreeMap<String, Rate>,
    /// Failed programs by error kind (`syntax`, `exception:NameError`, `limit-exceeded:fuel`, …), of all programs.
    pub program_errors: BTreeMap<String, Rate>,
    /// When each question was played several times (`eval --num-generations`): pass@k, the chance that at
    /// least one of k samples is right (Chen et al.'s unbiased estimator per question, averaged over the
    /// questions, with the bootstrap interval over questions), for k = 1, 2, 4, … up to the samples per
    /// question. pass@1 is the accuracy; the gap to pass@k is what sampling finds and RL can learn. Empty
    /// when each question was played once.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pass_at: BTreeMap<usize, Mean>,
}

impl Metrics {
    /// The metrics of `episodes`, with the default degeneracy thresholds.
    pub fn from_episodes(episodes: &[Episode]) -> Metrics {
        Self::from_episodes_with(episodes, DegeneracyThresholds::default())
    }

    /// The metrics of `episodes`, flagging them degenerate by `thresholds`.
    pub fn from_episodes_with(episodes: &[Episode], thresholds: DegeneracyThresholds) -> Metrics {
        let n = episodes.len();
        let nf = n.max(1) as f64;
        let correct = episodes.iter().filter(|e| e.outcome == EpisodeOutcome::Correct).count();
        let mut by_tool: BTreeMap<String, f64> = BTreeMap::new();
        for c in episodes.iter().flat_map(|e| e.tool_calls()) {
            *by_tool.entry(c.tool.clone()).or_default() += 1.0;
        }
        for v in by_tool.values_mut() {
            *v /= nf;
        }
        let with_gold: Vec<&Episode> = episodes.iter().filter(|e| e.question.page.is_some()).collect();
        let searched: Vec<(&Episode, Vec<String>)> = with_gold.iter().filter_map(|e| e.first_search_hits().map(|h| (*e, h))).collect();
        let ranks: Vec<usize> = searched.iter().filter_map(|(e, hits)| hits.iter().position(|p| Some(p) == e.question.page.as_ref()).map(|i| i + 1)).collect();
        let replies: Vec<_> = episodes.iter().flat_map(|e| &e.turns).collect();
        let program_turns = replies.iter().filter(|t| t.action != TurnAction::Answer).count();
        let programs: Vec<_> = replies.iter().filter(|t| t.action == TurnAction::Program).collect();
        let runnable = programs.iter().filter(|t| t.program_error.is_none()).count();
        let programs_by_episode: Vec<usize> = episodes.iter().map(|e| e.turns.iter().filter(|t| t.action == TurnAction::Program).count()).collect();
        let with_program = programs_by_episode.iter().filter(|&&n| n > 0).count();
        let read_on = programs_by_episode.iter().filter(|&&n| n > 1).count();
        let mut outcomes = BTreeMap::new();
        for (name, o) in [
            ("correct", EpisodeOutcome::Correct),
            ("wrong_answer", EpisodeOutcome::WrongAnswer),
            ("no_answer", EpisodeOutcome::NoAnswer),
            ("max_turns", EpisodeOutcome::MaxTurns),
        ] {
            outcomes.insert(name.to_string(), Rate::new(episodes.iter().filter(|e| e.outcome == o).count(), n));
        }
        let mut error_counts: BTreeMap<String, usize> = BTreeMap::new();
        for t in &programs {
            if let Some(kind) = &t.program_error {
                *error_counts.entry(kind.clone()).or_default() += 1;
            }
        }
        let read: Vec<&Episode> = episodes.iter().filter(|e| !e.question.answers.is_empty() && e.turns.iter().any(|t| t.observation.is_some())).collect();
        let printed: Vec<&&Episode> =
            read.iter().filter(|e| e.turns.iter().filter_map(|t| t.observation.as_deref()).any(|o| e.question.answered_in(o))).collect();
        let extracted = printed.iter().filter(|e| e.outcome == EpisodeOutcome::Correct).count();
        Metrics {
            answer_printed: Some(Rate::new(printed.len(), read.len())),
            extraction: Some(Rate::new(extracted, printed.len())),
            num_questions: n,
            accuracy: Rate::new(correct, n),
            mean_reward: episodes.iter().map(|e| e.reward as f64).sum::<f64>() / nf,
            answer_f1: Mean::of(episodes.iter().map(Episode::answer_f1)),
            tool_calls: Mean::of(episodes.iter().map(|e| e.tool_calls().count() as f64)),
            avg_tool_calls_by_tool: by_tool,
            avg_turns: episodes.iter().map(|e| e.turns.len() as f64).sum::<f64>() / nf,
            avg_model_tokens: episodes.iter().map(|e| e.model_tokens() as f64).sum::<f64>() / nf,
            search_hit_rate: Rate::new(ranks.len(), searched.len()),
            searched: Rate::new(searched.len(), with_gold.len()),
            mean_gold_rank: (!ranks.is_empty()).then(|| ranks.iter().sum::<usize>() as f64 / ranks.len() as f64),
            program_replies: Rate::new(programs.len(), program_turns),
            runnable_program_replies: Rate::new(runnable, program_turns),
            runnable_programs: Some(Rate::new(runnable, programs.len())),
            read_more: Some(Rate::new(read_on, with_program)),
            diversity: Some(Diversity::of(episodes.iter().map(|e| (e.question.id.as_str(), sample_text(e))), thresholds)),
            outcomes,
            program_errors: error_counts.into_iter().map(|(k, c)| (k, Rate::new(c, programs.len()))).collect(),
            pass_at: pass_at_by_question(episodes),
        }
    }
}

/// pass@k over questions played more than once (see [`Metrics::pass_at`]): empty unless every question
/// was played at least twice; k runs over the powers of two up to the fewest samples any question had,
/// and that number itself.
fn pass_at_by_question(episodes: &[Episode]) -> BTreeMap<usize, Mean> {
    let mut tally: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for e in episodes {
        let (n, c) = tally.entry(e.question.id.as_str()).or_default();
        *n += 1;
        *c += usize::from(e.outcome == EpisodeOutcome::Correct);
    }
    let fewest = tally.values().map(|(n, _)| *n).min().unwrap_or(0);
    if fewest < 2 {
        return BTreeMap::new();
    }
    let mut ks: Vec<usize> = std::iter::successors(Some(1usize), |k| Some(k * 2)).take_while(|k| *k <= fewest).collect();
    ks.push(fewest);
    ks.dedup();
    ks.into_iter().map(|k| (k, Mean::of(tally.values().map(|&(n, c)| crate::pass_at_k::pass_at_k(n, c, k))))).collect()
}

/// An episode as one sample for diversity: its replies, joined.
pub fn sample_text(episode: &Episode) -> String {
    episode.turns.iter().map(|t| t.reply.as_str()).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An episode of question `id` (gold answer "x") whose replies took `actions` (bare replies: no
    /// program text, output or tool call), ended as `outcome`.
    fn episode(id: &str, actions: &[TurnAction], outcome: EpisodeOutcome) -> Episode {
        let turn = |action: TurnAction| agentrt_rollout::TurnRecord {
            reply: String::new(),
            finish: agentrt_rollout::Finish::EndOfTurn,
            action,
            reply_tokens: 0,
            program: None,
            observation: None,
            program_error: None,
            tool_calls: vec![],
        };
        Episode {
            question: agentrt_rollout::Question { id: id.into(), question: "?".into(), answers: vec!["x".into()], page: None, split: None },
            turns: actions.iter().map(|&a| turn(a)).collect(),
            final_answer: None,
            reward: 0.0,
            reward_components: Vec::new(),
            partial_credit: None,
            well_formed: false,
            verdict: None,
            tests: None,
            grader_error: None,
            outcome,
            conversation: agentrt_rollout::Conversation::new(id, Vec::new()),
        }
    }

    #[test]
    fn wilson_matches_known_values() {
        // 5 of 10: (0.2366, 0.7634); 0 of 10: (0, 0.2775).
        let (lo, hi) = wilson_interval(5, 10);
        assert!((lo - 0.2366).abs() < 1e-4 && (hi - 0.7634).abs() < 1e-4, "{lo} {hi}");
        let (lo, hi) = wilson_interval(0, 10);
        assert!(lo == 0.0 && (hi - 0.2775).abs() < 1e-4, "{hi}");
        assert_eq!(wilson_interval(0, 0), (0.0, 1.0));
        // The ends are exact at every n (the formula's rounding once printed a low of 5.55e-17).
        for n in 1..200 {
            assert_eq!((wilson_interval(0, n).0, wilson_interval(n, n).1), (0.0, 1.0), "n = {n}");
        }
    }

    #[test]
    fn difference_interval_matches_newcombe() {
        // Newcombe (1998), example: 56/70 vs 48/80 gives 0.2 with (0.0524, 0.3339).
        let (lo, hi) = difference_interval(&Rate::new(48, 80), &Rate::new(56, 70));
        assert!((lo - 0.0524).abs() < 1e-3 && (hi - 0.3339).abs() < 1e-3, "{lo} {hi}");
    }

    /// pass@k from repeated questions: one question right in 1 of 4 samples, one in none, one in all.
    #[test]
    fn pass_at_k_counts_each_question_once() {
        let episode = |id: &str, correct: bool| episode(id, &[], if correct { EpisodeOutcome::Correct } else { EpisodeOutcome::WrongAnswer });
        let mut episodes = Vec::new();
        for i in 0..4 {
            episodes.extend([episode("a", i == 2), episode("b", false), episode("c", true)]);
        }
        let m = Metrics::from_episodes(&episodes);
        assert_eq!(m.pass_at.keys().copied().collect::<Vec<_>>(), [1, 2, 4]);
        // a: 1/4, 1/2, 1; b: 0; c: 1.
        for (k, want) in [(1, (0.25 + 1.0) / 3.0), (2, (0.5 + 1.0) / 3.0), (4, 2.0 / 3.0)] {
            assert!((m.pass_at[&k].value - want).abs() < 1e-12, "pass@{k}: {}", m.pass_at[&k].value);
            assert_eq!(m.pass_at[&k].total, 3, "averaged over questions, not samples");
        }
        assert!((m.accuracy.value - m.pass_at[&1].value).abs() < 1e-12, "pass@1 is the accuracy");
        // Played once each: no pass@k.
        assert!(Metrics::from_episodes(&episodes[..3]).pass_at.is_empty());
    }

    /// Reading on counts episodes with a second program, of those with any: an episode that answered
    /// without a program is neither.
    #[test]
    fn read_more_counts_second_programs_of_episodes_with_a_program() {
        let episode = |actions: &[TurnAction]| episode("q", actions, EpisodeOutcome::WrongAnswer);
        use TurnAction::{Answer, Program};
        let episodes = [episode(&[Program, Answer]), episode(&[Program, Program, Answer]), episode(&[Answer]), episode(&[Program, Program, Program])];
        let r = Metrics::from_episodes(&episodes).read_more.unwrap();
        assert_eq!((r.successes, r.total), (2, 3));
    }

    /// Programs are counted over the turns that did not answer: search-then-answer episodes have a program
    /// in every such turn (they read 50% when the answers were counted), a reply with neither a program nor
    /// an answer is a missed program turn, and an episode that only answered has no program turn.
    #[test]
    fn program_replies_are_counted_over_the_turns_that_did_not_answer() {
        use TurnAction::{Answer, Other, Program};
        let episode = |actions: &[TurnAction]| episode("q", actions, EpisodeOutcome::WrongAnswer);
        let searched = [episode(&[Program, Answer]), episode(&[Program, Answer]), episode(&[Program, Program, Answer])];
        let m = Metrics::from_episodes(&searched);
        assert_eq!((m.program_replies.successes, m.program_replies.total, m.program_replies.value), (4, 4, 1.0));
        assert_eq!((m.runnable_program_replies.successes, m.runnable_program_replies.total), (4, 4));
        let mixed = [episode(&[Program, Answer]), episode(&[Other]), episode(&[Answer]), episode(&[Program, Program, Program])];
        let m = Metrics::from_episodes(&mixed);
        assert_eq!((m.program_replies.successes, m.program_replies.total), (4, 5));
    }

    /// A search by passages counts as a search: its hits are the passages' pages, each at the rank of its
    /// best passage, so the gold page's rank is where its first passage came.
    #[test]
    fn the_first_search_may_be_by_passages_and_ranks_their_pages() {
        let with_search = |tool: &str, ids: &[&str]| {
            let mut e = episode("q", &[TurnAction::Program, TurnAction::Answer], EpisodeOutcome::WrongAnswer);
            e.question.page = Some("paris".into());
            e.turns[0].tool_calls.push(agentrt_rollout::ToolCallRecord {
                tool: tool.into(),
                args: serde_json::json!({}),
                error: None,
                returned_ids: ids.iter().map(|s| s.to_string()).collect(),
                micros: 1,
            });
            e
        };
        let passages = with_search("search_passages", &["oxygen:intro", "oxygen:history", "paris:intro", "ulysses_(novel):plot"]);
        assert_eq!(passages.first_search_hits().unwrap(), ["oxygen", "paris", "ulysses_(novel)"]);
        let m = Metrics::from_episodes(&[passages, with_search("search_pages", &["paris", "oxygen"]), with_search("read_section", &["paris:intro"])]);
        assert_eq!((m.searched.successes, m.searched.total), (2, 3));
        assert_eq!((m.search_hit_rate.successes, m.search_hit_rate.total), (2, 2));
        assert_eq!(m.mean_gold_rank, Some(1.5));
    }

    #[test]
    fn mean_interval_is_the_bootstrap_and_stays_in_range() {
        // Five answers, two right: F1 0.4, whose normal interval was [-0.080, 0.880].
        let m = Mean::of([1.0, 1.0, 0.0, 0.0, 0.0]);
        assert_eq!((m.value, m.total), (0.4, 5));
        let (lo, hi) = m.ci95;
        assert!((0.0..=0.4).contains(&lo) && (0.4..=1.0).contains(&hi) && lo < hi, "{:?}", m.ci95);
        assert_eq!(lo, 0.0, "{:?}", m.ci95);
        assert_eq!(Mean::of([1.0, 1.0, 0.0, 0.0, 0.0]).ci95, m.ci95, "seeded: the same values, the same interval");
        // Counts: within [min, max], around the mean.
        let m = Mean::of([0.0, 2.0, 4.0]);
        assert_eq!((m.value, m.total), (2.0, 3));
        assert!(m.ci95.0 >= 0.0 && m.ci95.0 < 2.0 && m.ci95.1 > 2.0 && m.ci95.1 <= 4.0, "{:?}", m.ci95);
        assert_eq!(Mean::of([0.7; 4]).ci95, (0.7, 0.7));
        assert_eq!(Mean::of([]).total, 0);
        assert_eq!(Mean::of([]).ci95, (0.0, 0.0));
    }
}
