//! agentrt's sandbox: runs model-written programs, and any guest component of our WIT world, under
//! wasmtime with hard bounds on fuel, memory, wall time, output and tool calls.
//!
//! The design in three parts:
//! - **who reads**: [`Sandbox::run`] takes a program's source (an environment's reply grammar found it in
//!   a model's reply); [`Sandbox::load_guest`] reads a `.wasm` guest, through the [`ComponentCache`] of
//!   precompiled components.
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
mod grader_component;
mod host;
mod limits;
mod output;
mod plugin_values;
mod plugins;
mod report;
mod sandbox;
mod tool_host;
mod wasi;

pub use component_cache::{CacheEntry, ComponentCache, CACHE_CAP_ENV, DEFAULT_CACHE_CAP_BYTES};
pub use fixture::FixtureTools;
pub use grader_component::{ComponentGrade, GradeFailure, GraderComponent};
pub use limits::Limits;
pub use plugins::{components_in, exported_tool_names, InstanceReuse, PluginRegistry};
pub use report::{HostCall, Limit, Outcome, ProgramError, RunReport, ToolErrorKind};
pub use sandbox::{GuestComponent, Sandbox, SandboxConfig, INTERPRETER_ORIGIN};
pub use tool_host::{NoWikiTools, PageHit, PassageHit, SectionRef, ToolFailure, ToolHost};

/// A plug-in tool's signature, as programs see it.
pub use bindings::agentrt::tools::plugins::ToolSignature;

use std::path::PathBuf;

/// Why a sandbox or a guest could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Reading a guest `.wasm`, a plug-in or a tools directory failed.
    #[error("{path}")]
    Io {
        /// The file or directory read.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// wasmtime cannot compile the bytes as a component.
    #[error("{origin} is not a valid WebAssembly component: {reason}")]
    InvalidComponent {
        /// The component's file, or "the built-in Python interpreter".
        origin: String,
        /// wasmtime's compile error.
        reason: String,
    },
    /// The component imports something our linker does not define.
    #[error("{origin} imports something the host does not provide: {detail}")]
    UnsatisfiedImport {
        /// The component's file, or "the built-in Python interpreter".
        origin: String,
        /// wasmtime's account of the missing import.
        detail: String,
    },
    /// A component does not export what its world requires (`tool-code` for a guest, `grader` for a grader).
    #[error("{origin} does not implement the agentrt:tools/{world} world: {reason}")]
    WrongWorld {
        /// The component's file, or "the built-in Python interpreter".
        origin: String,
        /// The world it was loaded as.
        world: &'static str,
        /// What wasmtime found missing or mistyped.
        reason: String,
    },
    /// A plug-in lacks the metadata interface, fails to describe its tools, or has a function no tool can be.
    #[error("{origin} cannot be used as a plug-in: {reason}")]
    UnusableTool {
        /// The plug-in's file.
        origin: String,
        /// What makes it unusable.
        reason: String,
    },
    /// A plug-in exports a tool whose name a wiki tool or an earlier plug-in already has.
    #[error(
        "{origin} exports a tool named `{name}`, which {owner} already provides: tool names are one namespace \
         across the wiki tools and every plug-in; rename the function in the plug-in's WIT, or load only one of the two"
    )]
    ToolNameTaken {
        /// The tool name, in snake case.
        name: String,
        /// Who has it already: "the built-in wiki tools" or the other plug-in's file.
        owner: String,
        /// The plug-in that exports it again.
        origin: String,
    },
    /// A limit or setting is out of range (memory above the engine's ceiling, a bad `$AGENTRT_COMPONENT_CACHE_MB`).
    #[error("invalid sandbox configuration: {0}")]
    Config(String),
    /// wasmtime failed to build the engine or to add the host's imports to a linker.
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

/// Path of the plug-in whose tool `flaky_count` traps on about a third of its inputs
/// (`guest-tools/flaky-tool`), as built by this crate's build script: the plug-in fault of the soak and
/// of the tests.
pub const FLAKY_PLUGIN_WASM: &str = env!("AGENTRT_FLAKY_TOOL_WASM");

/// Path of the grader component of the tests (`guest-tools/test-grader`: grades a number, and loops,
/// allocates or panics when a task asks it to), as built by this crate's build script.
pub const TEST_GRADER_WASM: &str = env!("AGENTRT_TEST_GRADER_WASM");
