//! The reward an episode trains on: the environment's grade (the headline, logged as accuracy; its named
//! parts are the grader's) plus the shaped parts the search-RL literature uses for small models, each set
//! in `[algorithm]` and logged on its own in metrics.jsonl (`reward_judge`, `reward_program`, `reward_f1`,
//! `reward_format`, `reward_overlong`), so a shaped reward can never hide a flat accuracy. This module only
//! weighs: what an answer earns (its partial credit, whether it had the environment's form) is the
//! grader's to say.

use crate::config::AlgorithmSection;
use agentrt_rollout::{Episode, Finish, TurnAction};

/// The parts of one episode's reward; [`RewardParts::total`] is what the advantages see.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RewardParts {
    /// The judge's reward (0 or 1 for both judges).
    pub judge: f32,
    /// `program_bonus` when at least one of its programs ran without an error. Why: the judge alone
    /// rewards only correct answers, which a 135M model almost never gives, so every GRPO group was all
    /// zeros and skipped; a runnable program is the first thing it has to learn.
    pub program: f32,
    /// `f1_weight` × the best SQuAD token F1 of the final answer against the gold answers: partial credit
    /// for a near miss (0 without an answer).
    pub f1: f32,
    /// `format_bonus` when the episode ended with an `<answer>` reply.
    pub format: f32,
    /// DAPO's soft overlong punishment, subtracted: `overlong_penalty` times how far its longest reply ran
    /// into the last `overlong_buffer` tokens of the reply limit (all of it for a reply cut at the limit).
    pub overlong: f32,
}

impl RewardParts {
    /// The parts of `e`, whose `reward` is still the judge's alone; `max_new_tokens` is the reply limit
    /// it was sampled under.
    pub fn of(e: &Episode, algorithm: &AlgorithmSection, max_new_tokens: usize) -> RewardParts {
        let ran = e.turns.iter().any(|t| t.action == TurnAction::Program && t.program_error.is_none());
        // The environment's grader says whether the answer had its form and what partial credit it earns.
        let answered = e.turns.last().is_some_and(|t| t.action == TurnAction::Answer) && e.well_formed;
        let f1 = if algorithm.f1_weight > 0.0 { e.partial_credit.unwrap_or(0.0) } else { 0.0 };
        RewardParts {
            judge: e.reward,
            program: if ran { algorithm.program_bonus as f32 } else { 0.0 },
            f1: (algorithm.f1_weight * f1) as f32,
            format: if answered { algorithm.format_bonus as f32 } else { 0.0 },
            overlong: (algorithm.overlong_penalty * overlong_fraction(e, algorithm.overlong_buffer, max_new_tokens)) as f32,
        }
    }

    /// The reward the advantages see: the judge's plus every shaped part, less the overlong penalty.
    pub fn total(&self) -> f32 {
        self.judge + self.program + self.f1 + self.format - self.overlong
    }
}

