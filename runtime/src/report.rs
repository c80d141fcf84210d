//! What a run produced: the outcome or a typed error, the stdout, the trace of tool calls and the
//! resources used.

use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// A resource the sandbox bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    Fuel,
    Memory,
    Time,
    Output,
    HostCalls,
    Stack,
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
    UnknownTool,
    BadArgument,
    NotFound,
    Failed,
}

/// Why a program did not complete. Every variant is the program's doing (or its bound's); problems of
/// the sandbox itself are [`crate::SandboxError`].
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[serde(tag = "error", rename_all = "kebab-case")]
pub enum ProgramError {
    #[error("syntax error at line {line}, column {column}: {message}")]
    Syntax { message: String, line: u32, column: u32 },
    #[error("unknown tool or name `{name}`")]
    UnknownTool { name: String },
    #[error("tool `{tool}` failed ({tool_error:?}): {message}")]
    ToolFailed { tool: String, tool_error: ToolErrorKind, message: String },
    #[error("forbidden: {message}")]
    Forbidden { message: String },
    #[error("uncaught {type_name}: {message}")]
    Exception { type_name: String, message: String, traceback: String },
    #[error("limit exceeded: {limit}")]
    LimitExceeded { limit: Limit },
    /// The guest component itself failed (a trap that no limit explains): a bug in the guest.
    #[error("the guest component trapped: {message}")]
    GuestTrap { message: String },
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
    pub tool: String,
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
    pub result: Result<Outcome, ProgramError>,
    pub stdout: String,
    pub host_calls: Vec<HostCall>,
    pub fuel_used: u64,
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
                    ProgramError::Exception { traceback, .. } if !traceback.is_empty() => text.push_str(traceback),
                    other => text.push_str(&format!("Error: {other}")),
                }
            }
        }
        text
    }
}

fn micros<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_micros() as u64)
}
