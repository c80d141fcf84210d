//! Turns monty's exceptions into the typed `program-error` of the WIT contract.

use crate::bindings::agentrt::tools::types::{Limit, ProgramError, SyntaxError, ToolErrorKind, UncaughtException, UnknownName};
use crate::tools;
use monty_types::{ExcType, MontyException};

/// An error raised before the program ran: a syntax error, or an import refused by the compiler.
pub fn from_exception(exc: MontyException) -> ProgramError {
    if exc.exc_type() == ExcType::SyntaxError {
        let (line, column) = exc.traceback().last().map(|f| (f.start.line, f.start.column)).unwrap_or((0, 0));
        return ProgramError::Syntax(SyntaxError { message: exc.message().unwrap_or("invalid syntax").to_string(), line, column });
    }
    from_uncaught(exc, &[])
}

/// An exception the program did not catch. `unknown_names` are the names the program used that are
/// neither defined nor tools.
pub fn from_uncaught(exc: MontyException, unknown_names: &[String]) -> ProgramError {
    if let Some(tool_error) = tools::take_raised_tool_error(&exc) {
        return match tool_error.kind {
            ToolErrorKind::UnknownTool => unknown_name(tool_error.tool, &exc),
            _ => ProgramError::ToolFailed(tool_error),
        };
    }
    match exc.exc_type() {
        ExcType::SyntaxError => from_exception(exc),
        ExcType::RecursionError => ProgramError::LimitExceeded(Limit::Stack),
        ExcType::MemoryError => ProgramError::LimitExceeded(Limit::Memory),
        ExcType::ModuleNotFoundError | ExcType::ImportError => ProgramError::Forbidden(exc.message().unwrap_or("import refused").to_string()),
        ExcType::NameError => match unknown_names.iter().find(|n| exc.message().is_some_and(|m| m.contains(n.as_str()))) {
            Some(name) => unknown_name(name.clone(), &exc),
            None => uncaught(exc),
        },
        _ => uncaught(exc),
    }
}

/// An unknown name, with the line that used it and a traceback like any other exception's: CPython's
/// `NameError: name 'x' is not defined`.
fn unknown_name(name: String, exc: &MontyException) -> ProgramError {
    let line = exc.traceback().last().map(|f| f.start.line).unwrap_or(0);
    let traceback = MontyException::with_traceback(ExcType::NameError, Some(format!("name '{name}' is not defined")), exc.traceback().to_vec()).to_string();
    ProgramError::UnknownTool(UnknownName { name, line, traceback })
}

fn uncaught(exc: MontyException) -> ProgramError {
    ProgramError::Exception(UncaughtException {
        type_name: exc.exc_type().to_string(),
        message: exc.message().unwrap_or_default().to_string(),
        traceback: exc.to_string(),
    })
}
