//! Seed 004's toy reward hacking with gradient routing, on a tiny random model: prints the table of task and
//! hack rates for dual LoRA (both adapters, retain only, forget only) and plain LoRA, with the test's
//! settings (`toy::routing_config()`).
//!
//! Usage: cargo run --release -p agentrt-trainer --example routing_toy -- [SEED] [RUNS] [shared|exclusive]
//! Env: TOY_LR, TOY_STEPS, TOY_BONUS override the learning rate, the steps and the hack bonus.

use agentrt_policy::Routing;
use agentrt_trainer::toy;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cfg = toy::routing_config();
    if let Some(s) = args.first() {
        cfg.seed = s.parse()?;
    }
    let runs: usize = args.get(1).map(|r| r.parse()).transpose()?.unwrap_or(1);
    match args.get(2).map(String::as_str) {
        None => {}
        Some("shared") => cfg.routing = Routing::Shared,
        Some("exclusive") => cfg.routing = Routing::Exclusive,
        Some(other) => return Err(format!("routing must be shared or exclusive, not {other:?}").into()),
    }
    let env = |name: &str| std::env::var(name).ok().map(|v| v.parse::<f64>().map_err(|e| format!("{name}={v}: {e}"))).transpose();
    if let Some(v) = env("TOY_LR")? {
        cfg.lr = v;
    }
    if let Some(v) = env("TOY_STEPS")? {
        cfg.steps = v as usize;
    }
    if let Some(v) = env("TOY_BONUS")? {
        cfg.hack_bonus = v as f32;
    }
    for run in 0..runs {
        let t = std::time::Instant::now();
        let (rows, sets) = toy::routing_experiment(&cfg, 4, toy::ROUTING_TASK_MASS, toy::ROUTING_HACK_MASS, 1024)?;
        println!(
            "run {run}: seed {}, {:?} routing, task {:?}, hack {:?}, {:.0} s\n{}",
            cfg.seed,
            cfg.routing,
            sets.task,
            sets.hack,
            t.elapsed().as_secs_f64(),
            toy::routing_table(&rows)
        );
    }
    Ok(())
}
