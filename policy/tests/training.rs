//! The differentiable forward, dual LoRA routing and the optimizer, on tiny random models.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_policy::tiny::tiny_policy;
use agentrt_policy::{AdamW, AdamWConfig, Arch, LoraConfig, Policy, Routing, SamplingParams, Target, Tensor};
use rand::SeedableRng;

fn max_abs(a: &Tensor, b: &Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

/// The largest gap between two gradients, relative to the first one's scale: gradients here reach
/// ~20, where f32 spacing is ~2e-6, and summation order differs between CPUs' kernels (AVX2 vs AVX-512),
/// so an absolute 1e-5 is a few ulps on one machine and a failure on another.
fn grad_gap(a: &Tensor, b: &Tensor) -> f32 {
    let scale = a.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap().max(1.0);
    max_abs(a, b) / scale
}

fn with_adapters(arch: Arch, dual: bool) -> Policy {
    let mut p = tiny_policy(arch, 7).unwrap();
    p.init_adapters(LoraConfig { rank: 4, alpha: 8.0, targets: Target::ALL.to_vec(), dual }, 0).unwrap();
    p.adapters.as_ref().unwrap().randomize_b(0.1, 1).unwrap();
    p
}

fn seqs() -> Vec<Vec<u32>> {
    vec![b"hello world, tiny".iter().map(|&b| b as u32).collect(), b"abc def".iter().map(|&b| b as u32).collect()]
}

#[test]
fn fused_and_differentiable_logits_agree() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let p = with_adapters(arch, true);
        let toks = Tensor::new(&[[1u32, 5, 9, 200, 3, 77, 12, 4]], p.device()).unwrap();
        let a = p.decoder.forward_train(&toks, p.adapters.as_ref(), None).unwrap();
        let b = p.decoder.forward_fused_all(&toks, p.adapters.as_ref()).unwrap();
        let d = max_abs(&a, &b);
        assert!(d < 1e-4, "{arch:?}: fused vs differentiable logits differ by {d}");
    }
}

#[test]
fn sampled_logprobs_match_training_logprobs_exactly_on_the_same_ids() {
    for arch in [Arch::Llama, Arch::Qwen2] {
        let p = with_adapters(arch, false);
        let prompts = vec![vec![256u32, 10, 20, 30, 40, 50], vec![256u32, 7]];
        let params = SamplingParams { n: 2, temperature: 1.0, max_tokens: 12, ..Default::default() };
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let outs = p.sample(&prompts, &params, &mut rng).unwrap();
        assert_eq!(outs.len(), 4);
        for c in &outs {
            assert_eq!(c.token_ids.len(), c.logprobs.len());
            let mut full = prompts[c.prompt_index].clone();
            full.extend(&c.token_ids);
            let lp = p.token_logprobs(&[full.clone()], &[]).unwrap().squeeze(0).unwrap().to_vec1::<f32>().unwrap();
            let start = prompts[c.prompt_index].len() - 1;
            for (k, &x) in c.logprobs.iter().enumerate() {
                assert!((lp[start + k] - x).abs() < 1e-4, "{arch:?} token {k}: sampled {x}, recomputed {}", lp[start + k]);
            }
        }
    }
}

#[test]
fn every_lora_parameter_gets_a_nonzero_gradient() {
    let p = with_adapters(Arch::Qwen2, true);
    // One ordinary and one routed sample: retain learns from the first, forget from both.
    let lp = p.token_logprobs(&seqs(), &[false, true]).unwrap();
    let grads = lp.sum_all().unwrap().backward().unwrap();
    for (i, v) in p.trainable_vars().iter().enumerate() {
        let g = grads.get(v.as_tensor()).unwrap_or_else(|| panic!("param {i} has no gradient"));
        let n = g.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(n > 0.0, "param {i} has a zero gradient");
    }
}

/// The log-probs of the two sequences `s` unrouted, and with the second routed to the forget adapter, which
/// must be the same values: routing decides where gradients go, not the function.
fn plain_and_routed(p: &Policy, s: &[Vec<u32>]) -> (Tensor, Tensor) {
    let plain = p.token_logprobs(s, &[]).unwrap();
    let routed = p.token_logprobs(s, &[false, true]).unwrap();
    let d = max_abs(&plain, &routed);
    assert!(d < 2e-5, "routing changed the function by {d}");
    (plain, routed)
}

