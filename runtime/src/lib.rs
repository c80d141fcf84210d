//! agentrt's sandbox: runs model-written programs, and any guest component of our WIT world, under
//! wasmtime with hard bounds on fuel, memory, wall time, output and tool calls.
//!
//! The design in three parts:
//! - **who reads**: [`reply`] finds the program in a model's reply (a fenced ```` ```python ```` block or
//!   the one-call `<tool>…</tool>` form); [`Sandbox::load_guest`] reads a `.wasm` guest, through the
//!   [`ComponentCache`] of precompiled components.
//! - **who runs**: [`Sandbox`] owns one wasmtime engine (pooling allocator, fuel, epochs) and the
//!   built-in Python interpreter guest; every program gets a fresh Store from an `InstancePre`, so
//!   nothing leaks from one program to the next. Tool calls go out through the [`ToolHost`] trait (the
//!   wiki tools) or the [`PluginRegistry`] (plug-in components).
//! - **who receives**: a [`RunReport`] holds the outcome or a typed [`ProgramError`], the captured
//!   stdout, every [`HostCall`] with its arguments and time, the fuel used, the peak memory and the
//!   wall time; [`RunReport::observation`] is what the model sees next.
//!
//! Errors of the sandbox itself (a malformed component, an import we do not provide) are
//! [`SandboxError`]s, raised when a guest is loaded, never while a program runs.

mod bindings;
mod component_cache;
mod engine;
pub mod fixture;
mod host;
mod limits;
mod output;
mod plugin_values;
mod plugins;
pub mod reply;
mod report;
mod sandbox;
mod tool_host;

pub use component_cache::{CacheEntry, ComponentCache, CACHE_CAP_ENV, DEFAULT_CACHE_CAP_BYTES};
pub use fixture::FixtureTools;
pub use limits::Limits;
pub use plugins::{components_in, InstanceReuse, PluginRegistry};
pub use report::{HostCall, Limit, Outcome, ProgramError, RunReport, ToolErrorKind};
pub use sandbox::{GuestComponent, Sandbox, SandboxConfig};
pub use tool_host::{NoWikiTools, PageHit, SectionRef, ToolFailure, ToolHost};

/// A plug-in tool's signature, as programs see it.
pub use bindings::agentrt::tools::plugins::ToolSignature;

use std::path::PathBuf;

/// Why a sandbox or a guest could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin} is not a valid WebAssembly component: {reason}")]
    InvalidComponent { origin: String, reason: String },
    #[error("{origin} imports something the host does not provide: {detail}")]
    UnsatisfiedImport { origin: String, detail: String },
    #[error("{origin} does not implement the agentrt:tools/tool-code world: {reason}")]
    WrongWorld { origin: String, reason: String },
    #[error("{origin} cannot be used as a plug-in: {reason}")]
    UnusableTool { origin: String, reason: String },
    #[error(
        "{origin} exports a tool named `{name}`, which {owner} already provides: tool names are one namespace \
         across the wiki tools and every plug-in; rename the function in the plug-in's WIT, or load only one of the two"
    )]
    ToolNameTaken { name: String, owner: String, origin: String },
    #[error("invalid sandbox configuration: {0}")]
    Config(String),
    #[error("wasmtime: {0}")]
    Engine(String),
}

impl SandboxError {
    fn unsatisfied_import(origin: &str, error: wasmtime::Error) -> Self {
        SandboxError::UnsatisfiedImport { origin: origin.to_string(), detail: format!("{error:#}") }
    }
}

/// Path of the example plug-in tool component (`guest-tools/word-stats-tool`), as built by this
/// crate's build script: for tests and examples.
pub const EXAMPLE_PLUGIN_WASM: &str = env!("AGENTRT_WORD_STATS_WASM");
