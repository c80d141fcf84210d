//! The `tool-code` guest: runs one model-written Python program against the agentrt tools.
//!
//! The design in three parts:
//! - **who reads**: [`imports::prepare`] refuses modules that would reach outside the sandbox and binds
//!   the guest's own modules, then `monty` parses and compiles the program (a syntax error comes back
//!   with its line and column).
//! - **who runs**: monty's VM executes the program and pauses at every call it cannot make itself: a
//!   tool, which [`tools`] turns into a host import call (the wiki tools, or a plug-in found by name); a
//!   function or method of the guest's modules (`random`, `copy`, `string`, `hashlib`: [`modules`]); or
//!   `eval`, which runs the expression in a nested VM. The VM resumes with the result as Python values,
//!   or with an exception the program may catch.
//! - **who receives**: `print` goes to WASI stdout, which the host captures and bounds; the value of the
//!   last expression and any uncaught error go back through `run`'s result, typed by [`errors`].
//!
//! The guest itself enforces no time, fuel or memory limits: the host does, from outside, so a bug here
//! cannot lift them.

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "tool-code",
    });
}

mod convert;
mod errors;
mod imports;
mod modules;
mod tools;

use bindings::agentrt::tools::types::{Outcome, ProgramError};
use monty::{FunctionCall, MontyRun, RunProgress};
use monty_types::{CompileOptions, ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult, PrintWriter, ResourceLimits, ResourceTracker};
use std::cell::Cell;

/// monty allocates and frees many small objects while it parses, compiles and runs a program; talc does
/// that faster than Rust's default wasm allocator (dlmalloc). Measured with `agentrt bench sandbox`
/// (release, p50, median of 5 interleaved runs on a loaded machine): 211 -> 195 us; 8 interleaved pairs of
/// a probe: 134 -> 127 us. It burns ~5% more fuel (376K -> 394K for the bench's 3-call program).
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

/// Python recursion depth allowed before `RecursionError`; well inside the wasm stack.
const MAX_RECURSION_DEPTH: usize = 200;

/// How deeply `eval` may nest (`eval("eval(...)")`): each level is a VM on the guest's stack.
const MAX_EVAL_DEPTH: u32 = 8;

thread_local! {
    static EVAL_DEPTH: Cell<u32> = const { Cell::new(0) };
}

struct Interpreter;

impl bindings::Guest for Interpreter {
    fn run(program: String) -> Result<Outcome, ProgramError> {
        let source = imports::prepare(&program)?.into_owned();
        modules::reset();
        let input_names = tools::WIKI_TOOLS.iter().map(|t| t.to_string()).collect();
        let runner = MontyRun::new(source, "program.py", input_names, CompileOptions::default()).map_err(errors::from_exception)?;
        let inputs = tools::WIKI_TOOLS.iter().map(|name| MontyObject::Function { name: name.to_string(), docstring: None }).collect();
        let progress = runner.start(inputs, tracker(), PrintWriter::Stdout).map_err(errors::from_exception)?;
        let mut unknown_names = Vec::new();
        let value = drive(progress, &mut unknown_names).map_err(|stop| match stop {
            Stop::Program(error) => error,
            Stop::Exception(exc) => errors::from_uncaught(exc, &unknown_names),
        })?;
        let value = match value {
            MontyObject::None => None,
            other => Some(other.py_repr()),
        };
        Ok(Outcome { value })
    }
}

fn tracker() -> ResourceTracker {
    ResourceTracker::new(ResourceLimits { max_recursion_depth: MAX_RECURSION_DEPTH, ..ResourceLimits::default() })
}

/// Why a VM stopped short of completing.
enum Stop {
    /// An exception nobody caught.
    Exception(MontyException),
    /// Something the sandbox refuses outright (filesystem access, async code): the whole run ends.
    Program(ProgramError),
}

/// Runs a VM to completion, serving its pauses. `unknown_names` collects the names it used that are
/// neither defined nor tools, to tell an unknown tool from a typo.
fn drive(mut progress: RunProgress, unknown_names: &mut Vec<String>) -> Result<MontyObject, Stop> {
    loop {
        progress = match progress {
            RunProgress::Complete(value) => return Ok(value),
            RunProgress::FunctionCall(call) => {
                let result = host_call(&call).map_err(Stop::Program)?;
                call.resume(result, PrintWriter::Stdout)
            }
            RunProgress::NameLookup(lookup) => {
                let answer = match lookup.object_id() {
                    // An attribute of one of the guest's objects (a module, a generator, a hash).
                    Some(id) => modules::attr(id, &lookup.name),
                    None => match modules::builtin(&lookup.name).or_else(|| tools::lookup_plugin(&lookup.name)) {
                        Some(function) => NameLookupResult::Value(function),
                        None => {
                            unknown_names.push(lookup.name.clone());
                            NameLookupResult::Undefined
                        }
                    },
                };
                lookup.resume(answer, PrintWriter::Stdout)
            }
            RunProgress::OsCall(call) => {
                return Err(Stop::Program(ProgramError::Forbidden(format!(
                    "`{}` is not allowed: programs have no filesystem, network or environment; use the tools",
                    call.function_call
                ))));
            }
            RunProgress::ResolveFutures(_) => {
                return Err(Stop::Program(ProgramError::Forbidden("async code is not supported: call the tools directly, without await".to_string())));
            }
        }
        .map_err(Stop::Exception)?;
    }
}

