//! What a run produced: the outcome or a typed error, the stdout, the trace of tool calls and the
//! resources used.

use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// A resource the sandbox bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    /// Instructions, as wasmtime fuel ([`crate::Limits::fuel`]).
    Fuel,
    /// Linear memory ([`crate::Limits::memory_bytes`]).
    Memory,
    /// Wall time, tool calls included ([`crate::Limits::timeout`]).
    Time,
    /// Bytes printed to stdout ([`crate::Limits::max_output_bytes`]).
    Output,
    /// Tool calls per program ([`crate::Limits::max_host_calls`]).
    HostCalls,
    /// Call depth: Python recursion or the wasm stack.
    Stack,
}

impl Limit {
    /// The bound a trapped guest ran past, if one did: its memory limiter refused to grow
    /// (`memory_exceeded`), or wasmtime stopped it for fuel, its epoch deadline or its stack. `None`: the
    /// trap is the guest's own (a panic, an uncaught exception).
    pub(crate) fn hit_by(error: &wasmtime::Error, memory_exceeded: bool) -> Option<Limit> {
        if memory_exceeded {
            return Some(Limit::Memory);
        }
        match error.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::OutOfFuel) => Some(Limit::Fuel),
            Some(wasmtime::Trap::Interrupt) => Some(Limit::Time),
            Some(wasmtime::Trap::StackOverflow) => Some(Limit::Stack),
            _ => None,
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Fuel => "fuel (instruction budget)",
            Limit::Memory => "memory",
            Limit::Time => "wall time",
            Limit::Output => "stdout size",
            Limit::HostCalls => "number of tool calls",
            Limit::Stack => "call depth (recursion)",
        })
    }
}

/// The kind of a tool's failure, as the WIT contract names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolErrorKind {
    /// No tool has this name.
    UnknownTool,
    /// An argument has the wrong type or an invalid value.
    BadArgument,
    /// The page or section id asked for does not exist.
    NotFound,
    /// The tool itself failed (an index error, a plug-in trap).
    Failed,
}

/// Why a program did not complete. Every variant is the program's doing (or its bound's); problems of
/// the sandbox itself are [`crate::SandboxError`].
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[serde(tag = "error", rename_all = "kebab-case")]
pub enum ProgramError {
    /// The program is not valid Python (of the interpreter's supported subset).
    #[error("syntax error at line {line}, column {column}: {message}")]
    Syntax {
        /// The parser's message.
        message: String,
        /// The 1-based line where parsing failed.
        line: u32,
        /// The 1-based column where parsing failed.
        column: u32,
    },
    /// The program called a name that is neither defined nor a tool.
    #[error("unknown tool or name `{name}`{}", at_line(*line))]
    UnknownTool {
        /// The name called.
        name: String,
        /// The 1-based line where the program used it; 0 when unknown.
        line: u32,
        /// The traceback as CPython formats it (`NameError: name 'x' is not defined`); what the model
        /// sees when it is not empty.
        traceback: String,
    },
    /// A tool call failed and the program did not catch it.
    #[error("tool `{tool}` failed ({tool_error:?}): {message}")]
    ToolFailed {
        /// The tool called.
        tool: String,
        /// Why it failed.
        tool_error: ToolErrorKind,
        /// The tool's message, meant for the model.
        message: String,
    },
    /// The program tried to reach outside the sandbox: a file, a socket, the environment, a disallowed module.
    #[error("forbidden: {message}")]
    Forbidden {
        /// What it tried.
        message: String,
    },
    /// A Python exception nobody caught.
    #[error("uncaught {type_name}: {message}")]
    Exception {
        /// The exception's type, e.g. `ZeroDivisionError`.
        type_name: String,
        /// The exception's message.
        message: String,
        /// The traceback as CPython formats it; what the model sees when it is not empty.
        traceback: String,
    },
    /// The program ran out of a bounded resource.
    #[error("limit exceeded: {limit}")]
    LimitExceeded {
        /// The bound it hit.
        limit: Limit,
    },
    /// The guest component itself failed (a trap that no limit explains): a bug in the guest.
    #[error("the guest component trapped: {message}")]
    GuestTrap {
        /// wasmtime's trap, with the guest's stderr when it wrote any.
        message: String,
    },
}

