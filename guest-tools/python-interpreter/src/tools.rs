//! Tool calls: from a paused monty VM to the host's imports and back.

use crate::bindings::agentrt::tools::plugins;
use crate::bindings::agentrt::tools::types::{ToolError, ToolErrorKind};
use crate::bindings::agentrt::tools::wiki;
use crate::convert;
use crate::value::Py;
use monty_types::{ExcType, ExtFunctionResult, MontyException};
use std::cell::RefCell;
use std::collections::HashMap;

/// The wiki tools, always defined in a program's namespace.
pub const WIKI_TOOLS: &[&str] = &["search_pages", "search_passages", "view_sections", "read_section"];

/// How many pages `search_pages` returns when the program does not say.
const DEFAULT_K: i64 = 5;
/// The most pages one search may ask for.
const MAX_K: i64 = 50;
/// How many passages `search_passages` returns when the program does not say.
const DEFAULT_PASSAGES: i64 = 10;

thread_local! {
    /// Plug-in tools found so far in this run, by name: their parameter names, for keyword arguments.
    static PLUGINS: RefCell<HashMap<String, Vec<String>>> = RefCell::new(HashMap::new());
    /// The last tool error raised into the program, to recognise it if nobody catches it.
    static RAISED: RefCell<Option<(ToolError, String)>> = const { RefCell::new(None) };
}

/// Calls the tool `name` with the program's arguments; the result resumes the VM.
pub fn call(name: &str, args: &[Py], kwargs: &[(Py, Py)]) -> ExtFunctionResult {
    match dispatch(name, args, kwargs) {
        Ok(value) => ExtFunctionResult::Return(value.into_monty()),
        Err(error) => ExtFunctionResult::Error(raise(error)),
    }
}

fn dispatch(name: &str, args: &[Py], kwargs: &[(Py, Py)]) -> Result<Py, ToolError> {
    match name {
        "search_pages" => {
            let [query, k] = bind(name, &["query", "k"], 1, args, kwargs)?;
            let query = expect_str(name, "query", query)?;
            let k = bounded_k(name, k, DEFAULT_K)?;
            let hits = wiki::search_pages(&query, k as u32)?;
            Ok(Py::List(
                hits.into_iter()
                    .map(|h| {
                        convert::record(vec![
                            ("page_id", Py::String(h.page_id)),
                            ("title", Py::String(h.title)),
                            ("score", Py::Float(f64::from(h.score))),
                            ("section_id", Py::String(h.section_id)),
                        ])
                    })
                    .collect(),
            ))
        }
        "search_passages" => {
            let [query, page_id, k] = bind(name, &["query", "page_id", "k"], 1, args, kwargs)?;
            let query = expect_str(name, "query", query)?;
            let page_id = match page_id {
                None | Some(Py::None) => None,
                Some(id) => Some(expect_str(name, "page_id", Some(id))?),
            };
            let k = bounded_k(name, k, DEFAULT_PASSAGES)?;
            let passages = wiki::search_passages(&query, page_id.as_deref(), k as u32)?;
            Ok(Py::List(
                passages
                    .into_iter()
                    .map(|p| {
                        convert::record(vec![
                            ("page_id", Py::String(p.page_id)),
                            ("section_id", Py::String(p.section_id)),
                            ("text", Py::String(p.text)),
                            ("score", Py::Float(f64::from(p.score))),
                        ])
                    })
                    .collect(),
            ))
        }
        "view_sections" => {
            let [page_id] = bind(name, &["page_id"], 1, args, kwargs)?;
            let page_id = expect_str(name, "page_id", page_id)?;
            let sections = wiki::view_sections(&page_id)?;
            Ok(Py::List(
                sections.into_iter().map(|s| convert::record(vec![("section_id", Py::String(s.section_id)), ("title", Py::String(s.title))])).collect(),
            ))
        }
        "read_section" => {
            let [section_id] = bind(name, &["section_id"], 1, args, kwargs)?;
            let section_id = expect_str(name, "section_id", section_id)?;
            Ok(Py::String(wiki::read_section(&section_id)?))
        }
        _ => call_plugin(name, args, kwargs),
    }
}

/// A search's `k`: `default` when the program does not say, else an int from 1 to [`MAX_K`].
fn bounded_k(name: &str, k: Option<Py>, default: i64) -> Result<i64, ToolError> {
    match k {
        None => Ok(default),
        Some(Py::Int(k)) if (1..=MAX_K).contains(&k) => Ok(k),
        Some(other) => Err(bad_argument(name, format!("k must be an int from 1 to {MAX_K}, got {}", other.py_repr()))),
    }
}

/// The plug-in tool called `name` as a Python function, if the host has one.
pub fn lookup_plugin(name: &str) -> Option<Py> {
    let signature = plugins::lookup(name)?;
    PLUGINS.with(|p| p.borrow_mut().insert(name.to_string(), signature.params));
    Some(Py::Function { name: name.to_string(), docstring: Some(signature.doc) })
}