/// Serves a paused call: a method of a guest object, `eval`, a guest module's function, or a tool.
fn host_call(call: &FunctionCall) -> Result<ExtFunctionResult, ProgramError> {
    let (name, args, kwargs) = (call.function_name.as_str(), call.args.as_slice(), call.kwargs.as_slice());
    Ok(match call.object_id {
        Some(id) => modules::call_method(id, name, args, kwargs),
        None if name == "eval" => eval(args, kwargs)?,
        None if modules::is_guest_function(name) => modules::call_function(name, args, kwargs),
        None => tools::call(name, args, kwargs),
    })
}

/// `eval(expression, globals=None, locals=None)`: the expression runs in a nested VM that sees the
/// builtins, the tools and the names in the dicts given, not the calling program's variables.
fn eval(args: &[MontyObject], kwargs: &[(MontyObject, MontyObject)]) -> Result<ExtFunctionResult, ProgramError> {
    let raise = |exc_type, message: String| Ok(ExtFunctionResult::Error(MontyException::new(exc_type, Some(message))));
    let [source, globals, locals] = match modules::bind("eval", &["source", "globals", "locals"], 1, 3, args, &[]) {
        Ok(bound) if kwargs.is_empty() => bound,
        Ok(_) => return raise(ExcType::TypeError, "eval() takes no keyword arguments".to_string()),
        Err(exc) => return Ok(ExtFunctionResult::Error(exc)),
    };
    let source = match source {
        Some(MontyObject::String(source)) => source,
        Some(MontyObject::Bytes(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        other => {
            let type_name = other.as_ref().map_or("NoneType", |o| o.type_name()).to_string();
            return raise(ExcType::TypeError, format!("eval() arg 1 must be a string, bytes or code object, not {type_name}"));
        }
    };
    // As CPython, leading spaces and tabs are dropped, and only an expression is accepted.
    let source = source.trim_start_matches([' ', '\t']).to_string();
    if let Err(error) = ruff_python_parser::parse_expression(&source) {
        return raise(ExcType::SyntaxError, format!("invalid syntax in eval(): {}", error.error));
    }
    let mut names: Vec<String> = tools::WIKI_TOOLS.iter().map(|t| t.to_string()).collect();
    let mut values: Vec<MontyObject> = names.iter().map(|name| MontyObject::Function { name: name.clone(), docstring: None }).collect();
    for scope in [globals, locals].into_iter().flatten() {
        match scope {
            MontyObject::None => {}
            MontyObject::Dict(pairs) => {
                for (key, value) in pairs {
                    if let MontyObject::String(key) = key {
                        if let Some(i) = names.iter().position(|n| *n == key) {
                            values[i] = value;
                        } else {
                            names.push(key);
                            values.push(value);
                        }
                    }
                }
            }
            other => return raise(ExcType::TypeError, format!("eval() globals and locals must be dicts, not {}", other.type_name())),
        }
    }
    if EVAL_DEPTH.get() >= MAX_EVAL_DEPTH {
        return raise(ExcType::RecursionError, format!("eval() nested more than {MAX_EVAL_DEPTH} deep"));
    }
    let runner = match MontyRun::new(source, "<string>", names, CompileOptions::default()) {
        Ok(runner) => runner,
        Err(exc) => return Ok(ExtFunctionResult::Error(exc)),
    };
    EVAL_DEPTH.set(EVAL_DEPTH.get() + 1);
    let result = runner.start(values, tracker(), PrintWriter::Stdout).map_err(Stop::Exception).and_then(|progress| drive(progress, &mut Vec::new()));
    EVAL_DEPTH.set(EVAL_DEPTH.get() - 1);
    match result {
        Ok(value) => Ok(ExtFunctionResult::Return(value)),
        Err(Stop::Program(error)) => Err(error),
        Err(Stop::Exception(exc)) => {
            let message = exc.message().unwrap_or_default().to_string();
            let message = if exc.exc_type() == ExcType::NameError {
                format!("{message} (eval() in the sandbox sees only the builtins, the tools and the dicts passed to it)")
            } else {
                message
            };
            raise(exc.exc_type(), message)
        }
    }
}

bindings::export!(Interpreter with_types_in bindings);