impl ProgramError {
    /// A short, stable name for the error's kind, for logs and metrics (`syntax`, `limit-exceeded:fuel`…).
    pub fn kind_name(&self) -> String {
        match self {
            ProgramError::Syntax { .. } => "syntax".into(),
            ProgramError::UnknownTool { .. } => "unknown-tool".into(),
            ProgramError::ToolFailed { .. } => "tool-failed".into(),
            ProgramError::Forbidden { .. } => "forbidden".into(),
            ProgramError::Exception { .. } => "exception".into(),
            ProgramError::LimitExceeded { limit } => {
                format!("limit-exceeded:{}", serde_json::to_value(limit).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default())
            }
            ProgramError::GuestTrap { .. } => "guest-trap".into(),
        }
    }
}

/// What a completed program produced besides its stdout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// `repr()` of the value of the last expression, when it is not None.
    pub value: Option<String>,
}

/// One tool call the program made.
#[derive(Debug, Clone, Serialize)]
pub struct HostCall {
    /// The tool's name, as programs call it (`search_pages`, a plug-in's snake_case name).
    pub tool: String,
    /// The arguments: an object of named ones for a wiki tool, the JSON array of positional ones for a plug-in.
    pub args: serde_json::Value,
    /// Serialised as `duration_us` (microseconds).
    #[serde(rename = "duration_us", serialize_with = "micros")]
    pub duration: Duration,
    /// The tool's error, when it failed.
    pub error: Option<String>,
    /// The ids a wiki tool returned, in order: page ids from search_pages, section ids from view_sections
    /// (empty for other tools). Evaluations read search quality from them without asking the index again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub returned_ids: Vec<String>,
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// What the program returned, or why it did not complete.
    pub result: Result<Outcome, ProgramError>,
    /// What the program printed, up to [`crate::Limits::max_output_bytes`].
    pub stdout: String,
    /// Every tool call the program made (wiki and plug-in), in order.
    pub host_calls: Vec<HostCall>,
    /// wasmtime fuel consumed (about one unit per wasm instruction).
    pub fuel_used: u64,
    /// The most linear memory the guest held at once, in bytes.
    pub peak_memory_bytes: usize,
    /// Serialised as `wall_time_us` (microseconds).
    #[serde(rename = "wall_time_us", serialize_with = "micros")]
    pub wall_time: Duration,
}

impl RunReport {
    /// Whether the program completed.
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }

    /// The text a model sees after its program ran: what it printed, the value of its last
    /// expression, and the error if it failed.
    pub fn observation(&self) -> String {
        let mut text = self.stdout.clone();
        match &self.result {
            Ok(Outcome { value: Some(value) }) => {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(value);
            }
            Ok(Outcome { value: None }) => {}
            Err(error) => {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                match error {
                    ProgramError::Exception { traceback, .. } | ProgramError::UnknownTool { traceback, .. } if !traceback.is_empty() => {
                        text.push_str(traceback)
                    }
                    other => text.push_str(&format!("Error: {other}")),
                }
            }
        }
        text
    }
}

fn at_line(line: u32) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" at line {line}")
    }
}

fn micros<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_says_its_line_and_the_model_reads_its_traceback() {
        let traceback = "Traceback (most recent call last):\n  File \"program.py\", line 5, in <module>\n    bst[\"section_id\"]\n    ~~~\nNameError: name 'bst' is not defined";
        let error = ProgramError::UnknownTool { name: "bst".into(), line: 5, traceback: traceback.into() };
        assert_eq!(error.to_string(), "unknown tool or name `bst` at line 5");
        assert_eq!(ProgramError::UnknownTool { name: "x".into(), line: 0, traceback: String::new() }.to_string(), "unknown tool or name `x`");
        let report =
            RunReport { result: Err(error), stdout: "hi".into(), host_calls: Vec::new(), fuel_used: 0, peak_memory_bytes: 0, wall_time: Duration::ZERO };
        assert_eq!(report.observation(), format!("hi\n{traceback}"));
    }
}