fn call_plugin(name: &str, args: &[Py], kwargs: &[(Py, Py)]) -> Result<Py, ToolError> {
    // monty may call an undefined name without looking it up first: ask the host then.
    let known = PLUGINS.with(|p| p.borrow().get(name).cloned());
    let params = match known {
        Some(params) => params,
        None => {
            lookup_plugin(name).ok_or_else(|| ToolError {
                tool: name.to_string(),
                kind: ToolErrorKind::UnknownTool,
                message: format!("no tool named `{name}`"),
            })?;
            PLUGINS.with(|p| p.borrow().get(name).cloned()).unwrap_or_default()
        }
    };
    let mut positional: Vec<Option<Py>> = vec![None; params.len().max(args.len())];
    for (slot, arg) in positional.iter_mut().zip(args) {
        *slot = Some(arg.clone());
    }
    for (key, value) in kwargs {
        let index = keyword_index(name, &params, key)?;
        if positional[index].is_some() {
            return Err(bad_argument(name, format!("got multiple values for argument `{}`", params[index])));
        }
        positional[index] = Some(value.clone());
    }
    let mut json_args = Vec::with_capacity(positional.len());
    for (i, arg) in positional.into_iter().enumerate() {
        let arg = arg.ok_or_else(|| bad_argument(name, format!("missing argument `{}`", params[i])))?;
        json_args.push(convert::to_json(&arg).map_err(|m| bad_argument(name, m))?);
    }
    let args_json = serde_json::Value::Array(json_args).to_string();
    let result = plugins::call(name, &args_json)?;
    let value: serde_json::Value = serde_json::from_str(&result).map_err(|e| ToolError {
        tool: name.to_string(),
        kind: ToolErrorKind::Failed,
        message: format!("the host returned invalid JSON: {e}"),
    })?;
    Ok(convert::from_json(value))
}

/// Binds positional and keyword arguments to `params`; the first `required` must be given.
fn bind<const N: usize>(tool: &str, params: &[&str; N], required: usize, args: &[Py], kwargs: &[(Py, Py)]) -> Result<[Option<Py>; N], ToolError> {
    if args.len() > N {
        return Err(bad_argument(tool, format!("takes at most {N} arguments ({}), got {}", params.join(", "), args.len())));
    }
    let mut bound: [Option<Py>; N] = std::array::from_fn(|i| args.get(i).cloned());
    let names: Vec<String> = params.iter().map(|p| p.to_string()).collect();
    for (key, value) in kwargs {
        let index = keyword_index(tool, &names, key)?;
        if bound[index].is_some() {
            return Err(bad_argument(tool, format!("got multiple values for argument `{}`", params[index])));
        }
        bound[index] = Some(value.clone());
    }
    if let Some(missing) = (0..required).find(|&i| bound[i].is_none()) {
        return Err(bad_argument(tool, format!("missing argument `{}`", params[missing])));
    }
    Ok(bound)
}

fn keyword_index(tool: &str, params: &[String], key: &Py) -> Result<usize, ToolError> {
    let Py::String(key) = key else {
        return Err(bad_argument(tool, "keyword names must be strings".to_string()));
    };
    params.iter().position(|p| p == key).ok_or_else(|| bad_argument(tool, format!("unexpected keyword argument `{key}` (parameters: {})", params.join(", "))))
}

fn expect_str(tool: &str, param: &str, value: Option<Py>) -> Result<String, ToolError> {
    match value {
        Some(Py::String(s)) => Ok(s),
        Some(other) => Err(bad_argument(tool, format!("`{param}` must be a str, got {}", other.type_name()))),
        None => Err(bad_argument(tool, format!("missing argument `{param}`"))),
    }
}

fn bad_argument(tool: &str, message: String) -> ToolError {
    ToolError { tool: tool.to_string(), kind: ToolErrorKind::BadArgument, message }
}

/// The Python exception a tool error becomes: one the program can catch with `except Exception`.
fn raise(error: ToolError) -> MontyException {
    let exc_type = match error.kind {
        ToolErrorKind::UnknownTool => ExcType::NameError,
        ToolErrorKind::BadArgument => ExcType::ValueError,
        ToolErrorKind::NotFound => ExcType::LookupError,
        ToolErrorKind::Failed => ExcType::RuntimeError,
    };
    let message = format!("{}: {}", error.tool, error.message);
    RAISED.with(|r| *r.borrow_mut() = Some((error, message.clone())));
    MontyException::new(exc_type, Some(message))
}

/// The tool error behind `exc`, if `exc` is the last one a tool raised (the program did not catch it).
pub fn take_raised_tool_error(exc: &MontyException) -> Option<ToolError> {
    RAISED.with(|r| {
        let raised = r.borrow_mut().take()?;
        (exc.message() == Some(raised.1.as_str())).then_some(raised.0)
    })
}
