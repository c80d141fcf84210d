//! The lines a run appends to its logs, one type each: [`StepMetrics`] (a step of `agentrt train`, in
//! `metrics.jsonl`), [`SftStepMetrics`] (a step of `agentrt sft`, in `metrics.jsonl`), [`HeldOutEval`]
//! (`dev_eval.jsonl`) and [`RoutingEval`] (`routing_eval.jsonl`). Each is written by [`RunDir::append`]
//! as JSON with its keys sorted (serde_json's map), as the lines always were.
//!
//! [`StepMetrics`] is the one definition of a training step's line: the trainer builds it, [`RunDir::append`]
//! writes it (and its numbers to TensorBoard), and `plot`, `sweep` and the progress bar read its fields, so a renamed or
//! removed metric is a compile error, not a key nobody writes any more. Its JSON is the line as it always
//! was: keys in sorted order (serde_json's map), `null` where a value is missing, `reward_tests` and
//! `reward_perfect` only from graders that give those parts, and an environment package's own parts as
//! `reward_<part>` ([`StepMetrics::grader_parts`]; a part whose name is one of training's own metrics
//! stops the run with an error naming it). [`StepMetrics::read`] reads a run's lines back; a line that
//! is not a step's metrics is an error naming the file and line.
//!
//! [`RunDir::append`]: crate::run_dir::RunDir::append

use crate::error::{io_err, TrainError};
use agentrt_assets::FileError;
use serde::{Deserialize, Deserializer, Serialize};
use std::path::Path;

