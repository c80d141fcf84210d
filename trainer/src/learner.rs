//! The policy-gradient update: per-sequence loss on the model's own tokens, gradients summed over a step
//! (and over accumulation batches), clipped by global norm, one AdamW step on the adapters.
//!
//! Loss of sample `i` (divided by the number of samples in the step):
//! `mean over its model tokens t of [ -A_i · log p(t) + beta · k3(t) ]`, where `k3 = exp(r) - r - 1` with
//! `r = log p_ref(t) - log p(t)` (Schulman's unbiased, non-negative KL estimator) against the reference:
//! the base model (adapters off), or, for a run warm-started from an adapter (`model.init_adapter`), the
//! base model with that initial adapter, frozen ([`Learner::set_reference`]). Tool output and prompt tokens are masked out. A routed sample's gradient reaches only
//! the forget adapter; the retain adapter's parameters are then absent from its gradients, so AdamW leaves
//! them untouched.

use crate::error::TrainError;
use agentrt_policy::{AdamW, AdamWConfig, AdapterSet, GradStore, Policy, Tensor, Var};

/// One sequence to learn from.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The token ids: prompt, replies and tool output.
    pub ids: Vec<u32>,
    /// True on the tokens the model wrote (the only ones in the loss).
    pub model_mask: Vec<bool>,
    /// How much better than its group the sample did; scales its log-prob gradient.
    pub advantage: f32,
    /// Train only the forget adapter on this sample.
    pub routed: bool,
    /// The sampler's log-prob of each id (0 off the model's tokens), when it reported them: the learner then
    /// measures how far they are from its own ([`UpdateStats::logprob_gap`]). Empty: not known.
    pub sampled_logprobs: Vec<f32>,
}

/// How the learner updates the adapters: the KL weight, gradient clipping and AdamW.
#[derive(Debug, Clone, Copy)]
pub struct LearnerConfig {
    /// Weight of the KL penalty to the reference; 0 skips the reference's forward pass.
    pub beta: f64,
    /// 0 turns clipping off.
    pub max_grad_norm: f64,
    /// AdamW's learning rate, weight decay and the rest.
    pub optimizer: AdamWConfig,
}

/// What an accumulation pass measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpdateStats {
    /// The loss summed over the samples used (each already divided by the step's sample count).
    pub loss: f64,
    /// Mean over model tokens of `log p - log p_ref` (0 when beta is 0: not computed).
    pub kl: f64,
    /// Model-written tokens in the loss (what the KL is averaged over).
    pub model_tokens: usize,
    /// Samples that contributed a gradient (zero-advantage samples without a KL term are skipped).
    pub samples: usize,
    /// Over the model tokens whose sampling log-prob is known: the sum of `sampled - learner` log-probs,
    /// the sum of its absolute value, and how many tokens. The sampler and the learner compute the same
    /// function on the same weights, so this is rounding (about 1e-5) when sampling is local, and measures
    /// how off-policy a server's samples are when it is not.
    pub logprob_gap: LogprobGap,
}

/// See [`UpdateStats::logprob_gap`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LogprobGap {
    /// Sum of `sampled - learner` log-probs.
    pub sum: f64,
    /// Sum of their absolute values.
    pub abs_sum: f64,
    /// Model tokens whose sampled log-prob was known.
    pub tokens: usize,
}

impl LogprobGap {
    /// Adds another pass's gap.
    pub fn add(&mut self, other: LogprobGap) {
        self.sum += other.sum;
        self.abs_sum += other.abs_sum;
        self.tokens += other.tokens;
    }

    /// Mean `sampled - learner` and mean absolute gap, when any token was measured.
    pub fn means(&self) -> Option<(f64, f64)> {
        (self.tokens > 0).then(|| (self.sum / self.tokens as f64, self.abs_sum / self.tokens as f64))
    }
}

