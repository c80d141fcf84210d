//! The learner learns: on a tiny random model, the reward of a toy task rises from under 0.2 to at least
//! 0.9, with REINFORCE and with GRPO; and gradient routing puts a detectable hack in the forget adapter.

use agentrt_trainer::toy::{self, ToyConfig};
use agentrt_trainer::AdvantageKind;

fn learns_with(advantage: AdvantageKind) {
    let cfg = ToyConfig { advantage, ..ToyConfig::default() };
    let mut learner = toy::tiny_learner(3, 8, false, cfg.lr).unwrap();
    let before = toy::measure(&learner.policy, &cfg, 512, 1).unwrap();
    assert!(before.reward < 0.2, "the untrained model already does the task: {before:?}");
    let curve = toy::train(&mut learner, &cfg, false).unwrap();
    let after = toy::measure(&learner.policy, &cfg, 512, 2).unwrap();
    eprintln!("{advantage:?}: reward {:.3} -> {:.3}; curve {:?}", before.reward, after.reward, curve.iter().map(|r| (r * 100.0).round() / 100.0).collect::<Vec<_>>());
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
#[test]
fn gradient_routing_localises_the_hack_in_the_forget_adapter() {
    let cfg = toy::routing_config();
    let (rows, sets) = toy::routing_experiment(&cfg, 4, toy::ROUTING_TASK_MASS, toy::ROUTING_HACK_MASS, 1024).unwrap();
    eprintln!("task {:?}, hack {:?}\n{}", sets.task, sets.hack, toy::routing_table(&rows));
    let (both, retain, forget, plain) = (rows[0].rates, rows[1].rates, rows[2].rates, rows[3].rates);
    // Without a learned hack (in the forget adapter, and in plain LoRA) the test would show nothing.
    assert!(forget.hack > 0.5 && both.hack > 0.5, "the hack was not learned, so the test shows nothing: both {both:?}, forget {forget:?}");
    assert!(plain.hack > 0.5, "plain LoRA should learn the hack too: {plain:?}");
    assert!(retain.hack <= 0.1 * both.hack, "retain-only still hacks: {retain:?} vs both {both:?}");
    assert!(retain.task >= 0.9 * both.task, "retain-only lost the task: {retain:?} vs both {both:?}");
    // The retain adapter alone does the task (here the hacking model itself had all but dropped it).
    assert!(retain.task > 0.5, "the retain adapter did not learn the task: {retain:?}");
}
