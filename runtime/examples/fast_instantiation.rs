//! Fast instantiation: every program gets a fresh instance (nothing survives from one program to the
//! next), and the pooling allocator plus an `InstancePre` make that cost microseconds.
//!
//! cargo run --release -p agentrt-runtime --example fast_instantiation

use agentrt_runtime::{FixtureTools, Sandbox, SandboxConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    let sandbox = Sandbox::new(SandboxConfig::default(), Arc::new(FixtureTools::default())).await?;
    println!("sandbox ready in {:?} (the interpreter comes precompiled from the cache after the first run)", started.elapsed());
    let mut samples: Vec<Duration> = Vec::new();
    for _ in 0..1000 {
        let report = sandbox.run("x = 1").await;
        anyhow::ensure!(report.is_ok(), "{:?}", report.result);
        samples.push(report.wall_time);
    }
    samples.sort();
    println!("fresh instance + a one-line program: p50 {:?}, p99 {:?}", samples[500], samples[990]);
    Ok(())
}
