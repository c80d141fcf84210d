//! Plug-in tools: components of the `tool` world, loaded at start-up, whose exported functions model
//! programs call by name. The runtime learns each function's name and types from the component
//! itself, so a new tool needs a WIT interface and a component, and no change here.

use crate::bindings::agentrt::tools::{plugins::ToolSignature, types};
use crate::component_cache::ComponentCache;
use crate::engine::deadline_ticks;
use crate::limits::Limits;
use crate::limits::MemoryLimiter;
use crate::output::CappedOutput;
use crate::plugin_values::{self, snake_case};
use crate::wasi::no_authority_wasi;
use crate::SandboxError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{ComponentExportIndex, Instance, InstancePre, Linker, ResourceTable, Type, Val};
use wasmtime::{Engine, Store, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The interface every plug-in exports to describe itself; it is not a tool.
const METADATA_INTERFACE: &str = "agentrt:tools/metadata@0.1.0";

/// The wiki tools' names (the contract's `wiki` interface, as programs call them): the interpreter
/// resolves them before any plug-in, so a plug-in tool of the same name could never be reached.
const WIKI_TOOL_NAMES: &[&str] = &["search_pages", "search_passages", "view_sections", "read_section"];

/// Warm instances kept per stateless plug-in: enough for the programs that call it at once on a
/// few cores; each holds a slot of the engine's pooling allocator for as long as it is kept.
const MAX_WARM_INSTANCES: usize = 8;

/// How much of a plug-in's stderr is kept to explain a crash (its last bytes).
const STDERR_TAIL_BYTES: usize = 8 << 10;

/// How many lines of that stderr a crash message quotes.
const STDERR_TAIL_LINES: usize = 6;

/// Whether plug-in instances serve more than one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstanceReuse {
    /// Reuse warm instances of plug-ins whose `metadata.stateless` says `true`; a fresh instance per
    /// call for the others.
    #[default]
    WhenStateless,
    /// A fresh instance for every call, whatever the plug-in says (to measure what reuse saves).
    Never,
}

/// The plug-in tools available to programs, by name.
#[derive(Default)]
pub struct PluginRegistry {
    tools: BTreeMap<String, PluginTool>,
}

struct PluginTool {
    signature: ToolSignature,
    component: Arc<LoadedPlugin>,
    function: ComponentExportIndex,
    params: Vec<Type>,
    result: Option<Type>,
}

struct LoadedPlugin {
    path: PathBuf,
    pre: InstancePre<PluginState>,
    /// Reuse instances across calls (the plug-in says it is stateless and reuse is allowed).
    reuse: bool,
    warm: Mutex<Vec<PluginInstance>>,
    instances_started: AtomicU64,
}

/// One instance of a plug-in with its Store, between calls.
struct PluginInstance {
    store: Store<PluginState>,
    instance: Instance,
}

/// A plug-in instance's Store: WASI with no authority, a memory bound, and the tail of its stderr.
pub(crate) struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryLimiter,
    stderr: CappedOutput,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// Who owns the wiki tools' names, in a name clash's message.
const WIKI_OWNER: &str = "the built-in wiki tools";

/// Who already has the tool name `name`: the wiki tools, or the plug-in file `owners` gives.
fn name_owner(owners: &BTreeMap<String, String>, name: &str) -> Option<String> {
    if WIKI_TOOL_NAMES.contains(&name) {
        Some(WIKI_OWNER.to_string())
    } else {
        owners.get(name).cloned()
    }
}

/// The tool names (snake_case) a plug-in's bytes export, read from the WIT its component encodes, without
/// compiling it: the functions of every exported interface but `metadata`, as [`PluginRegistry::load`]
/// registers them. Empty when the bytes are not a valid component (the compile then says why).
pub fn exported_tool_names(wasm: &[u8]) -> Vec<String> {
    // Validated first: the WIT decoder trusts sizes a mutated file can inflate (the sandbox fuzzer saw
    // the process reach 1.6 GB decoding one), where the validator is built for untrusted bytes.
    if wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all()).validate_all(wasm).is_err() {
        return Vec::new();
    }
    let Ok(wit_parser::decoding::DecodedWasm::Component(resolve, world)) = wit_parser::decoding::decode(wasm) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for key in resolve.worlds[world].exports.keys() {
        let wit_parser::WorldKey::Interface(id) = key else { continue };
        if resolve.interfaces[*id].package.is_none() || resolve.id_of(*id).is_some_and(|name| name == METADATA_INTERFACE) {
            continue;
        }
        names.extend(resolve.interfaces[*id].functions.keys().map(|f| snake_case(f)));
    }
    names
}

