//! The sandbox flags shared by every command that runs programs (`exec`, `bench`, and later `train` and
//! `eval`), and how they become a [`Sandbox`].

use agentrt_runtime::{components_in, FixtureTools, Limits, Sandbox, SandboxConfig, ToolHost};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Limits, plug-ins and the tools' backing store.
#[derive(clap::Args, Clone, Debug)]
pub struct SandboxOptions {
    /// Fuel (about one unit per wasm instruction) each program may burn.
    #[arg(long, default_value_t = Limits::default().fuel)]
    pub fuel: u64,
    /// Linear memory each program may use, in MiB.
    #[arg(long = "memory", value_name = "MIB", default_value_t = Limits::default().memory_bytes >> 20)]
    pub memory_mib: usize,
    /// Wall time each program may take, in milliseconds (tool calls included); at least 1.
    #[arg(long = "timeout-ms", value_name = "MS", default_value_t = Limits::default().timeout.as_millis() as u64, value_parser = at_least_one_ms)]
    pub timeout_ms: u64,
    /// Bytes each program may print.
    #[arg(long, default_value_t = Limits::default().max_output_bytes)]
    pub max_output: usize,
    /// Tool calls each program may make.
    #[arg(long, default_value_t = Limits::default().max_host_calls)]
    pub max_host_calls: u32,
    #[command(flatten)]
    pub tools: ToolOptions,
}

/// Where the tools come from: plug-in components and the wiki tools' backing store.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ToolOptions {
    /// A plug-in tool component (`.wasm` of the agentrt:tools/tool world); repeatable.
    #[arg(long = "tool", value_name = "WASM")]
    pub tools: Vec<PathBuf>,
    /// A directory whose `.wasm` files are all plug-in tools.
    #[arg(long, value_name = "DIR", env = "AGENTRT_TOOLS_DIR")]
    pub tools_dir: Option<PathBuf>,
    /// The search index that serves the wiki tools (default: where `agentrt index` writes it).
    #[arg(long, value_name = "DIR", env = "AGENTRT_INDEX_DIR")]
    pub index_dir: Option<PathBuf>,
    /// Serve the tools from the built-in three-page fixture instead of the search index (for
    /// debugging the sandbox itself).
    #[arg(long, conflicts_with = "index_dir")]
    pub fixture: bool,
    /// What embeds search_pages' queries: distilled (default; 3 layers distilled from all-MiniLM-L6-v2,
    /// half the work) or full (the 6-layer model that embedded the sections; a point more recall@10).
    #[arg(long, value_name = "ENCODER", env = "AGENTRT_QUERY_ENCODER", default_value_t = agentrt_search::QueryEncoder::default())]
    pub query_encoder: agentrt_search::QueryEncoder,
}

/// `--timeout-ms`: 0 would stop every program before its first instruction, so it is refused (there is no
/// "no limit" value; give a large one).
fn at_least_one_ms(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("0 ms cannot run anything: give at least 1 (there is no \"no limit\" value; give a large one)".into()),
        Ok(ms) => Ok(ms),
        Err(e) => Err(e.to_string()),
    }
}

impl SandboxOptions {
    /// The limits these flags describe.
    pub fn limits(&self) -> Limits {
        Limits {
            fuel: self.fuel,
            memory_bytes: self.memory_mib << 20,
            timeout: Duration::from_millis(self.timeout_ms),
            max_output_bytes: self.max_output,
            max_host_calls: self.max_host_calls,
        }
    }

    /// A sandbox with these options.
    pub async fn build(&self) -> anyhow::Result<Sandbox> {
        self.tools.build(self.limits()).await
    }
}

impl ToolOptions {
    /// Every plug-in named by `--tool` and `--tools-dir`.
    pub fn plugin_paths(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut paths = self.tools.clone();
        if let Some(dir) = &self.tools_dir {
            paths.extend(components_in(dir)?);
        }
        Ok(paths)
    }

    /// The backing store of the wiki tools.
    pub fn tool_host(&self) -> anyhow::Result<Arc<dyn ToolHost>> {
        if self.fixture {
            return Ok(Arc::new(FixtureTools::default()));
        }
        let dir = self.index_dir.clone().unwrap_or_else(agentrt_search::default_index_dir);
        Ok(agentrt_environments::wiki::tools::open(&dir, self.query_encoder)?)
    }

    /// A sandbox with these tools and `limits` as every program's default bounds.
    pub async fn build(&self, limits: Limits) -> anyhow::Result<Sandbox> {
        self.build_with(limits, self.tool_host()?).await
    }

    /// The sandbox of environment `env`: the wiki's tools over the index, or, for an environment whose
    /// programs call none (code), no wiki tools and no index needed; with the plug-ins the environment
    /// names beside those of `--tool` and `--tools-dir`.
    pub async fn build_for(&self, env: &agentrt_environments::EnvSection, limits: Limits) -> anyhow::Result<Sandbox> {
        let package = env.package().map_err(anyhow::Error::msg)?;
        let host: Arc<dyn ToolHost> = if package.wiki_tools { self.tool_host()? } else { Arc::new(agentrt_runtime::NoWikiTools) };
        self.sandbox(limits, host, package.plugins).await
    }

    /// As [`ToolOptions::build`], over `host` (from [`ToolOptions::tool_host`]), which the caller keeps
    /// (`trajectories synth` looks ahead through the same tools its episodes call).
    pub async fn build_with(&self, limits: Limits, host: Arc<dyn ToolHost>) -> anyhow::Result<Sandbox> {
        self.sandbox(limits, host, Vec::new()).await
    }

    /// A sandbox over `host` with the plug-ins of `--tool` and `--tools-dir`, then `more_plugins`.
    async fn sandbox(&self, limits: Limits, host: Arc<dyn ToolHost>, more_plugins: Vec<PathBuf>) -> anyhow::Result<Sandbox> {
        let mut plugins = self.plugin_paths()?;
        plugins.extend(more_plugins);
        let config = SandboxConfig { limits, plugins, ..SandboxConfig::default() };
        Ok(Sandbox::new(config, host).await?)
    }
}
