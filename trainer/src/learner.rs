//! The policy-gradient update: per-sequence loss on the model's own tokens, gradients summed over a step
//! (and over accumulation batches), clipped by global norm, one AdamW step on the adapters.
//!
//! Loss of sample `i` (divided by the number of samples in the step; or, with [`LossScale::PerToken`],
//! summed over its tokens and divided by the step's model tokens):
//! `mean over its model tokens t of [ -A_i · log p(t) + beta · k3(t) ]`, where `k3 = exp(r) - r - 1` with
//! `r = log p_ref(t) - log p(t)` (Schulman's unbiased, non-negative KL estimator) against the reference:
//! the base model (adapters off), or, for a run warm-started from an adapter (`model.init_adapter`), the
//! base model with that initial adapter, frozen ([`Learner::set_reference`]). With [`LearnerConfig::clip`]
//! (several optimizer steps on one step's samples), `-A_i · log p(t)` becomes PPO's clipped objective
//! `-min(ρ·A_i, clip(ρ, 1 - low, 1 + high)·A_i)` with `ρ = p(t) / p_sampler(t)`, the sampler's
//! log-probs carried by each [`Sample`]; its gradient at `ρ = 1` is the plain one. Tool output and prompt tokens are masked out. A routed sample's gradient reaches only
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

impl Sample {
    /// The tokens the model wrote after the first id: those the loss is taken over.
    pub fn model_tokens(&self) -> usize {
        self.model_mask.iter().skip(1).filter(|&&m| m).count()
    }
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
    /// Forward consecutive samples as the trie of their tokens, so what they share (the prompt, and what
    /// they wrote and read alike) is computed once, and the output head only at their model tokens
    /// ([`shared_token_groups`]); the loss and gradients are those of the samples taken one by one.
    pub share_prefixes: bool,
    /// PPO's clipped objective with these `(low, high)` bounds on the ratio to the sampler (`None`: the
    /// plain policy gradient, the same at a ratio of 1). Needs the samples' sampled log-probs.
    pub clip: Option<(f64, f64)>,
    /// Without `clip`: weigh each model token's policy-gradient term by `min(p / p_sampler, cap)`
    /// (detached; truncated importance sampling), for samples that carry their sampled log-probs; `None`:
    /// the ratio is taken as 1.
    pub sampler_correction: Option<f64>,
}

impl LearnerConfig {
    /// The plain gradient at learning rate `lr`, its norm clipped at `max_grad_norm` (0: not clipped):
    /// no KL penalty, no ratio clipping or sampler correction, shared prefixes. What supervised steps
    /// take, and what an RL config adds its choices to.
    pub fn plain(lr: f64, max_grad_norm: f64) -> LearnerConfig {
        LearnerConfig {
            beta: 0.0,
            max_grad_norm,
            optimizer: AdamWConfig { lr, ..AdamWConfig::default() },
            share_prefixes: true,
            clip: None,
            sampler_correction: None,
        }
    }
}

/// How a pass's loss is scaled: what each sample's tokens are divided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossScale {
    /// Each sample's mean over its model tokens, divided by this many samples (GRPO's original).
    PerSample {
        /// The samples the step's loss is averaged over.
        samples: usize,
    },
    /// Every model token divided by this many tokens (DAPO's token-level loss).
    PerToken {
        /// The model tokens the step's loss is averaged over.
        tokens: usize,
    },
}

impl LossScale {
    /// The weight of each model token of a sample with `n_model` of them.
    fn token_weight(self, n_model: usize) -> f64 {
        match self {
            LossScale::PerSample { samples } => 1.0 / (samples as f64 * n_model as f64),
            LossScale::PerToken { tokens } => 1.0 / tokens as f64,
        }
    }
}

/// The model tokens (after the first id) of `samples`: what [`LossScale::PerToken`] divides by.
pub fn model_tokens(samples: &[Sample]) -> usize {
    samples.iter().map(Sample::model_tokens).sum()
}

/// Rows one group's trie may hold (every token its samples do not share, and their shared ones once): they
/// stay in memory together until the group's backward, about 1 MB a row for SmolLM2-135M.
pub const SHARED_PREFIX_MAX_ROWS: usize = 4096;