/// The `.wasm` files of a tools directory, sorted by name.
pub fn components_in(dir: &Path) -> Result<Vec<PathBuf>, SandboxError> {
    let entries = std::fs::read_dir(dir).map_err(|e| SandboxError::Io { path: dir.to_path_buf(), source: e })?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "wasm")).collect();
    paths.sort();
    Ok(paths)
}

impl PluginRegistry {
    /// Loads every plug-in in `paths`. Tool names are one namespace across the wiki tools and every
    /// plug-in: a name taken twice is an error that names both owners. A plug-in whose imports the host
    /// does not provide, or whose `describe` lists no tool or one it does not export, is an error that
    /// names the file.
    pub async fn load(engine: &Engine, cache: &ComponentCache, paths: &[PathBuf], reuse: InstanceReuse) -> Result<Self, SandboxError> {
        let mut linker = Linker::<PluginState>::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let mut registry = Self::default();
        // Each file once (the same file given twice, by `--tool` and by its directory, is one plug-in), and
        // the tool names its WIT exports checked against the wiki tools' and each other's before anything
        // is compiled: a compile can take many seconds, and a clash refuses the whole set anyway.
        let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut owners: BTreeMap<String, String> = BTreeMap::new();
        for path in paths {
            if !seen.insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone())) {
                tracing::warn!("plug-in {} is given twice; loading it once", path.display());
                continue;
            }
            let origin = path.display().to_string();
            let wasm = std::fs::read(path).map_err(|e| SandboxError::Io { path: path.clone(), source: e })?;
            for name in exported_tool_names(&wasm) {
                if let Some(owner) = name_owner(&owners, &name) {
                    return Err(SandboxError::ToolNameTaken { name, owner, origin });
                }
                owners.insert(name, origin.clone());
            }
            files.push((path.clone(), wasm));
        }
        for (path, wasm) in &files {
            let origin = path.display().to_string();
            let component = cache.load(engine, wasm, &origin)?;
            let pre = linker.instantiate_pre(&component).map_err(|e| SandboxError::unsatisfied_import(&origin, e))?;
            let (docs, stateless) = describe(path, &pre).await?;
            let loaded = Arc::new(LoadedPlugin {
                path: path.clone(),
                pre,
                reuse: stateless && reuse == InstanceReuse::WhenStateless,
                warm: Mutex::new(Vec::new()),
                instances_started: AtomicU64::new(0),
            });

            // The plug-in's tools by their WIT names, checked against what `describe` lists before any
            // is registered.
            let mut exported: Vec<(String, PluginTool)> = Vec::new();
            let component_type = component.component_type();
            for (interface, item) in component_type.exports(engine) {
                let ComponentItem::ComponentInstance(instance) = item.ty else { continue };
                // Tools come from the plug-in's WIT interfaces (`namespace:package/name`). Toolchains add
                // exports of their own with plain names (componentize-py's `init`), which are not tools.
                if interface == METADATA_INTERFACE || !interface.contains(':') {
                    continue;
                }
                let interface_index = component.get_export_index(None, interface).expect("an export the type lists");
                for (func_name, func_item) in instance.exports(engine) {
                    let ComponentItem::ComponentFunc(func) = func_item.ty else { continue };
                    let function = component.get_export_index(Some(&interface_index), func_name).expect("an export the type lists");
                    let params: Vec<(String, Type)> = func.params().map(|(n, t)| (snake_case(n), t)).collect();
                    let results: Vec<Type> = func.results().collect();
                    if results.len() > 1 {
                        return Err(SandboxError::UnusableTool { origin, reason: format!("`{func_name}` returns several values; a tool returns one") });
                    }
                    let doc = docs.get(func_name).cloned().unwrap_or_default();
                    let signature = ToolSignature { name: snake_case(func_name), params: params.iter().map(|(n, _)| n.clone()).collect(), doc };
                    let tool = PluginTool {
                        signature,
                        component: loaded.clone(),
                        function,
                        params: params.into_iter().map(|(_, t)| t).collect(),
                        result: results.into_iter().next(),
                    };
                    exported.push((func_name.to_string(), tool));
                }
            }
            check_described(&docs, &exported).map_err(|reason| SandboxError::UnusableTool { origin: origin.clone(), reason })?;

            for (_, tool) in exported {
                let name = tool.signature.name.clone();
                let taken_by = if WIKI_TOOL_NAMES.contains(&name.as_str()) {
                    Some(WIKI_OWNER.to_string())
                } else {
                    registry.tools.get(&name).map(|existing| existing.component.path.display().to_string())
                };
                if let Some(owner) = taken_by {
                    return Err(SandboxError::ToolNameTaken { name, owner, origin });
                }
                registry.tools.insert(name, tool);
            }
        }
        Ok(registry)
    }

    /// The signatures of every plug-in tool, sorted by name (for the model's system prompt).
    pub fn signatures(&self) -> Vec<ToolSignature> {
        self.tools.values().map(|t| t.signature.clone()).collect()
    }

    /// The signature of the tool called `name`, if a plug-in provides it.
    pub fn signature(&self, name: &str) -> Option<ToolSignature> {
        self.tools.get(name).map(|t| t.signature.clone())
    }

    /// How many instances of the plug-in that provides `name` have been started so far (each call of
    /// a plug-in that is not reused starts one).
    pub fn instances_started(&self, name: &str) -> Option<u64> {
        self.tools.get(name).map(|t| t.component.instances_started.load(Ordering::Relaxed))
    }

    /// Whether the plug-in that provides `name` reuses its instances across calls.
    pub fn reuses_instances(&self, name: &str) -> Option<bool> {
        self.tools.get(name).map(|t| t.component.reuse)
    }

    /// Calls the tool `name` with a JSON array of arguments, bounded by `limits`: in a warm instance
    /// when the plug-in is stateless, else in a fresh one. A crash (trap) costs that instance only.
    pub async fn call(&self, name: &str, args_json: &str, limits: Limits) -> Result<String, types::ToolError> {
        let fail = |kind, message: String| types::ToolError { tool: name.to_string(), kind, message };
        let tool = self.tools.get(name).ok_or_else(|| fail(types::ToolErrorKind::UnknownTool, format!("no plug-in tool `{name}`")))?;
        let args: Vec<serde_json::Value> =
            serde_json::from_str(args_json).map_err(|e| fail(types::ToolErrorKind::BadArgument, format!("arguments are not a JSON array: {e}")))?;
        if args.len() != tool.params.len() {
            return Err(fail(
                types::ToolErrorKind::BadArgument,
                format!("takes {} arguments ({}), got {}", tool.params.len(), tool.signature.params.join(", "), args.len()),
            ));
        }
        let mut params = Vec::with_capacity(args.len());
        for ((arg, ty), param_name) in args.iter().zip(&tool.params).zip(&tool.signature.params) {
            params.push(plugin_values::to_val(arg, ty).map_err(|m| fail(types::ToolErrorKind::BadArgument, format!("`{param_name}`: {m}")))?);
        }
        let mut results = vec![Val::Bool(false); usize::from(tool.result.is_some())];
        let plugin = &tool.component;
        let mut warm = match plugin.checkout(limits).await {
            Ok(warm) => warm,
            Err((error, store)) => return Err(fail(types::ToolErrorKind::Failed, plugin.crash_message(&error, &store))),
        };
        let call = async {
            let func = warm.instance.get_func(&mut warm.store, tool.function).ok_or_else(|| wasmtime::Error::msg("the exported function disappeared"))?;
            func.call_async(&mut warm.store, &params, &mut results).await
        };
        match call.await {
            Ok(()) => plugin.checkin(warm),
            Err(error) => return Err(fail(types::ToolErrorKind::Failed, plugin.crash_message(&error, &warm.store))),
        }
        let json = match results.pop() {
            None => serde_json::Value::Null,
            Some(Val::Result(Ok(value))) => value.as_deref().map_or(serde_json::Value::Null, plugin_values::to_json),
            Some(Val::Result(Err(error))) => {
                let message = match error.as_deref() {
                    Some(Val::String(s)) => s.clone(),
                    Some(other) => plugin_values::to_json(other).to_string(),
                    None => "failed".to_string(),
                };
                return Err(fail(types::ToolErrorKind::Failed, message));
            }
            Some(value) => plugin_values::to_json(&value),
        };
        Ok(json.to_string())
    }
}

