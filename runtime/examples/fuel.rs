//! Fuel: the instruction budget. The same loop runs under three budgets; with too little fuel it stops
//! with `limit-exceeded:fuel`, and the report says how much it burned.
//!
//! cargo run -p agentrt-runtime --example fuel

use agentrt_runtime::{FixtureTools, Limits, Sandbox, SandboxConfig};
use std::sync::Arc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sandbox = Sandbox::new(SandboxConfig::default(), Arc::new(FixtureTools::default())).await?;
    let program = "total = 0\nfor i in range(100000):\n    total += i\ntotal\n";
    for fuel in [1_000_000, 10_000_000, 100_000_000] {
        let report = sandbox.run_with_limits(program, Limits { fuel, ..sandbox.limits() }).await;
        let outcome = match &report.result {
            Ok(outcome) => format!("ok, value {}", outcome.value.as_deref().unwrap_or("None")),
            Err(error) => error.kind_name(),
        };
        println!("fuel {fuel:>11}: {outcome:<30} burned {:>11} in {:?}", report.fuel_used, report.wall_time);
    }
    Ok(())
}