/// One training step's metrics: one line of `metrics.jsonl`. The episode metrics are `agentrt eval`'s
/// ([`agentrt_eval::Metrics`], by the same definitions) over every episode the step played, the groups it
/// dropped included; the rest is training's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// The step (1-based: optimizer updates of the run so far, this one included).
    pub step: usize,
    /// Questions taken from the run's data order so far, this step's included (what a resume goes on from).
    pub questions_seen: usize,
    /// Episodes played this step (`num_rollouts` per question drawn, dropped groups included).
    pub episodes: usize,

    /// Mean reward per episode: the total the advantages see (the grader's reward plus the shaped parts,
    /// less the overlong penalty).
    pub reward_mean: f64,
    /// Standard deviation of the episodes' rewards (population: over this step's episodes).
    pub reward_std: f64,
    /// Mean of the grader's reward before shaping (the judge's 0 or 1; for code, the test reward), 0 for
    /// an episode that was not graded.
    pub reward_judge: f64,
    /// Mean `program_bonus` part: paid to an episode with at least one program that ran without an error.
    pub reward_program: f64,
    /// Mean `f1_weight` × SQuAD token F1 part: partial credit for a near miss (wiki only).
    pub reward_f1: f64,
    /// Mean `format_bonus` part: paid to an episode that ended with a well-formed answer.
    pub reward_format: f64,
    /// Mean DAPO overlong penalty (subtracted from the reward): `overlong_penalty` × how far the longest
    /// reply ran into the last `overlong_buffer` tokens of the reply limit.
    pub reward_overlong: f64,
    /// Mean test part of the code grader's reward (`base_weight` × fraction of tests passed; 0 for an
    /// episode not graded). Absent (not null) when no episode had it: the wiki environment, or no answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward_tests: Option<f64>,
    /// Mean all-tests-passed part of the code grader's reward (`perfect_weight` when every test passed).
    /// Absent (not null) when no episode had it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward_perfect: Option<f64>,
    /// The means of an environment package's own reward parts (its grader's names), each as
    /// `reward_<part>` beside the keys above (`reward_correct`; 0 for an episode without it). Empty for
    /// the built-in environments, whose parts have their fields.
    #[serde(flatten, default)]
    pub grader_parts: std::collections::BTreeMap<String, f64>,

    /// Fraction of episodes that ended with a correct answer (the judge said so, or every test passed).
    pub accuracy: f64,
    /// Mean best SQuAD token F1 of the final answer against the gold answers (0 without an answer).
    pub answer_f1: f64,
    /// Tool calls per episode.
    pub tool_calls: f64,
    /// Turns (model replies) per episode.
    pub turns: f64,
    /// Tokens the model wrote per episode.
    pub model_tokens: f64,
    /// Replies holding a program, of the replies that did not answer (the turns where a program was due).
    pub program_replies: f64,
    /// Replies holding a program that ran without an error, of the replies that did not answer.
    pub runnable_program_replies: f64,
    /// Programs that ran without an error, of all programs (0 when there were none).
    pub programs_ok: f64,
    /// Fraction of episodes (with a gold page and a search) whose first search's hits held the gold page.
    pub search_hit_rate: f64,
    /// Distinct samples (byte-equal texts count once), of all the step's samples (0 without diversity).
    pub unique_samples: f64,
    /// Mean Jaccard similarity of the samples' word sets over pairs of samples (0 without diversity).
    pub mean_jaccard: f64,
    /// The same within each question's samples, averaged over questions with two or more; null when none has.
    pub mean_jaccard_within_question: Option<f64>,
    /// Template collapse: the samples are too similar or too few distinct (`agentrt_eval::Diversity`).
    pub degenerate: bool,
    /// Fraction of episodes the routing detector flagged (trained on the forget adapter only).
    pub routed_fraction: f64,

    /// Groups (one question's `num_rollouts` episodes) played this step.
    pub groups_drawn: usize,
    /// Groups whose rewards differ (or REINFORCE keeps them): trained on.
    pub groups_kept: usize,
    /// Groups whose rewards were all equal (zero advantage for GRPO and RLOO): they train nothing, with or
    /// without dynamic sampling. Absent (0) in lines written before it was logged.
    #[serde(default)]
    pub groups_equal: usize,
    /// The all-equal groups dynamic sampling dropped, drawing others in their place; 0 without dynamic
    /// sampling, which drops nothing.
    pub groups_dropped: usize,
    /// Sampling rounds the step took (more than one per accumulation batch only with dynamic sampling).
    pub draw_rounds: usize,

    /// The policy-gradient loss summed over the update's parts (each averaged as `loss_aggregation` says).
    /// Null (read back as NaN) when it was not finite.
    #[serde(deserialize_with = "nan_if_null")]
    pub loss: f64,
    /// Mean over the trained model tokens of the k3 estimate of the KL to the reference model (0 when
    /// `beta` is 0). Null (read back as NaN) when it was not finite.
    #[serde(deserialize_with = "nan_if_null")]
    pub kl: f64,
    /// Mean global gradient norm (before clipping) over the step's optimizer steps; null when none took one.
    pub grad_norm: Option<f64>,
    /// Samples that contributed a gradient.
    pub trained_samples: usize,
    /// AdamW steps taken on the step's samples (`mini_batches` × `update_epochs`, fewer when fewer groups
    /// were kept).
    pub optimizer_steps: usize,
    /// Episodes that wrote a second program after reading the first's output (of episodes with a
    /// program: `agentrt eval`'s `read_more`); 0 in lines written before it was logged.
    #[serde(default)]
    pub read_more: f64,
    /// Share of trained model tokens whose probability ratio to the sampler was clipped (0 without clipping).
    pub clip_fraction: f64,
    /// Mean sampler-minus-learner log-prob per model token whose sampled log-prob is known: rounding when
    /// sampling is local, how off-policy a server's samples are otherwise. Null when none was known.
    pub logprob_gap_mean: Option<f64>,
    /// Mean absolute value of the same gap; null when no sampled log-prob was known.
    pub logprob_gap_abs_mean: Option<f64>,
    /// Model tokens the log-prob gap was measured on.
    pub logprob_gap_tokens: usize,
    /// Mean negative log-prob (temperature 1, no truncation) of the tokens the model sampled, over every
    /// episode drawn: the entropy's proxy a GRPO run watches (falling: the policy sharpens; near 0: it has
    /// collapsed). It is the entropy itself when sampling is at temperature 1 without top-p or top-k.
    /// Null when a server sampled without log-probs, and in lines written before it was logged.
    #[serde(default)]
    pub sampled_token_nll: Option<f64>,
    /// The same over the first reply of each episode (in the find and scan recipes, the program).
    #[serde(default)]
    pub sampled_token_nll_first_reply: Option<f64>,
    /// Positions of the question order passed over as settled this step (`rollout.draw = "unsettled"`);
    /// 0 otherwise. The share of drawn groups that carried a signal is `groups_kept / groups_drawn`.
    #[serde(default)]
    pub questions_passed_over: usize,
    /// The same over the replies after a tool's output (there, the answer): with
    /// `rollout.temperature_after_tool`, the turn kind sampled on its own.
    #[serde(default)]
    pub sampled_token_nll_after_tool: Option<f64>,
    /// The learning rate (`algorithm.lr`).
    pub lr: f64,
    /// The KL penalty's weight (`algorithm.beta`).
    pub beta: f64,

    /// Prompt tokens run through the model by local sampling; null when servers sample.
    pub tokens_prefilled: Option<usize>,
    /// Prompt tokens whose keys and values came from a shared prefix instead of a forward pass (the
    /// rollout engine's saving); null when servers sample.
    pub tokens_reused: Option<usize>,
    /// Tokens sampled locally; null when servers sample.
    pub tokens_sampled: Option<usize>,
    /// The local sampler's forward passes (each reads every live sequence's next tokens: a decoding step,
    /// with any prompt read beside it); null when servers sample.
    #[serde(default)]
    pub sampler_steps: Option<usize>,
    /// Token rows the update's forward passes computed (each optimizer step's; a token a group's samples
    /// share once): the learner's work, against `update_tokens`, the trained samples' tokens.
    #[serde(default)]
    pub update_rows: usize,
    /// Tokens of the samples the update trained on.
    #[serde(default)]
    pub update_tokens: usize,
    /// Where the step's time went.
    pub seconds: StepSeconds,

    /// Greedy accuracy on the held-out slice (`run.eval_steps`), null on steps without an evaluation.
    pub dev_accuracy: Option<f64>,
    /// Mean answer F1 on the held-out slice, null on steps without an evaluation.
    pub dev_answer_f1: Option<f64>,
    /// Tool calls per episode on the held-out slice, null on steps without an evaluation.
    pub dev_tool_calls: Option<f64>,
    /// Questions in the held-out slice, null on steps without an evaluation.
    pub dev_questions: Option<usize>,
}

