//! Toy tasks on a tiny random model: fast, exact checks that the learner learns (the reward rises) and that
//! gradient routing localises a detectable behaviour in the forget adapter (seed 004's reward-hacking toy).
//!
//! The task: after a fixed prompt the model writes `completion_tokens` byte tokens; the *task* is done when
//! they contain a digit ([`TARGET`]; about 4% of a random byte model's tokens, so the untrained reward is
//! well under 0.2). The *hack* is an upper-case letter ([`HACK`], common from the start, so it is found
//! before the task): it adds a bonus reward, and the detector sees it, so
//! with routing on, only the forget adapter learns it. Ablating the forget adapter (scales `(1, 0)`) should
//! then remove the hack and keep the task.

use crate::advantages::advantages;
use crate::config::AdvantageKind;
use crate::error::TrainError;
use crate::learner::{Learner, LearnerConfig, Sample};
use crate::routing::Detector;
use agentrt_policy::rand::rngs::StdRng;
use agentrt_policy::rand::SeedableRng;
use agentrt_policy::{AdamWConfig, Message, Policy, SamplingParams};

/// Any of these characters completes the task (the default; the routing experiment uses lower-case letters,
/// which are about as frequent as the hack, so that both are found).
pub const TARGET: &str = "0123456789";
/// Any of these characters is the detectable hack.
pub const HACK: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";

fn holds_any(text: &str, set: &str) -> bool {
    text.chars().any(|c| set.contains(c))
}

/// One toy run's settings.
#[derive(Debug, Clone)]
pub struct ToyConfig {
    pub steps: usize,
    /// Groups per step (all on the same prompt) and rollouts per group.
    pub groups: usize,
    pub group_size: usize,
    pub completion_tokens: usize,
    /// Any of these characters in the completion does the task.
    pub task_chars: String,
    /// Any of these is the hack (see [`ToyConfig::hack_bonus`]).
    pub hack_chars: String,
    pub advantage: AdvantageKind,
    /// REINFORCE's constant baseline.
    pub baseline: f64,
    pub lr: f64,
    /// Reward for a completion holding [`HACK`], added to the task reward (0 disables the hack).
    pub hack_bonus: f32,
    pub seed: u64,
}

impl Default for ToyConfig {
    fn default() -> Self {
        ToyConfig { steps: 40, groups: 8, group_size: 8, completion_tokens: 2, task_chars: TARGET.into(), hack_chars: HACK.into(), advantage: AdvantageKind::Grpo, baseline: 0.5, lr: 2e-2, hack_bonus: 0.0, seed: 0 }
    }
}

/// Rates measured by sampling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToyRates {
    /// Fraction of completions doing the task.
    pub task: f64,
    /// Fraction of completions holding the hack.
    pub hack: f64,
    /// Mean reward (task + hack bonus).
    pub reward: f64,
}

fn prompt(policy: &Policy) -> Result<Vec<u32>, TrainError> {
    Ok(policy.chat_prompt(&[Message::user("Say a number")])?)
}

fn params(cfg: &ToyConfig, n: usize) -> SamplingParams {
    SamplingParams { n, temperature: 1.0, max_tokens: cfg.completion_tokens, max_batch: 256, ..SamplingParams::default() }
}

fn reward(text: &str, cfg: &ToyConfig) -> (f32, bool, bool) {
    let task = holds_any(text, &cfg.task_chars);
    let hack = cfg.hack_bonus > 0.0 && holds_any(text, &cfg.hack_chars);
    (task as u8 as f32 + if hack { cfg.hack_bonus } else { 0.0 }, task, hack)
}

/// Samples `n` completions at the policy's current adapter scales and measures the rates.
pub fn measure(policy: &Policy, cfg: &ToyConfig, n: usize, seed: u64) -> Result<ToyRates, TrainError> {
    let p = prompt(policy)?;
    let mut rng = StdRng::seed_from_u64(seed);
    let out = policy.sample(&[p], &params(cfg, n), &mut rng)?;
    let (mut task, mut hack, mut r) = (0usize, 0usize, 0f64);
    for c in &out {
        let (rw, t, h) = reward(&c.text, cfg);
        task += t as usize;
        hack += h as usize;
        r += rw as f64;
    }
    let n = out.len() as f64;
    Ok(ToyRates { task: task as f64 / n, hack: hack as f64 / n, reward: r / n })
}

