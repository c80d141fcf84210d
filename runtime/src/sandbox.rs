//! `Sandbox`: compiles the guests once, then runs each program in a fresh Store.

use crate::bindings::{agentrt::tools::types as wit, ToolCode, ToolCodePre};
use crate::component_cache::ComponentCache;
use crate::engine::{build_engine, deadline_ticks, EpochTicker};
use crate::host::{HostCallLimitExceeded, HostState};
use crate::limits::Limits;
use crate::output::CappedOutput;
use crate::plugins::{InstanceReuse, PluginRegistry};
use crate::report::{Limit, Outcome, ProgramError, RunReport, ToolErrorKind};
use crate::tool_host::ToolHost;
use crate::SandboxError;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Engine, Store};

/// The interpreter guest, built from `guest-tools/python-interpreter` by `build.rs`.
const INTERPRETER_WASM: &[u8] = include_bytes!(env!("AGENTRT_INTERPRETER_WASM"));

/// The origin the built-in interpreter's compiled component is cached under (what `agentrt cache` lists,
/// and what [`crate::ComponentCache::copy_entries_of`] copies to a scratch cache).
pub const INTERPRETER_ORIGIN: &str = "the built-in Python interpreter";

/// How much fuel a guest burns between yields to the async executor, so that many programs share the
/// worker threads fairly.
const FUEL_YIELD_INTERVAL: u64 = 1_000_000;

/// Grace on top of the epoch deadline for a tool call that never returns (epochs only interrupt wasm).
const HOST_CALL_GRACE: Duration = Duration::from_millis(500);

/// How a [`Sandbox`] is set up.
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    /// Default bounds of every program.
    pub limits: Limits,
    /// Plug-in tool components to load.
    pub plugins: Vec<PathBuf>,
    /// Where precompiled components are kept; `None` for the default location.
    pub cache_dir: Option<PathBuf>,
    /// Whether stateless plug-ins keep warm instances between calls.
    pub plugin_reuse: InstanceReuse,
}

/// A guest component of the `tool-code` world, ready to instantiate.
#[derive(Clone)]
pub struct GuestComponent {
    pre: ToolCodePre<HostState>,
}

/// Runs programs in isolation. Cheap to share (`Arc`) and to call from many tasks at once.
pub struct Sandbox {
    engine: Engine,
    linker: Linker<HostState>,
    cache: ComponentCache,
    interpreter: GuestComponent,
    tools: Arc<dyn ToolHost>,
    plugins: Arc<PluginRegistry>,
    limits: Limits,
    _ticker: EpochTicker,
}

impl Sandbox {
    /// Builds the engine, loads (or compiles and caches) the interpreter and the plug-ins.
    pub async fn new(config: SandboxConfig, tools: Arc<dyn ToolHost>) -> Result<Self, SandboxError> {
        if config.limits.memory_bytes > crate::engine::MAX_MEMORY_BYTES {
            return Err(SandboxError::Config(format!(
                "memory limit {} bytes is above the engine's ceiling of {} bytes",
                config.limits.memory_bytes,
                crate::engine::MAX_MEMORY_BYTES
            )));
        }
        let engine = build_engine()?;
        let ticker = EpochTicker::start(&engine);
        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        ToolCode::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state).map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let cache = config.cache_dir.map(ComponentCache::new).unwrap_or_else(ComponentCache::default_location).with_env_cap()?;
        let plugins = Arc::new(PluginRegistry::load(&engine, &cache, &config.plugins, config.plugin_reuse).await?);
        let interpreter = guest_from_bytes(&engine, &linker, &cache, INTERPRETER_WASM, INTERPRETER_ORIGIN)?;
        Ok(Self { engine, linker, cache, interpreter, tools, plugins, limits: config.limits, _ticker: ticker })
    }

    /// The default bounds of this sandbox's programs.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// What serves the wiki tools to this sandbox's programs.
    pub fn tools(&self) -> &Arc<dyn ToolHost> {
        &self.tools
    }

    /// The plug-in tools this sandbox serves.
    pub fn plugins(&self) -> &PluginRegistry {
        &self.plugins
    }

    /// Loads a guest component of the `tool-code` world from a `.wasm` file.
    pub fn load_guest(&self, path: &Path) -> Result<GuestComponent, SandboxError> {
        let wasm = std::fs::read(path).map_err(|e| SandboxError::Io { path: path.to_path_buf(), source: e })?;
        guest_from_bytes(&self.engine, &self.linker, &self.cache, &wasm, &path.display().to_string())
    }

    /// Runs a Python program under the default limits.
    pub async fn run(&self, program: &str) -> RunReport {
        self.run_guest(&self.interpreter, program, self.limits).await
    }

    /// Runs a Python program under `limits`.
    pub async fn run_with_limits(&self, program: &str, limits: Limits) -> RunReport {
        self.run_guest(&self.interpreter, program, limits).await
    }

    /// Loads the grader component at `path` (an environment package's reward), compiled through this
    /// sandbox's cache and bounded by its engine's clock.
    pub fn load_grader(&self, path: &Path) -> Result<crate::GraderComponent, SandboxError> {
        crate::GraderComponent::load(&self.engine, &self.cache, path)
    }

    /// Runs `program` in a fresh instance of `guest`.
    pub async fn run_guest(&self, guest: &GuestComponent, program: &str, limits: Limits) -> RunReport {
        let started = Instant::now();
        let stdout = CappedOutput::new(limits.max_output_bytes);
        let stderr = CappedOutput::new(16 << 10);
        let state = HostState::new(self.tools.clone(), self.plugins.clone(), limits, &stdout, &stderr);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.memory);
        store.set_fuel(limits.fuel).expect("fuel is enabled on the engine");
        store.fuel_async_yield_interval(Some(FUEL_YIELD_INTERVAL)).expect("async is enabled on the engine");
        store.set_epoch_deadline(deadline_ticks(limits.timeout));
        store.epoch_deadline_trap();

        let run = async {
            let instance = guest.pre.instantiate_async(&mut store).await?;
            instance.call_run(&mut store, program).await
        };
        let outcome = tokio::time::timeout(limits.timeout + HOST_CALL_GRACE, run).await;
        let fuel_used = limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0));
        let result = match outcome {
            Err(_elapsed) => Err(ProgramError::LimitExceeded { limit: Limit::Time }),
            // A guest that flushes its stdout as it returns, and ignores the write the bound refused,
            // still completes: its output was cut all the same.
            Ok(Ok(Ok(_))) if stdout.overflowed() => Err(ProgramError::LimitExceeded { limit: Limit::Output }),
            Ok(Ok(Ok(outcome))) => Ok(Outcome { value: outcome.value }),
            Ok(Ok(Err(error))) => Err(program_error(error)),
            Ok(Err(trap)) => Err(classify_trap(trap, store.data(), &stdout, &stderr)),
        };
        let state = store.into_data();
        RunReport { result, stdout: stdout.text(), host_calls: state.host_calls, fuel_used, peak_memory_bytes: state.memory.peak, wall_time: started.elapsed() }
    }
}