/// The gap between `s`'s sampled log-probs and the learner's `lp` (`[1, T-1]`: entry `t` is the log-prob
/// of id `t + 1`) over its model tokens.
fn gap(s: &Sample, lp: &Tensor) -> Result<LogprobGap, TrainError> {
    if s.sampled_logprobs.len() != s.ids.len() {
        return Err(TrainError::Run(format!("a sample has {} ids and {} sampled log-probs", s.ids.len(), s.sampled_logprobs.len())));
    }
    let learner: Vec<f32> = lp.squeeze(0)?.to_dtype(candle_core::DType::F32)?.to_vec1()?;
    let mut g = LogprobGap::default();
    for t in 1..s.ids.len() {
        if s.model_mask[t] {
            let d = (s.sampled_logprobs[t] - learner[t - 1]) as f64;
            g.sum += d;
            g.abs_sum += d.abs();
            g.tokens += 1;
        }
    }
    Ok(g)
}

/// The policy with its optimizer and the gradients gathered for the next step.
pub struct Learner {
    /// The model being trained, carrying the trainable adapters.
    pub policy: Policy,
    /// AdamW over the adapters' parameters (saved in every checkpoint).
    pub optimizer: AdamW,
    /// The settings the learner was built with.
    pub config: LearnerConfig,
    vars: Vec<Var>,
    /// Summed gradients, one slot per entry of `vars` (`None`: no gradient yet, e.g. retain parameters
    /// after only routed samples).
    pending: Vec<Option<Tensor>>,
    /// Frozen adapters of the KL reference (`None`: the base model). Never trained.
    reference: Option<AdapterSet>,
}

impl Learner {
    /// The policy must carry adapters (`Policy::init_adapters` or `load_adapters`).
    pub fn new(policy: Policy, config: LearnerConfig) -> Result<Learner, TrainError> {
        let vars = policy.trainable_vars();
        if vars.is_empty() {
            return Err(TrainError::Run("the policy has no adapters to train".into()));
        }
        let optimizer = AdamW::new(vars.clone(), config.optimizer)?;
        let pending = vec![None; vars.len()];
        Ok(Learner { policy, optimizer, config, vars, pending, reference: None })
    }

    /// Adds the gradients of `samples`, each weighted `1 / normalizer`.
    pub fn accumulate(&mut self, samples: &[Sample], normalizer: usize) -> Result<UpdateStats, TrainError> {
        assert!(normalizer > 0, "normalizer must be positive");
        let mut stats = UpdateStats::default();
        let mut kl_sum = 0.0;
        let beta = self.config.beta;
        let dual = self.policy.adapters.as_ref().is_some_and(|a| a.forget.is_some());
        for s in samples {
            if s.ids.len() != s.model_mask.len() {
                return Err(TrainError::Run(format!("a sample has {} ids and {} mask entries", s.ids.len(), s.model_mask.len())));
            }
            if s.routed && !dual {
                return Err(TrainError::Run("a routed sample, but the policy has no forget adapter".into()));
            }
            let n_model = s.model_mask.iter().skip(1).filter(|&&m| m).count();
            if n_model == 0 || (s.advantage == 0.0 && beta == 0.0) {
                continue;
            }
            let seq = std::slice::from_ref(&s.ids);
            let reference = if beta > 0.0 { Some(self.reference_logprobs(seq)?) } else { None };
            let routed: &[bool] = if s.routed { &[true] } else { &[] };
            let lp = self.policy.token_logprobs(seq, routed)?;
            let mask = Policy::target_mask(seq, std::slice::from_ref(&s.model_mask), lp.dim(1)?, self.policy.device())?;
            if !s.sampled_logprobs.is_empty() {
                stats.logprob_gap.add(gap(s, &lp)?);
            }
            let weight = 1.0 / (normalizer as f64 * n_model as f64);
            let mut per_token = (&lp * (-(s.advantage as f64)))?;
            if let Some(r) = &reference {
                let diff = (r - &lp)?;
                let k3 = ((diff.exp()? - &diff)? - 1.0)?;
                per_token = (per_token + (k3 * beta)?)?;
                kl_sum += ((&lp - r)? * &mask)?.sum_all()?.to_scalar::<f32>()? as f64;
            }
            let loss = ((per_token * &mask)?.sum_all()? * weight)?;
            stats.loss += loss.to_scalar::<f32>()? as f64;
            let grads = self.policy.backward(&loss)?;
            self.add(grads)?;
            stats.model_tokens += n_model;
            stats.samples += 1;
        }
        if stats.model_tokens > 0 {
            stats.kl = kl_sum / stats.model_tokens as f64;
        }
        Ok(stats)
    }