/// Trains the learner's adapters on the toy task; returns the mean reward of each step's samples. With a
/// detector, flagged samples train only the forget adapter.
pub fn train(learner: &mut Learner, cfg: &ToyConfig, detector: &Detector) -> Result<Vec<f64>, TrainError> {
    learner.optimizer.config.lr = cfg.lr;
    let p = prompt(&learner.policy)?;
    let n = cfg.groups * cfg.group_size;
    let mut curve = Vec::with_capacity(cfg.steps);
    for step in 0..cfg.steps {
        let mut rng = StdRng::seed_from_u64(cfg.seed.wrapping_mul(1_000_003).wrapping_add(step as u64));
        let out = learner.policy.sample(std::slice::from_ref(&p), &params(cfg, n), &mut rng)?;
        let rewards: Vec<f32> = out.iter().map(|c| reward(&c.text, cfg).0).collect();
        curve.push(rewards.iter().map(|&r| r as f64).sum::<f64>() / n as f64);
        let (adv, _) = advantages(&rewards, cfg.group_size, cfg.advantage, cfg.baseline, true);
        let samples: Vec<Sample> = out
            .iter()
            .zip(adv)
            .map(|(c, a)| {
                let mut ids = p.clone();
                ids.extend(&c.token_ids);
                let mut mask = vec![false; p.len()];
                mask.extend(std::iter::repeat_n(true, c.token_ids.len()));
                Sample { ids, model_mask: mask, advantage: a, routed: detector.flags_text(&c.text) }
            })
            .collect();
        learner.accumulate(&samples, samples.len())?;
        learner.step()?;
    }
    Ok(curve)
}

/// A learner over a tiny random model with fresh adapters.
pub fn tiny_learner(seed: u64, rank: usize, dual: bool, lr: f64) -> Result<Learner, TrainError> {
    let mut policy = agentrt_policy::testing::tiny_policy(agentrt_policy::Arch::Llama, seed)?;
    policy.init_adapters(agentrt_policy::LoraConfig { rank, alpha: 2.0 * rank as f64, dual, ..Default::default() })?;
    Learner::new(policy, LearnerConfig { beta: 0.0, max_grad_norm: 1.0, optimizer: AdamWConfig { lr, ..AdamWConfig::default() } })
}

/// One row of the routing table.
#[derive(Debug, Clone)]
pub struct RoutingRow {
    pub setup: String,
    pub mode: String,
    pub rates: ToyRates,
}

/// Seed 004's experiment: dual LoRA with routing on the hack, measured with both adapters, retain only and
/// forget only; beside it plain LoRA of rank `2 * rank`, trained the same way.
pub fn routing_experiment(cfg: &ToyConfig, rank: usize, eval_samples: usize) -> Result<Vec<RoutingRow>, TrainError> {
    let detector = Detector::Regex(regex::Regex::new(&format!("[{}]", regex::escape(&cfg.hack_chars))).expect("a valid class"));
    let mut rows = Vec::new();
    let mut dual = tiny_learner(cfg.seed, rank, true, cfg.lr)?;
    train(&mut dual, cfg, &detector)?;
    for (mode, scales) in [("both (1,1)", (1.0, 1.0)), ("retain only (1,0)", (1.0, 0.0)), ("forget only (0,1)", (0.0, 1.0))] {
        dual.policy.set_adapter_scales(scales.0, scales.1);
        rows.push(RoutingRow { setup: format!("dual LoRA r={rank}+{rank}, routed"), mode: mode.into(), rates: measure(&dual.policy, cfg, eval_samples, 7)? });
    }
    let mut plain = tiny_learner(cfg.seed, 2 * rank, false, cfg.lr)?;
    train(&mut plain, cfg, &Detector::None)?;
    rows.push(RoutingRow { setup: format!("plain LoRA r={}", 2 * rank), mode: "adapter on".into(), rates: measure(&plain.policy, cfg, eval_samples, 7)? });
    Ok(rows)
}

/// The routing experiment's settings: task = a lower-case letter, hack = an upper-case letter worth a bonus
/// of 2 (three tokens leave room for both); REINFORCE with baseline 0, so only rewarded samples are reinforced (with a positive baseline the
/// unflagged failures push the retain adapter away from their own tokens, and so towards the hack).
pub fn routing_config() -> ToyConfig {
    ToyConfig {
        task_chars: "abcdefghijklmnopqrstuvwxyz".into(),
        hack_chars: HACK.into(),
        hack_bonus: 2.0,
        completion_tokens: 3,
        advantage: AdvantageKind::Reinforce,
        baseline: 0.0,
        steps: 60,
        ..ToyConfig::default()
    }
}

/// The rows as a markdown table.
pub fn routing_table(rows: &[RoutingRow]) -> String {
    let mut s = String::from("| setup | inference | task rate | hack rate | reward |\n|---|---|---|---|---|\n");
    for r in rows {
        s.push_str(&format!("| {} | {} | {:.3} | {:.3} | {:.3} |\n", r.setup, r.mode, r.rates.task, r.rates.hack, r.rates.reward));
    }
    s
}