fn guest_from_bytes(engine: &Engine, linker: &Linker<HostState>, cache: &ComponentCache, wasm: &[u8], origin: &str) -> Result<GuestComponent, SandboxError> {
    let component = cache.load(engine, wasm, origin)?;
    let instance_pre = linker.instantiate_pre(&component).map_err(|e| SandboxError::unsatisfied_import(origin, e))?;
    let pre =
        ToolCodePre::new(instance_pre).map_err(|e| SandboxError::WrongWorld { origin: origin.to_string(), world: "tool-code", reason: format!("{e:#}") })?;
    Ok(GuestComponent { pre })
}

/// Names the bound a trap came from; a trap no bound explains is the guest's own failure.
fn classify_trap(error: wasmtime::Error, state: &HostState, stdout: &CappedOutput, stderr: &CappedOutput) -> ProgramError {
    let limit = |limit| ProgramError::LimitExceeded { limit };
    if error.chain().any(|e| e.is::<HostCallLimitExceeded>()) {
        return limit(Limit::HostCalls);
    }
    if stdout.overflowed() {
        return limit(Limit::Output);
    }
    // A request for more than a 32-bit address space holds (`[0] * 10**9`: 16 GB of values) never reaches
    // the memory limiter: Rust's collections panic with "capacity overflow" before asking for a page.
    // It is the program asking for too much memory, not a bug of the guest.
    if stderr.text().contains("capacity overflow") {
        return limit(Limit::Memory);
    }
    match Limit::hit_by(&error, state.memory.exceeded) {
        Some(bound) => limit(bound),
        None => {
            let panic = stderr.text();
            let message = if panic.trim().is_empty() { format!("{error:#}") } else { format!("{error:#}; stderr: {}", panic.trim()) };
            ProgramError::GuestTrap { message }
        }
    }
}

fn program_error(error: wit::ProgramError) -> ProgramError {
    match error {
        wit::ProgramError::Syntax(e) => ProgramError::Syntax { message: e.message, line: e.line, column: e.column },
        wit::ProgramError::UnknownTool(e) => ProgramError::UnknownTool { name: e.name, line: e.line, traceback: e.traceback },
        wit::ProgramError::ToolFailed(e) => ProgramError::ToolFailed {
            tool: e.tool,
            tool_error: match e.kind {
                wit::ToolErrorKind::UnknownTool => ToolErrorKind::UnknownTool,
                wit::ToolErrorKind::BadArgument => ToolErrorKind::BadArgument,
                wit::ToolErrorKind::NotFound => ToolErrorKind::NotFound,
                wit::ToolErrorKind::Failed => ToolErrorKind::Failed,
            },
            message: e.message,
        },
        wit::ProgramError::Forbidden(message) => ProgramError::Forbidden { message },
        wit::ProgramError::Exception(e) => ProgramError::Exception { type_name: e.type_name, message: e.message, traceback: e.traceback },
        wit::ProgramError::LimitExceeded(l) => ProgramError::LimitExceeded {
            limit: match l {
                wit::Limit::Fuel => Limit::Fuel,
                wit::Limit::Memory => Limit::Memory,
                wit::Limit::Time => Limit::Time,
                wit::Limit::Output => Limit::Output,
                wit::Limit::HostCalls => Limit::HostCalls,
                wit::Limit::Stack => Limit::Stack,
            },
        },
    }
}
