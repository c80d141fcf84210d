//! The `tool-code` guest: runs one model-written Python program against the agentrt tools.
//!
//! The design in three parts:
//! - **who reads**: [`imports::prepare`] refuses modules that would reach outside the sandbox and binds
//!   the guest's own modules, then `monty` parses and compiles the program (a syntax error comes back
//!   with its line and column).
//! - **who runs**: monty's VM executes the program (`eval` and `exec` included) and pauses at every
//!   call it cannot make itself: a tool, which [`tools`] turns into a host import call (the wiki tools,
//!   or a plug-in found by name); or a function or method of the guest's modules (`random`, `copy`,
//!   `string`, `hashlib`: [`modules`]). The VM resumes with the result as Python values ([`value`]), or
//!   with an exception the program may catch. A pause for the outside world (a file, the clock, the
//!   environment, an import of a module monty does not have) is refused.
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
mod value;

use bindings::agentrt::tools::types::{Outcome, ProgramError};
use monty::{FunctionCall, MontyRun, RunProgress};
use monty_types::unstable::{self, MontyNode};
use monty_types::{
    CompileOptions, DateTimeSource, ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult, OsFunctionCall, OsPolicy, PrintWriter,
    RandomSeed, RandomStart, ResourceLimits, ResourceTracker, SleepMode,
};
use value::Py;

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
        let result = run_program(program);
        // `print` goes through Rust's line-buffered stdout: what follows the last newline
        // (`print(x, end='')`) stays in the buffer unless flushed here, and was lost. A flush past the
        // host's output bound fails; the host sees that and reports the bound.
        let _ = std::io::Write::flush(&mut std::io::stdout());
        result
    }
}

fn run_program(program: String) -> Result<Outcome, ProgramError> {
    let source = imports::prepare(&program)?.into_owned();
    modules::reset();
    let input_names = tools::WIKI_TOOLS.iter().map(|t| t.to_string()).collect();
    let runner = MontyRun::new(source.clone(), "program.py", input_names, CompileOptions::default()).map_err(|e| errors::from_compile_error(e, &source))?;
    let inputs = tools::WIKI_TOOLS.iter().map(|name| MontyObject::function(*name, None)).collect();
    let progress = runner.with_os_policy(os_policy()).start(inputs, tracker(), PrintWriter::Stdout).map_err(errors::from_exception)?;
    let mut unknown_names = Vec::new();
    let value = drive(progress, &mut unknown_names).map_err(|stop| match stop {
        Stop::Program(error) => error,
        Stop::Exception(exc) => errors::from_uncaught(exc, &unknown_names),
    })?;
    let value = match unstable::root_node(&value) {
        MontyNode::None => None,
        _ => Some(value.py_repr()),
    };
    Ok(Outcome { value })
}

fn tracker() -> ResourceTracker {
    ResourceTracker::new(ResourceLimits { max_recursion_depth: MAX_RECURSION_DEPTH, ..ResourceLimits::default() })
}

/// Nothing outside the program is read inline: the clock and sleeps pause the VM (and are refused, see
/// [`drive`]), and monty's own `random` (reachable through `exec`) starts as if `random.seed(0)`, as the
/// guest's does.
fn os_policy() -> OsPolicy {
    OsPolicy {
        datetime: DateTimeSource::CallHost,
        sleep: SleepMode::CallHost,
        random_start: RandomStart::Seed(RandomSeed::Int(0.into())),
        ..OsPolicy::default()
    }
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
                let result = host_call(&call);
                call.resume(result, PrintWriter::Stdout)
            }
            RunProgress::NameLookup(lookup) => {
                let answer = match lookup.object_id() {
                    // An attribute of one of the guest's objects (a module, a generator, a hash).
                    Some(id) => modules::attr(id, &lookup.name),
                    None => match modules::builtin(&lookup.name).or_else(|| tools::lookup_plugin(&lookup.name)) {
                        Some(function) => NameLookupResult::Value(function.into_monty()),
                        None => {
                            unknown_names.push(lookup.name.clone());
                            NameLookupResult::Undefined
                        }
                    },
                };
                lookup.resume(answer, PrintWriter::Stdout)
            }
            RunProgress::OsCall(call) => {
                let refusal = match &call.function_call {
                    // An import the program's import statements did not name (in `exec`'s source): refused
                    // as theirs are, with an exception the program may catch.
                    OsFunctionCall::Import(module) => imports::refusal(module),
                    other => {
                        return Err(Stop::Program(ProgramError::Forbidden(format!(
                            "`{other}` is not allowed: programs have no filesystem, network or environment; use the tools"
                        ))));
                    }
                };
                call.resume(ExtFunctionResult::Error(MontyException::new(ExcType::ModuleNotFoundError, Some(refusal))), PrintWriter::Stdout)
            }
            RunProgress::ResolveFutures(_) => {
                return Err(Stop::Program(ProgramError::Forbidden("async code is not supported: call the tools directly, without await".to_string())));
            }
        }
        .map_err(Stop::Exception)?;
    }
}

/// Serves a paused call: a method of a guest object, a guest module's function, or a tool.
fn host_call(call: &FunctionCall) -> ExtFunctionResult {
    let name = call.function_name.as_str();
    let (args, kwargs) = Py::from_call_args(&call.args);
    match call.object_id {
        Some(id) => modules::call_method(id, name, &args, &kwargs),
        None if modules::is_guest_function(name) => modules::call_function(name, &args, &kwargs),
        None => tools::call(name, &args, &kwargs),
    }
}

bindings::export!(Interpreter with_types_in bindings);
