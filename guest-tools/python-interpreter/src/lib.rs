//! The `tool-code` guest: runs one model-written Python program against the agentrt tools.
//!
//! The design in three parts:
//! - **who reads**: [`imports::check`] refuses modules that would reach outside the sandbox, then
//!   `monty` parses and compiles the program (a syntax error comes back with its line and column).
//! - **who runs**: monty's VM executes the program and pauses at every call of a tool; [`tools`] turns
//!   the pause into a host import call (the wiki tools, or a plug-in found by name) and resumes the VM
//!   with the result as Python values, or with an exception the program may catch.
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
mod tools;

use bindings::agentrt::tools::types::{Outcome, ProgramError};
use monty::{MontyRun, RunProgress};
use monty_types::{CompileOptions, MontyObject, NameLookupResult, PrintWriter, ResourceLimits, ResourceTracker};

/// monty allocates and frees many small objects while it parses, compiles and runs a program; talc does
/// that faster than Rust's default wasm allocator (dlmalloc). Measured with `agentrt bench sandbox`
/// (release, p50, median of 5 interleaved runs on a loaded machine): 211 -> 195 us; 8 interleaved pairs of
/// a probe: 134 -> 127 us. It burns ~5% more fuel (376K -> 394K for the bench's 3-call program).
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

/// Python recursion depth allowed before `RecursionError`; well inside the wasm stack.
const MAX_RECURSION_DEPTH: usize = 200;

struct Interpreter;

impl bindings::Guest for Interpreter {
    fn run(program: String) -> Result<Outcome, ProgramError> {
        imports::check(&program)?;
        let input_names = tools::WIKI_TOOLS.iter().map(|t| t.to_string()).collect();
        let runner = MontyRun::new(program, "program.py", input_names, CompileOptions::default())
            .map_err(errors::from_exception)?;
        let inputs = tools::WIKI_TOOLS
            .iter()
            .map(|name| MontyObject::Function { name: name.to_string(), docstring: None })
            .collect();
        let limits = ResourceLimits { max_recursion_depth: MAX_RECURSION_DEPTH, ..ResourceLimits::default() };
        let mut progress = runner
            .start(inputs, ResourceTracker::new(limits), PrintWriter::Stdout)
            .map_err(errors::from_exception)?;
        let mut unknown_names = Vec::new();
        loop {
            progress = match progress {
                RunProgress::Complete(value) => {
                    let value = match value {
                        MontyObject::None => None,
                        other => Some(other.py_repr()),
                    };
                    return Ok(Outcome { value });
                }
                RunProgress::FunctionCall(call) => {
                    let result = tools::call(&call.function_name, &call.args, &call.kwargs);
                    call.resume(result, PrintWriter::Stdout)
                }
                RunProgress::NameLookup(lookup) => {
                    let answer = match tools::lookup_plugin(&lookup.name) {
                        Some(function) => NameLookupResult::Value(function),
                        None => {
                            unknown_names.push(lookup.name.clone());
                            NameLookupResult::Undefined
                        }
                    };
                    lookup.resume(answer, PrintWriter::Stdout)
                }
                RunProgress::OsCall(call) => {
                    return Err(ProgramError::Forbidden(format!(
                        "`{}` is not allowed: programs have no filesystem, network or environment; use the tools",
                        call.function_call
                    )));
                }
                RunProgress::ResolveFutures(_) => {
                    return Err(ProgramError::Forbidden(
                        "async code is not supported: call the tools directly, without await".to_string(),
                    ));
                }
            }
            .map_err(|e| errors::from_uncaught(e, &unknown_names))?;
        }
    }
}

bindings::export!(Interpreter with_types_in bindings);
