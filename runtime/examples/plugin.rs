//! Plug-in tools: load the example component (guest-tools/word-stats-tool) and call its functions from
//! a program by name. The runtime learns their names and types from the component.
//!
//! cargo run -p agentrt-runtime --example plugin

use agentrt_runtime::{FixtureTools, Sandbox, SandboxConfig, EXAMPLE_PLUGIN_WASM};
use std::sync::Arc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = SandboxConfig { plugins: vec![EXAMPLE_PLUGIN_WASM.into()], ..SandboxConfig::default() };
    let sandbox = Sandbox::new(config, Arc::new(FixtureTools::default())).await?;
    for tool in sandbox.plugins().signatures() {
        println!("tool {}({}): {}", tool.name, tool.params.join(", "), tool.doc);
    }
    let report = sandbox.run("text = read_section('oxygen:discovery')\nprint(summarize(text))\ntop_words(text, 3)").await;
    print!("{}", report.observation());
    println!();
    Ok(())
}