    /// The sampler-learner gap over `samples` that no update reads (their group was skipped): a forward
    /// pass each, no gradient. Samples whose sampled log-probs are unknown are passed over.
    pub fn measure_gap(&self, samples: &[Sample]) -> Result<LogprobGap, TrainError> {
        let mut total = LogprobGap::default();
        for s in samples.iter().filter(|s| !s.sampled_logprobs.is_empty()) {
            if s.ids.len() != s.model_mask.len() {
                return Err(TrainError::Run(format!("a sample has {} ids and {} mask entries", s.ids.len(), s.model_mask.len())));
            }
            if s.model_mask.iter().skip(1).any(|&m| m) {
                let lp = self.policy.token_logprobs(std::slice::from_ref(&s.ids), &[])?.detach();
                total.add(gap(s, &lp)?);
            }
        }
        Ok(total)
    }

    /// One optimizer step on what was accumulated; returns the gradient norm before clipping, or `None`
    /// when nothing was accumulated (no step is taken then).
    pub fn step(&mut self) -> Result<Option<f64>, TrainError> {
        let mut grads: Vec<Option<Tensor>> = std::mem::replace(&mut self.pending, vec![None; self.vars.len()]);
        if grads.iter().all(Option::is_none) {
            return Ok(None);
        }
        let mut sq = 0.0f64;
        for g in grads.iter().flatten() {
            sq += g.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
        }
        let norm = sq.sqrt();
        if !norm.is_finite() {
            return Err(TrainError::Run(format!("the gradient norm is {norm}: the update was not applied")));
        }
        let max = self.config.max_grad_norm;
        if max > 0.0 && norm > max {
            for g in grads.iter_mut().flatten() {
                *g = (&*g * (max / norm))?;
            }
        }
        let by_id: std::collections::HashMap<_, _> = self.vars.iter().zip(grads).filter_map(|(v, g)| g.map(|g| (v.as_tensor().id(), g))).collect();
        self.optimizer.step_with(|v| by_id.get(&v.as_tensor().id()).cloned())?;
        Ok(Some(norm))
    }

    /// Sets the KL reference: `None` is the base model (adapters off); `Some(adapters)` is the base model
    /// with these adapters, frozen (a warm start keeps a separately loaded copy of its initial adapter here,
    /// so the reference does not move as the trainable copy learns).
    pub fn set_reference(&mut self, adapters: Option<AdapterSet>) {
        self.reference = adapters;
    }

    /// Log-probs under the reference (the base model, or the base model with the frozen reference
    /// adapters), detached.
    pub fn reference_logprobs(&mut self, seq: &[Vec<u32>]) -> Result<Tensor, TrainError> {
        let adapters = std::mem::replace(&mut self.policy.adapters, self.reference.take());
        let r = self.policy.token_logprobs(seq, &[]);
        self.reference = std::mem::replace(&mut self.policy.adapters, adapters);
        Ok(r?.detach())
    }

    fn add(&mut self, grads: GradStore) -> Result<(), TrainError> {
        for (v, slot) in self.vars.iter().zip(self.pending.iter_mut()) {
            if let Some(g) = grads.get(v.as_tensor()) {
                *slot = Some(match slot.take() {
                    Some(t) => (t + g)?,
                    None => g.clone(),
                });
            }
        }
        Ok(())
    }
}