#[test]
fn routing_is_exact_values_unchanged_retain_sees_only_unrouted_samples() {
    let p = with_adapters(Arch::Llama, true);
    let s = seqs();
    let (plain, routed) = plain_and_routed(&p, &s);
    // Retain gradient of the mixed batch == retain gradient of the unrouted sample alone.
    let g_mixed = routed.sum_all().unwrap().backward().unwrap();
    let only0 = p.token_logprobs(&s[..1], &[]).unwrap();
    let g0 = only0.sum_all().unwrap().backward().unwrap();
    let ad = p.adapters.as_ref().unwrap();
    for v in ad.retain.vars() {
        let d = grad_gap(g_mixed.get(v.as_tensor()).unwrap(), g0.get(v.as_tensor()).unwrap());
        assert!(d < 1e-5, "retain gradient leaked from the routed sample: {d}");
    }
    // Forget gradient of the mixed batch == forget gradient of both samples without routing.
    let g_plain = plain.sum_all().unwrap().backward().unwrap();
    for v in ad.forget.as_ref().unwrap().vars() {
        let d = grad_gap(g_mixed.get(v.as_tensor()).unwrap(), g_plain.get(v.as_tensor()).unwrap());
        assert!(d < 1e-5, "forget gradient differs under routing: {d}");
    }
}

#[test]
fn exclusive_routing_partitions_the_batch_between_the_adapters() {
    let mut p = with_adapters(Arch::Qwen2, true);
    p.set_routing(Routing::Exclusive);
    let s = seqs();
    let (_, mixed) = plain_and_routed(&p, &s);
    let g_mixed = mixed.sum_all().unwrap().backward().unwrap();
    let g0 = p.token_logprobs(&s[..1], &[]).unwrap().sum_all().unwrap().backward().unwrap();
    let g1 = p.token_logprobs(&s[1..], &[true]).unwrap().sum_all().unwrap().backward().unwrap();
    let ad = p.adapters.as_ref().unwrap();
    // Unflagged alone: only retain gets gradients; flagged alone: only forget.
    for v in ad.retain.vars() {
        assert!(g1.get(v.as_tensor()).is_none(), "a flagged sample reached the retain adapter");
        let d = grad_gap(g_mixed.get(v.as_tensor()).unwrap(), g0.get(v.as_tensor()).unwrap());
        assert!(d < 1e-5, "retain gradient of the mixed batch is not the unflagged sample's: {d}");
    }
    for v in ad.forget.as_ref().unwrap().vars() {
        assert!(g0.get(v.as_tensor()).is_none(), "an unflagged sample reached the forget adapter under exclusive routing");
        let d = grad_gap(g_mixed.get(v.as_tensor()).unwrap(), g1.get(v.as_tensor()).unwrap());
        assert!(d < 1e-5, "forget gradient of the mixed batch is not the flagged sample's: {d}");
    }
}

