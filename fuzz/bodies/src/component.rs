//! Component loading: a `.wasm` given as a plug-in tool (`--tool`, a tools directory) or as the guest that
//! runs programs (`agentrt exec script.wasm`). Plug-ins are shared as files; their bytes are the author's.

use crate::violated;
use agentrt_runtime::{exported_tool_names, ComponentCache, FixtureTools, Sandbox, SandboxConfig, SandboxError};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// The step before any compile: `exported_tool_names`, which validates the bytes with wasmparser and
/// decodes the WIT they embed to learn a plug-in's tool names (what a name clash is checked with). Every
/// name is a snake_case identifier, and bytes it reads names from are a valid component.
pub fn component_decode(data: &[u8]) {
    let names = exported_tool_names(data);
    crate::note(|| format!("tool names: {names:?}"));
    for name in &names {
        let fine = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !fine {
            violated(&format!("a tool name {name:?} that is not a snake_case identifier"), data);
        }
    }
}

/// What the loads share: a sandbox for loading fuzzed guests, the runtime that builds sandboxes, and a
/// component cache of their own in a temporary directory (so that mutants that compile never reach the
/// user's cache), started with the interpreter's entry of the user's cache (else every sandbox would
/// compile the interpreter, minutes under a sanitizer).
struct Shared {
    sandbox: Sandbox,
    runtime: tokio::runtime::Runtime,
    cache_dir: PathBuf,
    _scratch: tempfile::TempDir,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let scratch = tempfile::Builder::new().prefix("agentrt-fuzz-components-").tempdir().expect("a scratch directory");
        let cache_dir = scratch.path().join("components");
        ComponentCache::default_location().copy_entries_of(agentrt_runtime::INTERPRETER_ORIGIN, &cache_dir).expect("the scratch cache");
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a tokio runtime");
        let config = SandboxConfig { cache_dir: Some(cache_dir.clone()), ..SandboxConfig::default() };
        let sandbox = runtime.block_on(Sandbox::new(config, Arc::new(FixtureTools::default()))).expect("the sandbox");
        Shared { sandbox, runtime, cache_dir, _scratch: scratch }
    })
}

/// The bytes as a component file, loaded the two ways a file is: as a guest (`Sandbox::load_guest`, as
/// `agentrt exec script.wasm` does: validation, compile, linking against the `tool-code` world) and as a
/// plug-in tool (a sandbox built with it, as `--tool` does: its tool names from its WIT, compile, linking,
/// a call of its `describe`), after the step of [`component_decode`]. A refusal is one of the errors that
/// say what is wrong with the component, with a message; never an I/O, configuration or engine error.
pub fn component_load(data: &[u8]) {
    component_decode(data);
    let path = crate::scratch("component.wasm");
    crate::write(&path, data);
    let shared = shared();
    let check = |how: &str, result: Result<(), SandboxError>, plugin: bool| match result {
        Ok(()) => crate::note(|| format!("{how}: loaded")),
        Err(e) => {
            let named = matches!(e, SandboxError::InvalidComponent { .. } | SandboxError::UnsatisfiedImport { .. } | SandboxError::WrongWorld { .. })
                || (plugin && matches!(e, SandboxError::UnusableTool { .. } | SandboxError::ToolNameTaken { .. }));
            crate::note(|| format!("{how}: refused: {e}"));
            if !named {
                violated(&format!("{how}: refused with an error that does not say what is wrong with the component: {e}"), data);
            }
            if e.to_string().trim().is_empty() {
                violated(&format!("{how}: a refusal without a message"), data);
            }
        }
    };
    check("as a guest", shared.sandbox.load_guest(&path).map(drop), false);
    let config = SandboxConfig { plugins: vec![path], cache_dir: Some(shared.cache_dir.clone()), ..SandboxConfig::default() };
    check("as a plug-in", shared.runtime.block_on(Sandbox::new(config, Arc::new(FixtureTools::default()))).map(drop), true);
}