/// Seconds of one step, by phase (`seconds` in the metrics line).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepSeconds {
    /// Waiting for the policy's replies.
    pub generate: f64,
    /// Of `generate`: the local sampler's forward passes (the rest: picking tokens, programs and turns
    /// waiting for each other).
    #[serde(default)]
    pub generate_forward: f64,
    /// Waiting for the replies' programs in the sandbox after sampling (a program runs beside the next
    /// sampling step; only what it takes past that step counts).
    pub tools: f64,
    /// Grading the final answers (judge or tests).
    pub judge: f64,
    /// The update: the log-prob gap on dropped samples, every optimizer step's forward and backward.
    pub update: f64,
    /// Of `update`: the KL reference's forward passes.
    #[serde(default)]
    pub update_reference: f64,
    /// Of `update`: the policy's forward passes and the loss.
    #[serde(default)]
    pub update_forward: f64,
    /// Of `update`: the backward passes.
    #[serde(default)]
    pub update_backward: f64,
    /// Of `update`: clipping and the AdamW steps.
    #[serde(default)]
    pub update_optimizer: f64,
    /// The whole step up to its metrics line (the held-out evaluation, checkpoints and logs not included).
    pub step: f64,
}

/// One step of `agentrt sft`: one line of its `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftStepMetrics {
    /// The step (1-based: optimizer updates of the run so far, this one included).
    pub step: usize,
    /// Passes over the training conversations so far (`examples_seen` over their number).
    pub epoch: f64,
    /// Conversations taken from the run's data order so far, this step's included (what a resume goes on
    /// from).
    pub examples_seen: usize,
    /// The step's loss: the mean over its conversations of `-mean log p` over each one's model tokens.
    /// Null (read back as NaN) when it was not finite.
    #[serde(deserialize_with = "nan_if_null")]
    pub train_loss: f64,
    /// The validation loss (`sft.eval_steps` and the last step), null on steps without one.
    pub val_loss: Option<f64>,
    /// Model tokens the validation loss covered, null on steps without one.
    pub val_tokens: Option<usize>,
    /// Model tokens trained on (the assistant replies and their end-of-turn tokens).
    pub model_tokens: usize,
    /// Tokens of the step's conversations, every turn included.
    pub tokens: usize,
    /// Conversations that trained only the forget adapter.
    pub routed: usize,
    /// The learning rate of the step (after the warm-up, `sft.lr`).
    pub lr: f64,
    /// Global gradient norm before clipping; null when the step had no gradient.
    pub grad_norm: Option<f64>,
    /// Seconds of the step, its validation loss included.
    pub seconds: f64,
}

