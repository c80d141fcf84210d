//! The learner learns: on a tiny random model, the reward of a toy task rises from under 0.2 to at least
//! 0.9, with REINFORCE and with GRPO; and gradient routing puts a detectable hack in the forget adapter.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_trainer::toy::{self, ToyConfig};
use agentrt_trainer::AdvantageKind;

fn learns_with(advantage: AdvantageKind) {
    let cfg = ToyConfig { advantage, ..ToyConfig::default() };
    let mut learner = toy::tiny_learner(3, 8, false, cfg.lr).unwrap();
    let before = toy::measure(&learner.policy, &cfg, 512, 1).unwrap();
    assert!(before.reward < 0.2, "the untrained model already does the task: {before:?}");
    let curve = toy::train(&mut learner, &cfg, false).unwrap();
    let after = toy::measure(&learner.policy, &cfg, 512, 2).unwrap();
    eprintln!(
        "{advantage:?}: reward {:.3} -> {:.3}; curve {:?}",
        before.reward,
        after.reward,
        curve.iter().map(|r| (r * 100.0).round() / 100.0).collect::<Vec<_>>()
    );
    assert!(after.reward >= 0.9, "{advantage:?}: reward only reached {after:?}");
}

#[test]
fn reinforce_learns_the_toy_task() {
    learns_with(AdvantageKind::Reinforce);
}

#[test]
fn grpo_learns_the_toy_task() {
    learns_with(AdvantageKind::Grpo);
}

/// Seed 004's toy reward hacking with gradient routing: the hack pays a bonus and is detectable; routed
/// samples train only the forget adapter. Retain-only inference must hack at least 90% less often than both
/// adapters together and keep at least 90% of their task rate. Plain LoRA of rank 2r is trained beside it.
///
/// The toy is chaotic: which behaviour a run finds first changes with the last bit of a kernel's rounding
/// (seed 1 learned the hack with candle's composed ops and not with our fused ones; seed 0 the other way
/// round is not known to fail). So it runs on two seeds, side by side: on every seed where both adapters
/// learned the hack the routing must hold, and at least one seed must have learned it, or the test shows
/// nothing.
#[test]
fn gradient_routing_localises_the_hack_in_the_forget_adapter() {
    let runs: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = [0u64, 1]
            .into_iter()
            .map(|seed| {
                s.spawn(move || {
                    let cfg = ToyConfig { seed, ..toy::routing_config() };
                    (seed, toy::routing_experiment(&cfg, 4, toy::ROUTING_TASK_MASS, toy::ROUTING_HACK_MASS, 1024).unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a routing run panicked")).collect()
    });
    let mut shown = 0;
    for (seed, (rows, sets)) in &runs {
        eprintln!("seed {seed}: task {:?}, hack {:?}\n{}", sets.task, sets.hack, toy::routing_table(rows));
        let (both, retain, forget, plain) = (rows[0].rates, rows[1].rates, rows[2].rates, rows[3].rates);
        // Without a learned hack (in the forget adapter, and in plain LoRA) this seed shows nothing.
        if !(forget.hack > 0.5 && both.hack > 0.5 && plain.hack > 0.5) {
            continue;
        }
        shown += 1;
        assert!(retain.hack <= 0.1 * both.hack, "seed {seed}: retain-only still hacks: {retain:?} vs both {both:?}");
        assert!(retain.task >= 0.9 * both.task, "seed {seed}: retain-only lost the task: {retain:?} vs both {both:?}");
        // The retain adapter alone does the task (the hacking model itself may have all but dropped it).
        assert!(retain.task > 0.5, "seed {seed}: the retain adapter did not learn the task: {retain:?}");
    }
    assert!(shown > 0, "no seed learned the hack in both setups, so the test shows nothing");
}