/// Splits `samples`, in order, into groups forwarded together as the trie of their token sequences
/// ([`agentrt_policy::TokenTree`]: every token two samples share, the prompt and whatever they wrote and
/// read alike, computed once): consecutive samples with the same routing, while the group's trie holds at
/// most [`SHARED_PREFIX_MAX_ROWS`] rows (a sample longer than that is a group of its own). Returns each
/// group with its trie's rows.
pub fn shared_token_groups<'s>(samples: &[&'s Sample]) -> Vec<(Vec<&'s Sample>, usize)> {
    let rows = |group: &[&Sample]| agentrt_policy::TokenTree::build(&group.iter().map(|s| s.ids.as_slice()).collect::<Vec<_>>()).len();
    let mut groups: Vec<(Vec<&Sample>, usize)> = Vec::new();
    let mut current: Vec<&Sample> = Vec::new();
    let mut current_rows = 0;
    for &s in samples {
        if current.first().is_some_and(|f| f.routed == s.routed) {
            current.push(s);
            let with = rows(&current);
            if with <= SHARED_PREFIX_MAX_ROWS {
                current_rows = with;
                continue;
            }
            current.pop();
        }
        if !current.is_empty() {
            groups.push((std::mem::take(&mut current), current_rows));
        }
        current.push(s);
        current_rows = s.ids.len();
    }
    if !current.is_empty() {
        groups.push((current, current_rows));
    }
    groups
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
    /// Model tokens whose ratio to the sampler lay outside the clip bounds (0 without clipping).
    pub clipped_tokens: usize,
    /// Over the model tokens whose sampling log-prob is known: the sum of `sampled - learner` log-probs,
    /// the sum of its absolute value, and how many tokens. The sampler and the learner compute the same
    /// function on the same weights, so this is rounding (about 1e-5) when sampling is local, and measures
    /// how off-policy a server's samples are when it is not.
    pub logprob_gap: LogprobGap,
    /// Where the pass's time went.
    pub seconds: LearnerSeconds,
    /// Token rows the policy's forward computed (a token a group's samples share once; a padded batch
    /// counts its padding): the learner's work, against `tokens`.
    pub rows: usize,
    /// Tokens of the samples the pass trained on (those with model tokens and a loss term).
    pub tokens: usize,
}

/// Seconds of an accumulation pass, by phase.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LearnerSeconds {
    /// The KL reference's forward (0 when beta is 0).
    pub reference: f64,
    /// The policy's forward and the loss.
    pub forward: f64,
    /// The backward pass and summing the gradients.
    pub backward: f64,
}