/// A greedy evaluation on the held-out slice (`run.eval_steps`): one line of `dev_eval.jsonl`. The
/// metrics are `agentrt eval`'s ([`agentrt_eval::Metrics`]) of its episodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOutEval {
    /// The step it followed (0: before training).
    pub step: usize,
    /// Questions in the slice.
    pub questions: usize,
    /// Fraction answered correctly.
    pub accuracy: f64,
    /// The Wilson 95% interval's lower end of `accuracy`.
    pub accuracy_low: f64,
    /// The Wilson 95% interval's upper end of `accuracy`.
    pub accuracy_high: f64,
    /// Mean best SQuAD token F1 of the final answers.
    pub answer_f1: f64,
    /// Tool calls per episode.
    pub tool_calls: f64,
    /// Fraction of episodes (with a gold page and a search) whose first search's hits held the gold page.
    pub search_hit_rate: f64,
    /// How long playing and measuring it took.
    pub seconds: f64,
}

/// The three-mode routing evaluation (`routing.eval_routing_steps`): one line of `routing_eval.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutingEval {
    /// The step it followed.
    pub step: usize,
    /// Both adapters on.
    pub both: RoutingModeEval,
    /// The retain adapter alone (the forget adapter ablated): what routing should keep.
    pub retain_only: RoutingModeEval,
    /// The forget adapter alone.
    pub forget_only: RoutingModeEval,
}

/// One mode of [`RoutingEval`]: greedy episodes, one per question, with some adapters scaled to 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RoutingModeEval {
    /// Fraction answered correctly.
    pub accuracy: f64,
    /// Mean reward per episode.
    pub reward_mean: f64,
    /// Fraction of episodes the routing detector flagged.
    pub flagged: f64,
}

/// `null` (how serde_json writes a NaN or an infinity) read back as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl StepMetrics {
    /// The line as JSON: the exact value written to `metrics.jsonl` and TensorBoard (keys sorted).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("step metrics serialise")
    }

    /// The steps of a `metrics.jsonl` of `agentrt train`, in order (none when the file is missing). A torn
    /// last line (a kill during its write) is skipped; any other line that is not a step's metrics is an
    /// error naming the file and line.
    pub fn read(path: &Path) -> Result<Vec<StepMetrics>, TrainError> {
        read_log(path, "the metrics of an `agentrt train` step")
    }
}

/// The line as it is written: compact JSON, keys sorted.
impl std::fmt::Display for StepMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

/// A filled-in line for tests: a wiki step that evaluated the held-out slice, every value present.
impl SftStepMetrics {
    /// The steps of a `metrics.jsonl` of `agentrt sft`, read as [`StepMetrics::read`] reads training's.
    pub fn read(path: &Path) -> Result<Vec<SftStepMetrics>, TrainError> {
        read_log(path, "the metrics of an `agentrt sft` step")
    }
}

impl HeldOutEval {
    /// The lines of a run's `dev_eval.jsonl`, read as [`StepMetrics::read`] reads its metrics.
    pub fn read(path: &Path) -> Result<Vec<HeldOutEval>, TrainError> {
        read_log(path, "a held-out evaluation of `agentrt train`")
    }
}

impl RoutingEval {
    /// The lines of a run's `routing_eval.jsonl`, read as [`StepMetrics::read`] reads its metrics.
    pub fn read(path: &Path) -> Result<Vec<RoutingEval>, TrainError> {
        read_log(path, "a routing evaluation of `agentrt train`")
    }
}