#[test]
fn adapter_initialisation_is_reproducible_from_its_seed() {
    let draw = |seed| {
        let mut p = tiny_policy(Arch::Llama, 7).unwrap();
        p.init_adapters(LoraConfig { rank: 2, alpha: 4.0, targets: vec![Target::Q], dual: true }, seed).unwrap();
        p.trainable_vars().iter().map(|v| v.flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(draw(1), draw(1));
    assert_ne!(draw(1), draw(2));
    let both = draw(1);
    assert_ne!(both[0], both[both.len() / 2], "retain and forget drew the same A");
}

#[test]
fn all_routed_step_leaves_every_retain_parameter_unchanged() {
    let p = with_adapters(Arch::Qwen3, true);
    let ad = p.adapters.as_ref().unwrap();
    let before: Vec<Vec<f32>> = ad.retain.vars().iter().map(|v| v.flatten_all().unwrap().to_vec1().unwrap()).collect();
    let fbefore: Vec<Vec<f32>> = ad.forget.as_ref().unwrap().vars().iter().map(|v| v.flatten_all().unwrap().to_vec1().unwrap()).collect();
    let mut opt = AdamW::new(p.trainable_vars(), AdamWConfig { lr: 1e-2, weight_decay: 0.1, ..Default::default() }).unwrap();
    let loss = p.token_logprobs(&seqs(), &[true, true]).unwrap().sum_all().unwrap().neg().unwrap();
    opt.step(&loss.backward().unwrap()).unwrap();
    for (v, b) in ad.retain.vars().iter().zip(&before) {
        assert_eq!(&v.flatten_all().unwrap().to_vec1::<f32>().unwrap(), b, "a retain parameter moved");
    }
    for (v, b) in ad.forget.as_ref().unwrap().vars().iter().zip(&fbefore) {
        assert_ne!(&v.flatten_all().unwrap().to_vec1::<f32>().unwrap(), b, "a forget parameter did not move");
    }
}

#[test]
fn forget_scale_zero_ablates_the_forget_adapter() {
    let mut p = with_adapters(Arch::Llama, true);
    let toks = Tensor::new(&[[1u32, 5, 9, 200, 3]], p.device()).unwrap();
    p.set_adapter_scales(1.0, 0.0);
    let ablated = p.decoder.forward_fused_all(&toks, p.adapters.as_ref()).unwrap();
    let mut only_retain = p.adapters.clone().unwrap();
    only_retain.forget = None;
    let r = p.decoder.forward_fused_all(&toks, Some(&only_retain)).unwrap();
    assert!(max_abs(&ablated, &r) < 1e-6);
    p.set_adapter_scales(1.0, 1.0);
    let both = p.decoder.forward_fused_all(&toks, p.adapters.as_ref()).unwrap();
    assert!(max_abs(&both, &r) > 1e-4, "the forget adapter should matter at scale 1");
}

#[test]
fn per_sequence_backward_equals_batched_backward() {
    let p = with_adapters(Arch::Qwen2, true);
    let s = seqs();
    let masks: Vec<Vec<bool>> = s.iter().map(|x| (0..x.len()).map(|i| i >= 3).collect()).collect();
    let routed = [false, true];
    let batched = p.sequence_logprobs(&s, &masks, &routed).unwrap().sum_all().unwrap().backward().unwrap();
    let per = p.backward_per_sequence(&s, &masks, &routed, |_, lp, m| Ok((lp * m)?.sum_all()?)).unwrap();
    for v in p.trainable_vars() {
        let d = grad_gap(batched.get(v.as_tensor()).unwrap(), per.get(v.as_tensor()).unwrap());
        assert!(d < 1e-5, "{d}");
    }
}

#[test]
fn per_layer_recomputation_gives_the_same_gradients() {
    let mut p = with_adapters(Arch::Qwen2, true);
    let s = seqs();
    let plain = p.token_logprobs(&s, &[false, true]).unwrap().sum_all().unwrap();
    let g_plain = p.backward(&plain).unwrap();
    p.recompute_layers = true;
    let ck = p.token_logprobs(&s, &[false, true]).unwrap().sum_all().unwrap();
    let g_ck = p.backward(&ck).unwrap();
    assert!((plain.to_scalar::<f32>().unwrap() - ck.to_scalar::<f32>().unwrap()).abs() < 1e-4);
    for v in p.trainable_vars() {
        let d = grad_gap(g_plain.get(v.as_tensor()).unwrap(), g_ck.get(v.as_tensor()).expect("gradient under recomputation"));
        assert!(d < 1e-5, "{d}");
    }
}

/// The 8-bit learner (`model.learner_products = "int8"`): on a model whose projections tile for the int8
/// kernels, the LoRA gradients stay within a cosine of 0.99 of the f32 path's and their norm within 5%,
/// and switching back gives the f32 gradients exactly (the 8-bit copies change nothing else).
#[test]
fn the_int8_learner_keeps_the_gradient_close_to_f32() {
    use agentrt_policy::fused::LearnerProducts;
    use agentrt_policy::ModelConfig;
    let cfg =
        ModelConfig { hidden_size: 128, intermediate_size: 256, num_heads: 4, num_kv_heads: 2, head_dim: 32, ..agentrt_policy::tiny::tiny_config(Arch::Qwen2) };
    let mut p = agentrt_policy::tiny::tiny_policy_with(cfg, 7).unwrap();
    p.init_adapters(LoraConfig { rank: 4, alpha: 8.0, targets: Target::ALL.to_vec(), dual: false }, 0).unwrap();
    p.adapters.as_ref().unwrap().randomize_b(0.1, 1).unwrap();
    let grads = |p: &Policy| -> Vec<f32> {
        let loss = p.token_logprobs(&seqs(), &[]).unwrap().sum_all().unwrap();
        let g = p.backward(&loss).unwrap();
        p.trainable_vars().iter().flat_map(|v| g.get(v.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect()
    };
    let f32_grads = grads(&p);
    p.decoder.learner_products = LearnerProducts::Int8;
    let int8_grads = grads(&p);
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum::<f64>();
    let cosine = dot(&f32_grads, &int8_grads) / (dot(&f32_grads, &f32_grads) * dot(&int8_grads, &int8_grads)).sqrt();
    let norm_ratio = (dot(&int8_grads, &int8_grads) / dot(&f32_grads, &f32_grads)).sqrt();
    assert!(cosine > 0.99 && (norm_ratio - 1.0).abs() < 0.05, "cosine {cosine}, norm ratio {norm_ratio}");
    assert!(int8_grads != f32_grads, "the 8-bit products were not used");
    p.decoder.learner_products = LearnerProducts::F32;
    assert_eq!(grads(&p), f32_grads);
}
