//! Plug-in tools: components of the `tool` world, loaded at start-up, whose exported functions model
//! programs call by name. The runtime learns each function's name and types from the component
//! itself, so a new tool needs a WIT interface and a component, and no change here.

use crate::bindings::agentrt::tools::{plugins::ToolSignature, types};
use crate::component_cache::ComponentCache;
use crate::engine::deadline_ticks;
use crate::host::{no_authority_wasi, MemoryLimiter};
use crate::limits::Limits;
use crate::output::CappedOutput;
use crate::plugin_values::{self, snake_case};
use crate::SandboxError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{ComponentExportIndex, InstancePre, Linker, ResourceTable, Type, Val};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The interface every plug-in exports to describe itself; it is not a tool.
const METADATA_INTERFACE: &str = "agentrt:tools/metadata@0.1.0";

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
}

/// A plug-in instance's Store: WASI with no authority, and a memory bound.
struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryLimiter,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// The `.wasm` files of a tools directory, sorted by name.
pub fn components_in(dir: &Path) -> Result<Vec<PathBuf>, SandboxError> {
    let entries = std::fs::read_dir(dir).map_err(|e| SandboxError::Io { path: dir.to_path_buf(), reason: e.to_string() })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .collect();
    paths.sort();
    Ok(paths)
}

impl PluginRegistry {
    /// Loads every plug-in in `paths`. Two tools with one name, or a plug-in whose imports the host
    /// does not provide, are errors that name the file.
    pub async fn load(engine: &Engine, cache: &ComponentCache, paths: &[PathBuf]) -> Result<Self, SandboxError> {
        let mut linker = Linker::<PluginState>::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let mut registry = Self::default();
        for path in paths {
            let origin = path.display().to_string();
            let wasm = std::fs::read(path).map_err(|e| SandboxError::Io { path: path.clone(), reason: e.to_string() })?;
            let component = cache.load(engine, &wasm, &origin)?;
            let pre = linker.instantiate_pre(&component).map_err(|e| SandboxError::unsatisfied_import(&origin, e))?;
            let loaded = Arc::new(LoadedPlugin { path: path.clone(), pre });
            let docs = describe(&loaded).await?;

            let component_type = component.component_type();
            for (interface, item) in component_type.exports(engine) {
                let ComponentItem::ComponentInstance(instance) = item.ty else { continue };
                if interface == METADATA_INTERFACE {
                    continue;
                }
                let interface_index = component.get_export_index(None, interface).expect("an export the type lists");
                for (func_name, func_item) in instance.exports(engine) {
                    let ComponentItem::ComponentFunc(func) = func_item.ty else { continue };
                    let name = snake_case(func_name);
                    let function = component
                        .get_export_index(Some(&interface_index), func_name)
                        .expect("an export the type lists");
                    let params: Vec<(String, Type)> = func.params().map(|(n, t)| (snake_case(n), t)).collect();
                    let results: Vec<Type> = func.results().collect();
                    if results.len() > 1 {
                        return Err(SandboxError::InvalidComponent {
                            origin,
                            reason: format!("`{func_name}` returns several values; a tool returns one"),
                        });
                    }
                    if let Some(existing) = registry.tools.get(&name) {
                        return Err(SandboxError::InvalidComponent {
                            origin,
                            reason: format!("tool `{name}` is already provided by {}", existing.component.path.display()),
                        });
                    }
                    let doc = docs.get(func_name).cloned().unwrap_or_default();
                    let signature = ToolSignature { name: name.clone(), params: params.iter().map(|(n, _)| n.clone()).collect(), doc };
                    registry.tools.insert(
                        name,
                        PluginTool {
                            signature,
                            component: loaded.clone(),
                            function,
                            params: params.into_iter().map(|(_, t)| t).collect(),
                            result: results.into_iter().next(),
                        },
                    );
                }
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

    /// Calls the tool `name` with a JSON array of arguments, in a fresh instance bounded by `limits`.
    pub async fn call(&self, name: &str, args_json: &str, limits: Limits) -> Result<String, types::ToolError> {
        let fail = |kind, message: String| types::ToolError { tool: name.to_string(), kind, message };
        let tool = self.tools.get(name).ok_or_else(|| fail(types::ToolErrorKind::UnknownTool, format!("no plug-in tool `{name}`")))?;
        let args: Vec<serde_json::Value> = serde_json::from_str(args_json)
            .map_err(|e| fail(types::ToolErrorKind::BadArgument, format!("arguments are not a JSON array: {e}")))?;
        if args.len() != tool.params.len() {
            return Err(fail(
                types::ToolErrorKind::BadArgument,
                format!("takes {} arguments ({}), got {}", tool.params.len(), tool.signature.params.join(", "), args.len()),
            ));
        }
        let mut params = Vec::with_capacity(args.len());
        for ((arg, ty), param_name) in args.iter().zip(&tool.params).zip(&tool.signature.params) {
            params.push(
                plugin_values::to_val(arg, ty).map_err(|m| fail(types::ToolErrorKind::BadArgument, format!("`{param_name}`: {m}")))?,
            );
        }
        let mut results = vec![Val::Bool(false); usize::from(tool.result.is_some())];
        let outcome = async {
            let mut store = plugin_store(tool.component.pre.engine(), limits);
            let instance = tool.component.pre.instantiate_async(&mut store).await?;
            let func = instance
                .get_func(&mut store, tool.function)
                .ok_or_else(|| wasmtime::Error::msg("the exported function disappeared"))?;
            func.call_async(&mut store, &params, &mut results).await
        }
        .await;
        outcome.map_err(|e| fail(types::ToolErrorKind::Failed, format!("the plug-in trapped: {e:#}")))?;
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

fn plugin_store(engine: &Engine, limits: Limits) -> Store<PluginState> {
    // Plug-ins write nowhere that matters; their output is bounded and dropped.
    let sink = CappedOutput::new(4096);
    let state = PluginState { wasi: no_authority_wasi(&sink, &sink), table: ResourceTable::new(), memory: MemoryLimiter::new(limits.memory_bytes) };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.memory);
    store.set_fuel(limits.fuel).expect("fuel is enabled on the engine");
    store.set_epoch_deadline(deadline_ticks(limits.timeout));
    store.epoch_deadline_trap();
    store
}

/// Calls the plug-in's `metadata.describe` once, for its tools' one-line descriptions.
async fn describe(plugin: &LoadedPlugin) -> Result<BTreeMap<String, String>, SandboxError> {
    let origin = plugin.path.display().to_string();
    let invalid = |reason: String| SandboxError::InvalidComponent { origin: origin.clone(), reason };
    let component = plugin.pre.component();
    let interface = component
        .get_export_index(None, METADATA_INTERFACE)
        .ok_or_else(|| invalid(format!("it does not export `{METADATA_INTERFACE}`: is it built for the `agentrt:tools/tool` world?")))?;
    let function = component
        .get_export_index(Some(&interface), "describe")
        .ok_or_else(|| invalid("its metadata interface has no `describe`".into()))?;
    let mut store = plugin_store(plugin.pre.engine(), Limits::default());
    let mut results = vec![Val::Bool(false)];
    let call = async {
        let instance = plugin.pre.instantiate_async(&mut store).await?;
        let func = instance.get_func(&mut store, function).ok_or_else(|| wasmtime::Error::msg("no describe"))?;
        func.call_async(&mut store, &[], &mut results).await
    };
    call.await.map_err(|e| invalid(format!("`describe` failed: {e:#}")))?;
    let mut docs = BTreeMap::new();
    if let Some(Val::List(items)) = results.pop() {
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
    Ok(docs)
}