impl LoadedPlugin {
    /// A warm instance when one is kept, else a fresh one; either way set up for one call under
    /// `limits`. A failed start gives back the Store, to explain the failure.
    async fn checkout(&self, limits: Limits) -> Result<PluginInstance, (wasmtime::Error, Store<PluginState>)> {
        let kept = if self.reuse { self.warm.lock().expect("plug-in pool poisoned").pop() } else { None };
        let mut warm = match kept {
            Some(warm) => warm,
            None => {
                let mut store = plugin_store(self.pre.engine(), limits);
                self.instances_started.fetch_add(1, Ordering::Relaxed);
                match self.pre.instantiate_async(&mut store).await {
                    Ok(instance) => PluginInstance { store, instance },
                    Err(error) => return Err((error, store)),
                }
            }
        };
        arm(&mut warm.store, limits);
        Ok(warm)
    }

    /// Keeps an instance that completed a call, when this plug-in reuses them and there is room.
    fn checkin(&self, warm: PluginInstance) {
        if self.reuse {
            let mut kept = self.warm.lock().expect("plug-in pool poisoned");
            if kept.len() < MAX_WARM_INSTANCES {
                kept.push(warm);
            }
        }
    }

    /// What a model and a developer see when the plug-in crashed (the tool's name goes with it in the
    /// tool error): the file, the cause in one line (a bound, or the trap), and the last lines of the plug-in's stderr, where a
    /// Python traceback or a JavaScript error ends up. No wasm frames: they help nobody write a program.
    fn crash_message(&self, error: &wasmtime::Error, store: &Store<PluginState>) -> String {
        let file = self.path.file_name().map_or_else(|| self.path.display().to_string(), |f| f.to_string_lossy().into_owned());
        format!("the plug-in {file} crashed: {}", explain_failure(error, store.data()))
    }
}