impl LearnerSeconds {
    /// Adds another pass's seconds.
    pub fn add(&mut self, other: LearnerSeconds) {
        self.reference += other.reference;
        self.forward += other.forward;
        self.backward += other.backward;
    }
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

/// The sampler's log-probs of `group` laid out as `lp` (`[B, T-1]`: entry `t` of row `b` is the log-prob of
/// id `t + 1`), on each sample's model tokens; `lp`'s own detached values everywhere else.
fn sampler_logprobs(group: &[&Sample], lp: &Tensor, masks: &[Vec<bool>]) -> Result<Tensor, TrainError> {
    let own: Vec<Vec<f32>> = lp.detach().to_dtype(candle_core::DType::F32)?.to_vec2()?;
    let width = lp.dim(1)?;
    let mut out = Vec::with_capacity(group.len() * width);
    for ((s, row), mask) in group.iter().zip(own).zip(masks) {
        for (t, v) in row.into_iter().enumerate() {
            let model = mask.get(t + 1).copied().unwrap_or(false);
            out.push(if model { s.sampled_logprobs[t + 1] } else { v });
        }
    }
    Ok(Tensor::from_vec(out, (group.len(), width), lp.device())?.to_dtype(lp.dtype())?)
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

    /// Adds the gradients of `samples`, scaled by `scale`.
    pub fn accumulate(&mut self, samples: &[Sample], scale: LossScale) -> Result<UpdateStats, TrainError> {
        assert!(matches!(scale, LossScale::PerSample { samples: 1.. } | LossScale::PerToken { tokens: 1.. }), "a loss scale must be positive: {scale:?}");
        let mut stats = UpdateStats::default();
        let mut kl_sum = 0.0;
        let beta = self.config.beta;
        let dual = self.policy.adapters.as_ref().is_some_and(|a| a.forget.is_some());
        let mut used = Vec::with_capacity(samples.len());
        for s in samples {
            if s.ids.len() != s.model_mask.len() {
                return Err(TrainError::Run(format!("a sample has {} ids and {} mask entries", s.ids.len(), s.model_mask.len())));
            }
            if s.routed && !dual {
                return Err(TrainError::Run("a routed sample, but the policy has no forget adapter".into()));
            }
            if self.config.clip.is_some() && s.sampled_logprobs.len() != s.ids.len() {
                return Err(TrainError::Run(format!(
                    "the clipped objective needs the sampler's log-probs, but a sample has {} for {} ids (sample locally, or with rollout.sampler_exact_tokens = true)",
                    s.sampled_logprobs.len(),
                    s.ids.len()
                )));
            }
            let n_model = s.model_tokens();
            if n_model > 0 && (s.advantage != 0.0 || beta != 0.0) {
                used.push(s);
            }
        }
        // Per-layer recomputation keeps one sample's activations at a time (through the padded forward); a
        // group keeps all of its own.
        let groups = if self.config.share_prefixes && !self.policy.recompute_layers {
            shared_token_groups(&used).into_iter().map(|(g, rows)| (g, Some(rows))).collect()
        } else {
            used.iter().map(|&s| (vec![s], None)).collect::<Vec<_>>()
        };
        for (group, tree_rows) in groups {
            self.accumulate_group(&group, tree_rows, scale, &mut stats, &mut kl_sum)?;
        }
        if stats.model_tokens > 0 {
            stats.kl = kl_sum / stats.model_tokens as f64;
        }
        Ok(stats)
    }

    /// The gradients of `group`, forwarded as the trie of its sequences when `tree_rows` gives its rows
    /// (only the model's tokens' log-probs computed), or padded (`None`: one sample, whole).
    fn accumulate_group(
        &mut self,
        group: &[&Sample],
        tree_rows: Option<usize>,
        scale: LossScale,
        stats: &mut UpdateStats,
        kl_sum: &mut f64,
    ) -> Result<(), TrainError> {
        let seqs: Vec<Vec<u32>> = group.iter().map(|s| s.ids.clone()).collect();
        let masks: Vec<Vec<bool>> = group.iter().map(|s| s.model_mask.clone()).collect();
        let routed: Vec<bool> = if group[0].routed { vec![true; group.len()] } else { vec![] };
        let logprobs = |policy: &Policy, routed: &[bool]| match tree_rows {
            Some(_) => policy.token_logprobs_tree(&seqs, &masks, routed.first().copied().unwrap_or(false)),
            None => policy.token_logprobs(&seqs, routed),
        };
        let beta = self.config.beta;
        let clock = std::time::Instant::now();
        // The reference is never routed.
        let reference = if beta > 0.0 { Some(self.with_reference(|p| logprobs(p, &[]))?.detach()) } else { None };
        stats.seconds.reference += clock.elapsed().as_secs_f64();
        let clock = std::time::Instant::now();
        let lp = logprobs(&self.policy, &routed)?;
        stats.rows += tree_rows.unwrap_or_else(|| seqs.len() * seqs.iter().map(Vec::len).max().unwrap_or(0));
        let dev = self.policy.device().clone();
        let mask = Policy::target_mask(&seqs, &masks, lp.dim(1)?, &dev)?;
        for (b, s) in group.iter().enumerate() {
            if !s.sampled_logprobs.is_empty() {
                stats.logprob_gap.add(gap(s, &lp.narrow(0, b, 1)?.narrow(1, 0, s.ids.len() - 1)?)?);
            }
        }
        // Sample b's tokens weigh `scale.token_weight(its model tokens)`, its log-probs also −advantage.
        let n_model: Vec<usize> = group.iter().map(|s| s.model_tokens()).collect();
        let weight: Vec<f32> = n_model.iter().map(|&n| scale.token_weight(n) as f32).collect();
        let policy_weight: Vec<f32> = group.iter().zip(&weight).map(|(s, w)| -s.advantage * w).collect();
        let column = |v: Vec<f32>| Tensor::from_vec(v, (group.len(), 1), &dev);
        let carry_sampled = group.iter().all(|s| s.sampled_logprobs.len() == s.ids.len());
        let mut per_token = match self.config.clip {
            None => match self.config.sampler_correction.filter(|_| carry_sampled) {
                None => lp.broadcast_mul(&column(policy_weight)?)?,
                Some(cap) => {
                    // The learner's probability over the sampler's, on the model's tokens (1 elsewhere: the
                    // sampler's log-prob there is the learner's own), capped, and not differentiated.
                    let old = sampler_logprobs(group, &lp, &masks)?;
                    let weight = (lp.detach() - &old)?.exp()?.clamp(0.0, cap)?;
                    (&lp * weight)?.broadcast_mul(&column(policy_weight)?)?
                }
            },
            Some((low, high)) => {
                // ρ = p / p_sampler on the model's tokens; 1 elsewhere (the sampler's log-prob there is
                // the learner's own, detached), so masked positions stay finite.
                let old = sampler_logprobs(group, &lp, &masks)?;
                let ratio = (&lp - &old)?.exp()?;
                let advantage = column(group.iter().map(|s| s.advantage).collect())?;
                let clipped = ratio.clamp(1.0 - low, 1.0 + high)?;
                let objective = ratio.broadcast_mul(&advantage)?.minimum(&clipped.broadcast_mul(&advantage)?)?;
                let outside = ((ratio.lt(1.0 - low)?.to_dtype(candle_core::DType::F32)? + ratio.gt(1.0 + high)?.to_dtype(candle_core::DType::F32)?)? * &mask)?;
                stats.clipped_tokens += outside.sum_all()?.to_scalar::<f32>()? as usize;
                (objective.broadcast_mul(&column(weight.iter().map(|w| -w).collect())?))?
            }
        };
        if let Some(r) = &reference {
            let diff = (r - &lp)?;
            let k3 = ((diff.exp()? - &diff)? - 1.0)?;
            per_token = (per_token + (k3 * beta)?.broadcast_mul(&column(weight)?)?)?;
            *kl_sum += ((&lp - r)? * &mask)?.sum_all()?.to_scalar::<f32>()? as f64;
        }
        let loss = (per_token * &mask)?.sum_all()?;
        stats.loss += loss.to_scalar::<f32>()? as f64;
        stats.seconds.forward += clock.elapsed().as_secs_f64();
        let clock = std::time::Instant::now();
        let grads = self.policy.backward(&loss)?;
        self.add(grads)?;
        stats.seconds.backward += clock.elapsed().as_secs_f64();
        stats.model_tokens += n_model.iter().sum::<usize>();
        stats.tokens += seqs.iter().map(Vec::len).sum::<usize>();
        stats.samples += group.len();
        Ok(())
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
        Ok(self.with_reference(|p| p.token_logprobs(seq, &[]))?.detach())
    }

    /// `f` on the reference: the policy with the reference's adapters in place of its own.
    fn with_reference<T>(&mut self, f: impl FnOnce(&Policy) -> agentrt_policy::Result<T>) -> Result<T, TrainError> {
        let adapters = std::mem::replace(&mut self.policy.adapters, self.reference.take());
        let r = f(&self.policy);
        self.reference = std::mem::replace(&mut self.policy.adapters, adapters);
        Ok(r?)
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

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_policy::model::Arch;
    use agentrt_policy::tiny::tiny_policy;
    use agentrt_policy::{LoraConfig, Target};

    /// Samples that share a 40-token prompt (the first three) and one that does not, with tool output
    /// between their model turns, as training produces them.
    fn samples(routed_tail: bool) -> Vec<Sample> {
        let prompt: Vec<u32> = (0..40).map(|i| 30 + (i * 7) % 200).collect();
        let mut out = Vec::new();
        for (i, (reply, advantage)) in [(9usize, 0.7f32), (23, -0.3), (14, 1.2)].into_iter().enumerate() {
            let mut ids = prompt.clone();
            let mut mask = vec![false; prompt.len()];
            for j in 0..reply {
                // A model turn, a tool turn of 5 tokens, and more model tokens.
                ids.push(40 + ((i * 31 + j * 13) % 200) as u32);
                mask.push(!(4..9).contains(&j));
            }
            out.push(Sample { ids, model_mask: mask, advantage, routed: false, sampled_logprobs: vec![] });
        }
        let other: Vec<u32> = (0..30).map(|i| 50 + (i * 11) % 150).collect();
        let mut mask = vec![false; 20];
        mask.extend([true; 10]);
        out.push(Sample { ids: other, model_mask: mask, advantage: 0.4, routed: routed_tail, sampled_logprobs: vec![] });
        out
    }

    fn gradients(learner: &mut Learner, samples: &[Sample], share: bool) -> (UpdateStats, Vec<Option<Vec<f32>>>) {
        learner.config.share_prefixes = share;
        let stats = learner.accumulate(samples, LossScale::PerSample { samples: 4 }).unwrap();
        let grads = std::mem::replace(&mut learner.pending, vec![None; learner.vars.len()]);
        (stats, grads.into_iter().map(|g| g.map(|g| g.flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect())
    }

    /// The trie update is the per-sample update: the same loss and every LoRA gradient within 1e-5 relative
    /// (the KL within 1e-5 nats), on the three architectures (plain, q/k/v biases, q/k norms), with the KL
    /// reference on, dual adapters and routed samples, and samples that share tokens past their prompt
    /// (one wrote what another wrote, then parted from it).
    #[test]
    fn the_trie_update_equals_the_per_sample_update() {
        for (arch, dual) in [(Arch::Llama, false), (Arch::Qwen2, true), (Arch::Qwen3, false)] {
            let mut policy = tiny_policy(arch, 3).unwrap();
            policy.init_adapters(LoraConfig { rank: 4, alpha: 8.0, targets: Target::ALL.to_vec(), dual }, 5).unwrap();
            policy.adapters.as_ref().unwrap().randomize_b(0.05, 1).unwrap();
            let mut learner = Learner::new(policy, LearnerConfig { beta: 0.05, ..LearnerConfig::plain(AdamWConfig::default().lr, 0.0) }).unwrap();
            // A KL reference that differs from the policy: the same adapters with other B's.
            let reference =
                AdapterSet::new(learner.policy.adapters.as_ref().unwrap().config.clone(), &learner.policy.decoder.cfg, learner.policy.device(), 9).unwrap();
            reference.randomize_b(0.05, 2).unwrap();
            learner.set_reference(Some(reference));
            let mut all = samples(dual);
            // A fifth sample that wrote what the second did, then parted from it for its last 4 tokens.
            let mut parted = all[1].clone();
            let n = parted.ids.len();
            parted.ids[n - 4..].iter_mut().for_each(|t| *t = 7 + *t % 5);
            parted.advantage = -0.9;
            all.insert(2, parted);
            if dual {
                all.iter_mut().take(4).for_each(|s| s.routed = true);
            }
            let groups = shared_token_groups(&all.iter().collect::<Vec<_>>());
            // One trie: the 40-token prompt once, the three replies (the fifth sample's 4 tokens past where it
            // parted), and the other sample: 40 + 9 + 23 + 4 + 14 + 30 rows.
            assert_eq!(groups.iter().map(|(g, rows)| (g.len(), *rows)).collect::<Vec<_>>(), vec![(5, 120)], "{arch:?}");

            let (shared, g_shared) = gradients(&mut learner, &all, true);
            let (alone, g_alone) = gradients(&mut learner, &all, false);
            assert_eq!((shared.samples, shared.model_tokens), (alone.samples, alone.model_tokens));
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1e-6);
            assert!(close(shared.loss, alone.loss), "{arch:?}: loss {} vs {}", shared.loss, alone.loss);
            // The KL is a mean of small differences of log-probs: compared in nats, not relatively.
            assert!((shared.kl - alone.kl).abs() < 1e-5, "{arch:?}: kl {} vs {}", shared.kl, alone.kl);
            let mut compared = 0;
            for (a, b) in g_shared.iter().zip(&g_alone) {
                match (a, b) {
                    (Some(a), Some(b)) => {
                        let diff: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>().sqrt();
                        let norm: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum::<f64>().sqrt();
                        assert!(norm > 0.0 && diff <= 1e-5 * norm, "{arch:?}: a gradient differs by {diff} (norm {norm})");
                        compared += 1;
                    }
                    (None, None) => {}
                    _ => panic!("{arch:?}: a parameter has a gradient on one path only"),
                }
            }
            assert!(compared >= learner.vars.len() / 2, "{arch:?}: only {compared} gradients compared");
        }
    }

    /// A learner without clipping or correction over a tiny policy with random adapters, and the test
    /// samples with the sampler's log-probs set to the learner's own (entry t + 1 is the log-prob of id
    /// t + 1): every ratio is 1.
    fn learner_at_ratio_one() -> (Learner, Vec<Sample>, LossScale) {
        let mut policy = tiny_policy(Arch::Llama, 3).unwrap();
        policy.init_adapters(LoraConfig { rank: 4, alpha: 8.0, targets: Target::ALL.to_vec(), dual: false }, 5).unwrap();
        policy.adapters.as_ref().unwrap().randomize_b(0.05, 1).unwrap();
        let learner = Learner::new(policy, LearnerConfig::plain(AdamWConfig::default().lr, 0.0)).unwrap();
        let mut all = samples(false);
        for s in &mut all {
            let lp: Vec<f32> = learner.policy.token_logprobs(std::slice::from_ref(&s.ids), &[]).unwrap().squeeze(0).unwrap().to_vec1().unwrap();
            s.sampled_logprobs = std::iter::once(0.0).chain(lp).collect();
        }
        let scale = LossScale::PerToken { tokens: model_tokens(&all) };
        (learner, all, scale)
    }

    /// The clipped objective: at a ratio of 1 (the sampler's log-probs are the learner's) it gives the
    /// plain policy gradient; where the ratio is below `1 - clip_low` and the advantage negative, PPO's
    /// minimum takes the clipped branch, so those tokens give no gradient and are counted as clipped.
    #[test]
    fn the_clipped_objective_is_the_plain_gradient_at_ratio_one_and_flat_where_it_clips() {
        let (mut learner, mut all, scale) = learner_at_ratio_one();
        let flat = |g: &[Option<Vec<f32>>]| g.iter().flatten().flatten().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let plain = {
            learner.accumulate(&all, scale).unwrap();
            std::mem::replace(&mut learner.pending, vec![None; learner.vars.len()])
        };
        learner.config.clip = Some((0.2, 0.28));
        let stats = learner.accumulate(&all, scale).unwrap();
        let clipped = std::mem::replace(&mut learner.pending, vec![None; learner.vars.len()]);
        assert_eq!(stats.clipped_tokens, 0);
        let (plain, clipped): (Vec<_>, Vec<_>) = (
            plain.into_iter().map(|g| g.map(|g| g.flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect(),
            clipped.into_iter().map(|g| g.map(|g| g.flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect(),
        );
        let norm = flat(&plain);
        assert!(norm > 0.0);
        let diff: f64 = plain.iter().flatten().flatten().zip(clipped.iter().flatten().flatten()).map(|(a, b)| ((a - b) as f64).powi(2)).sum::<f64>().sqrt();
        assert!(diff <= 1e-4 * norm, "at ratio 1 the clipped gradient differs by {diff} (norm {norm})");

        // The sampler thought every token e times likelier (ratio 1/e < 0.8), and every advantage is negative.
        for s in &mut all {
            s.advantage = -s.advantage.abs();
            for (lp, m) in s.sampled_logprobs.iter_mut().zip(&s.model_mask) {
                if *m {
                    *lp += 1.0;
                }
            }
        }
        let stats = learner.accumulate(&all, scale).unwrap();
        assert_eq!(stats.clipped_tokens, model_tokens(&all), "every model token is outside the bounds");
        let grads: Vec<_> = learner.pending.iter().map(|g| g.as_ref().map(|g| g.flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect();
        assert!(flat(&grads) < 1e-9, "the clipped branch passed a gradient: {}", flat(&grads));
    }

    /// The sampler correction (truncated importance sampling): with the sampler's log-probs equal to the
    /// learner's it is the plain gradient; with the sampler e times likelier on every model token, every
    /// token's term weighs 1/e, so the gradient is the plain one times 1/e; and the weight is capped.
    #[test]
    fn the_sampler_correction_weighs_each_token_by_its_capped_ratio() {
        let (mut learner, mut all, scale) = learner_at_ratio_one();
        let grads = |learner: &mut Learner, all: &[Sample]| -> Vec<f32> {
            learner.accumulate(all, scale).unwrap();
            std::mem::replace(&mut learner.pending, vec![None; learner.vars.len()])
                .into_iter()
                .flatten()
                .flat_map(|g| g.flatten_all().unwrap().to_vec1::<f32>().unwrap())
                .collect()
        };
        let plain = grads(&mut learner, &all);
        let norm = plain.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let off_by = |a: &[f32], b: &[f32], k: f64| a.iter().zip(b).map(|(x, y)| (*x as f64 - k * *y as f64).powi(2)).sum::<f64>().sqrt();
        learner.config.sampler_correction = Some(2.0);
        let at_one = grads(&mut learner, &all);
        assert!(off_by(&at_one, &plain, 1.0) <= 1e-4 * norm, "at ratio 1 the corrected gradient is the plain one");
        for s in &mut all {
            for (lp, m) in s.sampled_logprobs.iter_mut().zip(&s.model_mask) {
                if *m {
                    *lp += 1.0;
                }
            }
        }
        let scaled = grads(&mut learner, &all);
        assert!(off_by(&scaled, &plain, (-1.0f64).exp()) <= 1e-4 * norm, "each token weighs p / p_sampler = 1/e");
        // The sampler e^2 times less likely: the weight e^2 is capped at 2.
        for s in &mut all {
            for (lp, m) in s.sampled_logprobs.iter_mut().zip(&s.model_mask) {
                if *m {
                    *lp -= 3.0;
                }
            }
        }
        let capped = grads(&mut learner, &all);
        assert!(off_by(&capped, &plain, 2.0) <= 1e-4 * norm, "the weight is capped");
    }

    #[test]
    fn groups_need_the_same_routing_and_fit_the_row_budget() {
        let all = samples(false);
        let refs: Vec<&Sample> = all.iter().collect();
        assert_eq!(shared_token_groups(&refs).iter().map(|(g, _)| g.len()).collect::<Vec<_>>(), vec![4]);
        // Different routing splits a group.
        let mut all = samples(false);
        all[2].routed = true;
        let refs: Vec<&Sample> = all.iter().collect();
        assert_eq!(shared_token_groups(&refs).iter().map(|(g, _)| g.len()).collect::<Vec<_>>(), vec![2, 1, 1]);
        // Long samples split by the row budget: two share 100 prompt tokens (100 + 2 x 1900 rows), a third
        // would pass 4,096.
        let long: Vec<Sample> = (0..3)
            .map(|i| {
                let mut ids: Vec<u32> = (0..100).collect();
                ids.extend((0..1900).map(|j| 300 + (j * (i + 1) + i) % 250));
                let mut mask = vec![false; 100];
                mask.extend([true; 1900]);
                Sample { ids, model_mask: mask, advantage: 1.0, routed: false, sampled_logprobs: vec![] }
            })
            .collect();
        let refs: Vec<&Sample> = long.iter().collect();
        assert_eq!(shared_token_groups(&refs).iter().map(|(g, rows)| (g.len(), *rows)).collect::<Vec<_>>(), vec![(2, 3900), (1, 2000)]);
    }
}
