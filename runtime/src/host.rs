//! The state of one program's Store and the host side of its imports: the wiki tools, the plug-in
//! tools, WASI with no authority, and the bookkeeping that the report is made of.

use crate::bindings::agentrt::tools::{plugins, types, wiki};
use crate::limits::{Limits, MemoryLimiter};
use crate::output::CappedOutput;
use crate::plugins::PluginRegistry;
use crate::report::HostCall;
use crate::tool_host::{ToolFailure, ToolHost};
use crate::wasi::no_authority_wasi;
use std::sync::Arc;
use std::time::Instant;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Everything one running program owns.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryLimiter,
    tools: Arc<dyn ToolHost>,
    plugins: Arc<PluginRegistry>,
    limits: Limits,
    pub(crate) host_calls: Vec<HostCall>,
}

impl HostState {
    pub fn new(tools: Arc<dyn ToolHost>, plugins: Arc<PluginRegistry>, limits: Limits, stdout: &CappedOutput, stderr: &CappedOutput) -> Self {
        Self {
            wasi: no_authority_wasi(stdout, stderr),
            table: ResourceTable::new(),
            memory: MemoryLimiter::new(limits.memory_bytes),
            tools,
            plugins,
            limits,
            host_calls: Vec::new(),
        }
    }

    /// Counts a tool call against the limit; past it, the program traps.
    fn admit_call(&self, tool: &str) -> wasmtime::Result<()> {
        if self.host_calls.len() >= self.limits.max_host_calls as usize {
            return Err(HostCallLimitExceeded { limit: self.limits.max_host_calls, tool: tool.to_string() }.into());
        }
        Ok(())
    }

    fn record<T>(
        &mut self,
        tool: &str,
        args: serde_json::Value,
        started: Instant,
        result: &Result<T, types::ToolError>,
        returned_ids: impl FnOnce(&T) -> Vec<String>,
    ) {
        self.host_calls.push(HostCall {
            tool: tool.to_string(),
            args,
            duration: started.elapsed(),
            error: result.as_ref().err().map(|e| e.message.clone()),
            returned_ids: result.as_ref().map(returned_ids).unwrap_or_default(),
        });
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// The trap raised when a program makes more tool calls than its limit.
#[derive(Debug, thiserror::Error)]
#[error("more than {limit} tool calls (the last one was `{tool}`)")]
pub struct HostCallLimitExceeded {
    pub limit: u32,
    pub tool: String,
}

fn tool_error(tool: &str, failure: ToolFailure) -> types::ToolError {
    let (kind, message) = match failure {
        ToolFailure::BadArgument(m) => (types::ToolErrorKind::BadArgument, m),
        ToolFailure::NotFound(m) => (types::ToolErrorKind::NotFound, m),
        ToolFailure::Failed(m) => (types::ToolErrorKind::Failed, m),
    };
    types::ToolError { tool: tool.to_string(), kind, message }
}

impl types::Host for HostState {}

impl wiki::Host for HostState {
    async fn search_pages(&mut self, query: String, k: u32) -> wasmtime::Result<Result<Vec<types::PageHit>, types::ToolError>> {
        self.admit_call("search_pages")?;
        let started = Instant::now();
        let result = self.tools.search_pages(&query, k as usize).await.map_err(|f| tool_error("search_pages", f)).map(|hits| {
            hits.into_iter().map(|h| types::PageHit { page_id: h.page_id, title: h.title, score: h.score, section_id: h.section_id }).collect::<Vec<_>>()
        });
        self.record("search_pages", serde_json::json!({"query": query, "k": k}), started, &result, |hits| hits.iter().map(|h| h.page_id.clone()).collect());
        Ok(result)
    }

    async fn search_passages(&mut self, query: String, page_id: Option<String>, k: u32) -> wasmtime::Result<Result<Vec<types::PassageHit>, types::ToolError>> {
        self.admit_call("search_passages")?;
        let started = Instant::now();
        let result = self.tools.search_passages(&query, page_id.as_deref(), k as usize).await.map_err(|f| tool_error("search_passages", f)).map(|passages| {
            passages.into_iter().map(|p| types::PassageHit { page_id: p.page_id, section_id: p.section_id, text: p.text, score: p.score }).collect::<Vec<_>>()
        });
        self.record("search_passages", serde_json::json!({"query": query, "page_id": page_id, "k": k}), started, &result, |passages| {
            passages.iter().map(|p| p.section_id.clone()).collect()
        });
        Ok(result)
    }

    async fn view_sections(&mut self, page_id: String) -> wasmtime::Result<Result<Vec<types::SectionRef>, types::ToolError>> {
        self.admit_call("view_sections")?;
        let started = Instant::now();
        let result = self
            .tools
            .view_sections(&page_id)
            .await
            .map_err(|f| tool_error("view_sections", f))
            .map(|sections| sections.into_iter().map(|s| types::SectionRef { section_id: s.section_id, title: s.title }).collect::<Vec<_>>());
        self.record("view_sections", serde_json::json!({"page_id": page_id}), started, &result, |sections| {
            sections.iter().map(|s| s.section_id.clone()).collect()
        });
        Ok(result)
    }

    async fn read_section(&mut self, section_id: String) -> wasmtime::Result<Result<String, types::ToolError>> {
        self.admit_call("read_section")?;
        let started = Instant::now();
        let result = self.tools.read_section(&section_id).await.map_err(|f| tool_error("read_section", f));
        self.record("read_section", serde_json::json!({"section_id": section_id}), started, &result, |_| Vec::new());
        Ok(result)
    }
}

impl plugins::Host for HostState {
    async fn lookup(&mut self, name: String) -> wasmtime::Result<Option<plugins::ToolSignature>> {
        Ok(self.plugins.signature(&name))
    }

    async fn call(&mut self, name: String, args_json: String) -> wasmtime::Result<Result<String, types::ToolError>> {
        self.admit_call(&name)?;
        let started = Instant::now();
        let args = serde_json::from_str(&args_json).unwrap_or(serde_json::Value::String(args_json.clone()));
        let args = named_args(args, self.plugins.signature(&name).map(|s| s.params));
        let result = self.plugins.call(&name, &args_json, self.limits).await;
        self.record(&name, args, started, &result, |_| Vec::new());
        Ok(result)
    }
}

/// A plug-in call's arguments as the trace shows them: by parameter name, as the wiki tools' are, however
/// the program passed them (the guest sends them in order). Left as they came when they do not match the
/// parameters one to one.
fn named_args(args: serde_json::Value, params: Option<Vec<String>>) -> serde_json::Value {
    match (args, params) {
        (serde_json::Value::Array(values), Some(params)) if values.len() == params.len() => serde_json::Value::Object(params.into_iter().zip(values).collect()),
        (args, _) => args,
    }
}

#[cfg(test)]
mod named_args_tests {
    use super::named_args;
    use serde_json::json;

    #[test]
    fn plug_in_arguments_are_traced_by_parameter_name() {
        let params = Some(vec!["text".to_string(), "top_n".to_string()]);
        assert_eq!(named_args(json!(["a b", 3]), params.clone()), json!({"text": "a b", "top_n": 3}));
        // Not one to one (the plug-in refuses such a call): as they came.
        assert_eq!(named_args(json!(["a b"]), params), json!(["a b"]));
        assert_eq!(named_args(json!(["a b"]), None), json!(["a b"]));
    }
}