/// Why a plug-in instance failed, in one line (a bound, or the trap), then the last lines of its stderr:
/// the explanation of a crash in a call and of a failure at load alike.
pub(crate) fn explain_failure(error: &wasmtime::Error, state: &PluginState) -> String {
    let cause = if state.memory.exceeded {
        format!("it ran out of memory (limit {} MiB)", state.memory.limit() >> 20)
    } else {
        match error.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => "it ran out of fuel".to_string(),
            Some(Trap::Interrupt) => "it ran past its time limit".to_string(),
            Some(Trap::StackOverflow) => "its stack overflowed".to_string(),
            Some(trap) => format!("it trapped ({})", trap.to_string().trim_start_matches("wasm trap: ")),
            None => error.root_cause().to_string(),
        }
    };
    let tail = stderr_tail(&state.stderr);
    if tail.is_empty() {
        cause
    } else {
        format!("{cause}; its stderr ends with:\n{}", tail.join("\n"))
    }
}

/// The last lines of a plug-in's stderr, without the hint every Rust panic ends with (the Python and
/// JavaScript toolchains' runtimes are Rust): it tells a model nothing and pushes out a line that might.
fn stderr_tail(stderr: &CappedOutput) -> Vec<String> {
    let mut lines = stderr.last_lines(STDERR_TAIL_LINES + 1);
    lines.retain(|l| !l.starts_with("note: run with `RUST_BACKTRACE=1`"));
    let excess = lines.len().saturating_sub(STDERR_TAIL_LINES);
    lines.drain(..excess);
    lines
}

/// A Store for a new plug-in instance. Plug-ins write nowhere that matters: stdout is dropped (a
/// bounded tail), stderr's tail is kept to explain a crash.
pub(crate) fn plugin_store(engine: &Engine, limits: Limits) -> Store<PluginState> {
    let stdout = CappedOutput::keeping_tail(4096);
    let stderr = CappedOutput::keeping_tail(STDERR_TAIL_BYTES);
    let state = PluginState { wasi: no_authority_wasi(&stdout, &stderr), table: ResourceTable::new(), memory: MemoryLimiter::new(limits.memory_bytes), stderr };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.memory);
    arm(&mut store, limits);
    store
}