/// How far `e`'s longest reply ran into the last `buffer` tokens before `limit`, from 0 to 1: 1 for a reply
/// cut at the limit, `(tokens - (limit - buffer)) / buffer` inside the buffer, 0 before it.
fn overlong_fraction(e: &Episode, buffer: usize, limit: usize) -> f64 {
    e.turns
        .iter()
        .map(|t| {
            if t.finish == Finish::Length || t.reply_tokens >= limit {
                1.0
            } else if buffer > 0 && t.reply_tokens > limit - buffer {
                (t.reply_tokens - (limit - buffer)) as f64 / buffer as f64
            } else {
                0.0
            }
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_rollout::{Conversation, EpisodeOutcome, Finish, Question, TurnRecord};

    fn turn(action: TurnAction, error: Option<&str>) -> TurnRecord {
        TurnRecord {
            reply: String::new(),
            finish: Finish::EndOfTurn,
            action,
            reply_tokens: 0,
            program: None,
            observation: None,
            program_error: error.map(String::from),
            tool_calls: vec![],
        }
    }

    fn episode(turns: Vec<TurnRecord>, answer: Option<&str>, judge: f32) -> Episode {
        Episode {
            question: Question { id: "q".into(), question: "?".into(), answers: vec!["Denver Broncos".into(), "Broncos".into()], page: None, split: None },
            turns,
            final_answer: answer.map(String::from),
            reward: judge,
            reward_components: vec![],
            // As the wiki's grader says: its answers are well-formed, partial credit set by each case.
            partial_credit: None,
            well_formed: true,
            verdict: None,
            tests: None,
            grader_error: None,
            outcome: if judge > 0.0 { EpisodeOutcome::Correct } else { EpisodeOutcome::WrongAnswer },
            conversation: Conversation::new("q", vec![]),
        }
    }

    #[test]
    fn each_part_is_set_by_its_own_key_and_the_judge_stays_apart() {
        let mut a = crate::TrainConfig::default().algorithm;
        (a.program_bonus, a.f1_weight, a.format_bonus) = (0.1, 0.5, 0.2);
        // A run program, then a near miss in <answer>: partial credit, no judge reward.
        let mut near = episode(vec![turn(TurnAction::Program, None), turn(TurnAction::Answer, None)], Some("the Denver team"), 0.0);
        // The grader's F1 of "the Denver team" vs "Denver Broncos": articles dropped, 1 of 2 tokens each way.
        near.partial_credit = Some(0.5);
        let p = RewardParts::of(&near, &a, 160);
        assert_eq!((p.judge, p.program, p.format), (0.0, 0.1, 0.2));
        // f1_weight 0.5 of the grader's 0.5.
        assert!((p.f1 - 0.25).abs() < 1e-6, "{p:?}");
        assert!((p.total() - 0.55).abs() < 1e-6);
        // An answer the grader says lacks the environment's form (a code reply whose tests could not run)
        // earns no format bonus, and no partial credit the grader did not give.
        let mut unformed = episode(vec![turn(TurnAction::Answer, None)], Some("def f(): pass"), 0.0);
        unformed.well_formed = false;
        let p = RewardParts::of(&unformed, &a, 160);
        assert_eq!((p.format, p.f1), (0.0, 0.0));
        // A failed program and no answer tag: nothing but the judge.
        let failed = episode(vec![turn(TurnAction::Program, Some("syntax")), turn(TurnAction::Other, None)], Some("x"), 0.0);
        assert_eq!(RewardParts::of(&failed, &a, 160), RewardParts { judge: 0.0, program: 0.0, f1: 0.0, format: 0.0, overlong: 0.0 });
        // All shaping off (f1_weight and format_bonus default to 0): the judge, plus the program bonus.
        let d = crate::TrainConfig::default().algorithm;
        let right = episode(vec![turn(TurnAction::Program, None), turn(TurnAction::Answer, None)], Some("Broncos"), 1.0);
        let p = RewardParts::of(&right, &d, 160);
        assert_eq!((p.judge, p.f1, p.format), (1.0, 0.0, 0.0));
        assert_eq!(p.total(), 1.0 + d.program_bonus as f32);
    }

    #[test]
    fn the_overlong_penalty_grows_through_the_buffer_and_is_whole_for_a_cut_reply() {
        let mut a = crate::TrainConfig::default().algorithm;
        (a.program_bonus, a.overlong_penalty, a.overlong_buffer) = (0.0, 0.5, 40);
        let with = |a: &crate::config::AlgorithmSection, tokens: usize, finish: Finish| {
            let mut t = turn(TurnAction::Answer, None);
            (t.reply_tokens, t.finish) = (tokens, finish);
            RewardParts::of(&episode(vec![turn(TurnAction::Program, None), t], Some("Broncos"), 1.0), a, 160)
        };
        assert_eq!(with(&a, 120, Finish::Stop).overlong, 0.0, "before the buffer");
        assert!((with(&a, 140, Finish::Stop).overlong - 0.25).abs() < 1e-6, "half way through the buffer: half the penalty");
        assert_eq!(with(&a, 160, Finish::Length).overlong, 0.5);
        assert!((with(&a, 160, Finish::Length).total() - 0.5).abs() < 1e-6, "the judge's 1 less the penalty");
        a.overlong_buffer = 0;
        assert_eq!(with(&a, 159, Finish::Stop).overlong, 0.0, "without a buffer only a cut reply pays");
        assert_eq!(with(&a, 80, Finish::Length).overlong, 0.5);
    }
}
