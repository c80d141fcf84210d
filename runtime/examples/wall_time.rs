//! Epochs: the wall-time bound. A background thread advances the engine's epoch every 5 ms; a program
//! past its deadline traps at its next loop back-edge, whatever its fuel. (A tool call that never
//! returns is bounded too, by a timeout around the whole run.)
//!
//! cargo run -p agentrt-runtime --example wall_time

use agentrt_runtime::{FixtureTools, Limits, Sandbox, SandboxConfig};
use std::sync::Arc;
use std::time::Duration;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sandbox = Sandbox::new(SandboxConfig::default(), Arc::new(FixtureTools::default())).await?;
    for timeout_ms in [10, 50, 200] {
        let limits = Limits { fuel: u64::MAX / 2, timeout: Duration::from_millis(timeout_ms), ..sandbox.limits() };
        let report = sandbox.run_with_limits("while True:\n    pass\n", limits).await;
        let outcome = report.result.as_ref().map_or_else(|e| e.kind_name(), |_| "ok".into());
        println!("timeout {timeout_ms:>4} ms: {outcome} after {:?}", report.wall_time);
    }
    Ok(())
}