/// Gives a Store a whole call's bounds: fuel, a wall-time deadline from now, the memory bound; and an
/// empty stderr, so a crash message quotes this call only.
fn arm(store: &mut Store<PluginState>, limits: Limits) {
    store.set_fuel(limits.fuel).expect("fuel is enabled on the engine");
    store.set_epoch_deadline(deadline_ticks(limits.timeout));
    store.epoch_deadline_trap();
    let state = store.data_mut();
    state.memory.rearm(limits.memory_bytes);
    state.stderr.clear();
}

/// Whether `describe` names the plug-in's tools: it must list at least one, and only functions the
/// component exports (`exported`, by WIT name), or the model would be told of tools that are not there,
/// or of none. Else what is missing, in one line.
fn check_described(docs: &BTreeMap<String, String>, exported: &[(String, PluginTool)]) -> Result<(), String> {
    const WHAT_A_TOOL_IS: &str = "a tool is a function of an interface the plug-in exports besides `metadata`";
    let names: Vec<&str> = exported.iter().map(|(name, _)| name.as_str()).collect();
    let quoted = |names: &mut dyn Iterator<Item = &str>| names.map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    if docs.is_empty() {
        return Err(if names.is_empty() {
            format!("its `metadata.describe()` lists no tools, and it exports none ({WHAT_A_TOOL_IS})")
        } else {
            format!(
                "its `metadata.describe()` lists no tools, so the model would be told of none: it should list each function it exports ({}) by its WIT name, with a line for the model",
                quoted(&mut names.iter().copied())
            )
        });
    }
    let unknown: Vec<&str> = docs.keys().map(String::as_str).filter(|listed| !names.contains(listed)).collect();
    if !unknown.is_empty() {
        let exports = if names.is_empty() {
            format!("it exports no tool functions: {WHAT_A_TOOL_IS}")
        } else {
            format!("it exports {}; describe() names tools by their WIT names, in kebab-case", quoted(&mut names.iter().copied()))
        };
        return Err(format!("its `metadata.describe()` lists {}, which it does not export ({exports})", quoted(&mut unknown.into_iter())));
    }
    Ok(())
}

/// Asks a plug-in, once at load, for its tools' one-line descriptions (`metadata.describe`) and whether
/// it keeps state between calls (`metadata.stateless`; absent in components built before it existed,
/// which count as stateful).
async fn describe(path: &Path, pre: &InstancePre<PluginState>) -> Result<(BTreeMap<String, String>, bool), SandboxError> {
    let origin = path.display().to_string();
    let unusable = |reason: String| SandboxError::UnusableTool { origin: origin.clone(), reason };
    let component = pre.component();
    let interface = component
        .get_export_index(None, METADATA_INTERFACE)
        .ok_or_else(|| unusable(format!("it does not export `{METADATA_INTERFACE}`: is it built for the `agentrt:tools/tool` world?")))?;
    let describe = component.get_export_index(Some(&interface), "describe").ok_or_else(|| unusable("its metadata interface has no `describe`".into()))?;
    let stateless = component.get_export_index(Some(&interface), "stateless");
    let mut store = plugin_store(pre.engine(), Limits::default());
    let mut described = vec![Val::Bool(false)];
    let mut declared = vec![Val::Bool(false)];
    let call = async {
        let instance = pre.instantiate_async(&mut store).await?;
        let func = instance.get_func(&mut store, describe).ok_or_else(|| wasmtime::Error::msg("no describe"))?;
        func.call_async(&mut store, &[], &mut described).await?;
        if let Some(stateless) = stateless {
            let func = instance.get_func(&mut store, stateless).ok_or_else(|| wasmtime::Error::msg("no stateless"))?;
            func.call_async(&mut store, &[], &mut declared).await?;
        }
        wasmtime::Result::<()>::Ok(())
    };
    if let Err(e) = call.await {
        return Err(unusable(format!("starting it and asking for its metadata failed: {}", explain_failure(&e, store.data()))));
    }
    let stateless = matches!(declared.pop(), Some(Val::Bool(true)));
    let mut docs = BTreeMap::new();
    if let Some(Val::List(items)) = described.pop() {
        for item in items {
            if let Val::Record(fields) = item {
                let get = |key: &str| {
                    fields.iter().find(|(k, _)| k == key).and_then(|(_, v)| match v {
                        Val::String(s) => Some(s.clone()),
                        _ => None,
                    })
                };
                if let (Some(name), Some(description)) = (get("name"), get("description")) {
                    docs.insert(name, description);
                }
            }
        }
    }
    Ok((docs, stateless))
}
