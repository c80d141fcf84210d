//! The integration tests of the `agentrt` binary and its sandbox, in one test binary: one link instead of
//! one per file (each links wasmtime, candle and tantivy), and one run whose tests share the two cores.
//! A module per area; `common` holds what several of them use.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

mod common;

mod code_env;
mod environments;
mod eval;
mod exec;
mod grader_component;
mod humaneval_sandbox;
mod own_data;
mod plugin_js;
mod plugin_python;
mod plugin_tools;
mod sandbox_concurrency;
mod sandbox_hostile;
mod sandbox_modules;
mod serve;
mod sft;
mod soak;
mod tool_new;
mod train;
mod trajectories;
mod walk_through;
mod your_data;