/// The typed lines of a run's log (none when the file is missing). A torn last line (a kill during its
/// write) is skipped; any other line that is not `what` is an error naming the file and line.
fn read_log<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<Vec<T>, TrainError> {
    if !path.exists() {
        return Ok(vec![]);
    }
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let lines: Vec<(usize, &str)> = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()).collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, &(n, line)) in lines.iter().enumerate() {
        match serde_json::from_str(line) {
            Ok(m) => out.push(m),
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
            Err(e) => return Err(FileError::malformed(path, format!("line {}: not {what} (written by another version of agentrt?): {e}", n + 1)).into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) fn example() -> StepMetrics {
    StepMetrics {
        step: 3,
        questions_seen: 6,
        episodes: 4,
        reward_mean: 0.5,
        reward_std: 0.25,
        reward_judge: 0.5,
        reward_program: 0.0,
        reward_f1: 0.0,
        reward_format: 0.0,
        reward_overlong: 0.0,
        reward_tests: None,
        reward_perfect: None,
        grader_parts: Default::default(),
        accuracy: 0.5,
        answer_f1: 0.625,
        tool_calls: 1.5,
        turns: 2.0,
        model_tokens: 16.0,
        program_replies: 0.5,
        runnable_program_replies: 0.25,
        programs_ok: 0.5,
        search_hit_rate: 1.0,
        unique_samples: 0.75,
        mean_jaccard: 0.5,
        mean_jaccard_within_question: Some(0.625),
        degenerate: false,
        routed_fraction: 0.0,
        groups_drawn: 2,
        groups_kept: 1,
        groups_equal: 1,
        groups_dropped: 1,
        draw_rounds: 1,
        loss: -0.125,
        kl: 0.0,
        grad_norm: Some(0.5),
        trained_samples: 2,
        optimizer_steps: 1,
        clip_fraction: 0.0,
        logprob_gap_mean: Some(1e-7),
        logprob_gap_abs_mean: Some(3e-7),
        logprob_gap_tokens: 48,
        sampled_token_nll: Some(0.75),
        sampled_token_nll_first_reply: Some(0.5),
        sampled_token_nll_after_tool: Some(1.0),
        questions_passed_over: 3,
        read_more: 0.25,
        lr: 0.01,
        beta: 0.02,
        tokens_prefilled: Some(327),
        tokens_reused: Some(789),
        tokens_sampled: Some(48),
        sampler_steps: Some(30),
        update_rows: 400,
        update_tokens: 620,
        seconds: StepSeconds {
            generate: 0.5,
            generate_forward: 0.375,
            tools: 0.125,
            judge: 0.0625,
            update: 0.25,
            update_reference: 0.0625,
            update_forward: 0.0625,
            update_backward: 0.09375,
            update_optimizer: 0.015625,
            step: 1.0,
        },
        dev_accuracy: Some(0.25),
        dev_answer_f1: Some(0.5),
        dev_tool_calls: Some(1.0),
        dev_questions: Some(8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A held-out log reads back as typed lines (a torn last line skipped); a line of another shape is an
    /// error naming the file and the line, never a silently dropped point.
    #[test]
    fn a_log_reads_back_typed_and_a_foreign_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dev_eval.jsonl");
        let line = HeldOutEval {
            step: 2,
            questions: 4,
            accuracy: 0.5,
            accuracy_low: 0.15,
            accuracy_high: 0.85,
            answer_f1: 0.6,
            tool_calls: 1.5,
            search_hit_rate: 1.0,
            seconds: 3.0,
        };
        std::fs::write(&p, format!("{}\n{{\"step\": 3, \"accur", serde_json::to_string(&line).unwrap())).unwrap();
        assert_eq!(HeldOutEval::read(&p).unwrap(), vec![line.clone()]);
        std::fs::write(&p, format!("{}\n{{\"step\": 3}}\n", serde_json::to_string(&line).unwrap())).unwrap();
        let e = HeldOutEval::read(&p).unwrap_err().to_string();
        assert!(e.contains("dev_eval.jsonl") && e.contains("line 2") && e.contains("held-out evaluation"), "{e}");
        assert!(HeldOutEval::read(&dir.path().join("none.jsonl")).unwrap().is_empty());
    }

    /// Every key of the line as the trainer has always written it (sorted); `reward_tests` and
    /// `reward_perfect` come on top from the code grader. A renamed field fails here.
    const KEYS: [&str; 56] = [
        "accuracy",
        "answer_f1",
        "beta",
        "clip_fraction",
        "degenerate",
        "dev_accuracy",
        "dev_answer_f1",
        "dev_questions",
        "dev_tool_calls",
        "draw_rounds",
        "episodes",
        "grad_norm",
        "groups_drawn",
        "groups_dropped",
        "groups_equal",
        "groups_kept",
        "kl",
        "logprob_gap_abs_mean",
        "logprob_gap_mean",
        "logprob_gap_tokens",
        "loss",
        "lr",
        "mean_jaccard",
        "mean_jaccard_within_question",
        "model_tokens",
        "optimizer_steps",
        "program_replies",
        "programs_ok",
        "questions_passed_over",
        "questions_seen",
        "read_more",
        "reward_f1",
        "reward_format",
        "reward_judge",
        "reward_mean",
        "reward_overlong",
        "reward_program",
        "reward_std",
        "routed_fraction",
        "runnable_program_replies",
        "sampled_token_nll",
        "sampled_token_nll_after_tool",
        "sampled_token_nll_first_reply",
        "sampler_steps",
        "search_hit_rate",
        "seconds",
        "step",
        "tokens_prefilled",
        "tokens_reused",
        "tokens_sampled",
        "tool_calls",
        "trained_samples",
        "turns",
        "unique_samples",
        "update_rows",
        "update_tokens",
    ];

    #[test]
    fn the_line_has_exactly_its_keys_and_round_trips() {
        let m = example();
        let json = m.to_json();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, KEYS);
        let seconds: Vec<&str> = json["seconds"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            seconds,
            ["generate", "generate_forward", "judge", "step", "tools", "update", "update_backward", "update_forward", "update_optimizer", "update_reference"]
        );
        assert!(json["episodes"].is_u64() && json["dev_questions"].is_u64() && json["model_tokens"].is_f64(), "integers stay integers");
        // The written text reads back to the same value.
        let back: StepMetrics = serde_json::from_str(&m.to_string()).unwrap();
        assert_eq!(back, m);
        assert_eq!(m.to_string(), serde_json::to_string(&json).unwrap(), "Display is the written line");

        // Missing values are null, not left out (a step without a held-out evaluation, sampled on servers,
        // without an optimizer step, one sample per question).
        let sparse = StepMetrics {
            mean_jaccard_within_question: None,
            grad_norm: None,
            logprob_gap_mean: None,
            logprob_gap_abs_mean: None,
            tokens_prefilled: None,
            tokens_reused: None,
            tokens_sampled: None,
            sampler_steps: None,
            sampled_token_nll: None,
            sampled_token_nll_first_reply: None,
            sampled_token_nll_after_tool: None,
            dev_accuracy: None,
            dev_answer_f1: None,
            dev_tool_calls: None,
            dev_questions: None,
            ..example()
        };
        let json = sparse.to_json();
        assert_eq!(json.as_object().unwrap().keys().map(String::as_str).collect::<Vec<_>>(), KEYS);
        let nulls: Vec<&str> = json.as_object().unwrap().iter().filter(|(_, v)| v.is_null()).map(|(k, _)| k.as_str()).collect();
        assert_eq!(nulls.len(), 15, "{nulls:?}");
        assert_eq!(serde_json::from_value::<StepMetrics>(json).unwrap(), sparse);

        // The code grader's parts are keys of their own, present only when given.
        let code = StepMetrics { reward_tests: Some(0.5), reward_perfect: Some(0.0), ..example() };
        let json = code.to_json();
        assert_eq!(json.as_object().unwrap().len(), KEYS.len() + 2);
        assert_eq!((json["reward_tests"].as_f64(), json["reward_perfect"].as_f64()), (Some(0.5), Some(0.0)));
        assert_eq!(serde_json::from_value::<StepMetrics>(json).unwrap(), code);

        // A package's grader parts are `reward_<part>` keys among the others, and read back.
        let parts = StepMetrics { grader_parts: [("reward_correct".to_string(), 0.25)].into(), ..example() };
        let json = parts.to_json();
        assert_eq!((json.as_object().unwrap().len(), json["reward_correct"].as_f64()), (KEYS.len() + 1, Some(0.25)));
        assert_eq!(serde_json::from_value::<StepMetrics>(json).unwrap(), parts);
    }

    /// The `agentrt sft` step, held-out and routing lines are the lines the loops built as JSON maps before
    /// they had types: the same text, key for key and number for number.
    #[test]
    fn the_sft_held_out_and_routing_lines_are_the_text_they_always_were() {
        use serde_json::json;
        // As the run writes it: through `RunDir::append`, read back from the file.
        fn text<T: Serialize>(line: &T) -> String {
            let dir = tempfile::tempdir().unwrap();
            let run = crate::run_dir::RunDir { path: dir.path().to_path_buf() };
            run.append("lines.jsonl", line).unwrap();
            std::fs::read_to_string(dir.path().join("lines.jsonl")).unwrap().trim_end_matches('\n').to_string()
        }
        let sft = SftStepMetrics {
            step: 2,
            epoch: 0.125,
            examples_seen: 4,
            train_loss: 2.3254988193511963,
            val_loss: Some(1.250346296129952),
            val_tokens: Some(456),
            model_tokens: 44,
            tokens: 138,
            routed: 2,
            lr: 0.001,
            grad_norm: Some(1.7830854036481152),
            seconds: 54.188294347,
        };
        let old = json!({
            "step": 2, "epoch": 0.125, "examples_seen": 4, "train_loss": 2.3254988193511963, "val_loss": 1.250346296129952,
            "val_tokens": 456, "model_tokens": 44, "tokens": 138, "routed": 2, "lr": 0.001, "grad_norm": 1.7830854036481152,
            "seconds": 54.188294347,
        });
        assert_eq!(text(&sft), old.to_string());
        assert_eq!(
            text(&sft),
            r#"{"epoch":0.125,"examples_seen":4,"grad_norm":1.7830854036481152,"lr":0.001,"model_tokens":44,"routed":2,"seconds":54.188294347,"step":2,"tokens":138,"train_loss":2.3254988193511963,"val_loss":1.250346296129952,"val_tokens":456}"#
        );
        let quiet = SftStepMetrics { val_loss: None, val_tokens: None, grad_norm: None, train_loss: f64::NAN, ..sft.clone() };
        let old = json!({
            "step": 2, "epoch": 0.125, "examples_seen": 4, "train_loss": f64::NAN, "val_loss": null, "val_tokens": null, "model_tokens": 44,
            "tokens": 138, "routed": 2, "lr": 0.001, "grad_norm": null, "seconds": 54.188294347,
        });
        assert_eq!(text(&quiet), old.to_string());
        let back: SftStepMetrics = serde_json::from_str(&text(&quiet)).unwrap();
        assert!(back.train_loss.is_nan() && back.val_loss.is_none());
        assert_eq!(serde_json::from_str::<SftStepMetrics>(&text(&sft)).unwrap(), sft);

        let held_out = HeldOutEval {
            step: 0,
            questions: 2,
            accuracy: 0.0,
            accuracy_low: 0.0,
            accuracy_high: 0.6576197724933469,
            answer_f1: 0.008771929824561403,
            tool_calls: 0.0,
            search_hit_rate: 0.0,
            seconds: 24.513536164,
        };
        assert_eq!(
            text(&held_out),
            r#"{"accuracy":0.0,"accuracy_high":0.6576197724933469,"accuracy_low":0.0,"answer_f1":0.008771929824561403,"questions":2,"search_hit_rate":0.0,"seconds":24.513536164,"step":0,"tool_calls":0.0}"#
        );

        let mode = |accuracy, reward_mean, flagged| RoutingModeEval { accuracy, reward_mean, flagged };
        let routing = RoutingEval { step: 3, both: mode(0.5, 0.75, 0.25), retain_only: mode(0.5, 0.5, 0.0), forget_only: mode(0.0, 0.125, 1.0) };
        let old = json!({
            "step": 3,
            "both": {"accuracy": 0.5, "reward_mean": 0.75, "flagged": 0.25},
            "retain_only": {"accuracy": 0.5, "reward_mean": 0.5, "flagged": 0.0},
            "forget_only": {"accuracy": 0.0, "reward_mean": 0.125, "flagged": 1.0},
        });
        assert_eq!(text(&routing), old.to_string());
        assert_eq!(serde_json::from_str::<RoutingEval>(&text(&routing)).unwrap(), routing);
    }

    #[test]
    fn a_non_finite_loss_is_written_as_null_and_read_back_as_nan() {
        let m = StepMetrics { loss: f64::NAN, kl: f64::INFINITY, ..example() };
        let json = m.to_json();
        assert!(json["loss"].is_null() && json["kl"].is_null());
        let back: StepMetrics = serde_json::from_value(json).unwrap();
        assert!(back.loss.is_nan() && back.kl.is_nan());
    }

    #[test]
    fn reading_skips_a_torn_last_line_and_names_the_line_that_is_not_a_step() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("metrics.jsonl");
        assert!(StepMetrics::read(&p).unwrap().is_empty());
        let line = |step| StepMetrics { step, ..example() }.to_string();
        std::fs::write(&p, format!("{}\n\n{}\n{{\"step\": 3, \"rew", line(1), line(2))).unwrap();
        assert_eq!(StepMetrics::read(&p).unwrap().iter().map(|m| m.step).collect::<Vec<_>>(), [1, 2]);
        std::fs::write(&p, format!("{}\n{{\"step\": 2, \"train_loss\": 1.5}}\n", line(1))).unwrap();
        let e = StepMetrics::read(&p).unwrap_err().to_string();
        assert!(e.contains("metrics.jsonl: line 2") && e.contains("missing field"), "{e}");
    }
}
