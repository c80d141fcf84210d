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

/// An error raised while compiling `source`: as [`from_exception`], except that a syntax error with a
/// bracket left open before it is reported as CPython reports it, `'(' was never closed` at that bracket
/// (monty's parser says where it gave up, on a later line, which sends the reader to the wrong line).
pub fn from_compile_error(exc: MontyException, source: &str) -> ProgramError {
    match from_exception(exc) {
        ProgramError::Syntax(e) => match unclosed_bracket(source) {
            Some((open, line, column)) if line < e.line || e.line == 0 => {
                ProgramError::Syntax(SyntaxError { message: format!("'{open}' was never closed"), line, column })
            }
            _ => ProgramError::Syntax(e),
        },
        other => other,
    }
}

/// The innermost bracket of `source` left open at its end (the one CPython names), with its 1-based line and column, reading past
/// strings (single, double and triple quoted) and comments; `None` when every bracket closes (or a
/// closing one has no opener, or a one-line string is not closed: other errors, reported as they are).
fn unclosed_bracket(source: &str) -> Option<(char, u32, u32)> {
    let chars: Vec<char> = source.chars().collect();
    let mut open: Vec<(char, u32, u32)> = Vec::new();
    let mut at = Cursor { i: 0, line: 1, column: 1 };
    while let Some(&c) = chars.get(at.i) {
        match c {
            '#' => {
                while chars.get(at.i).is_some_and(|&c| c != '\n') {
                    at.step(&chars);
                }
            }
            '\'' | '"' => {
                let triple = chars.get(at.i + 1) == Some(&c) && chars.get(at.i + 2) == Some(&c);
                let quote = if triple { 3 } else { 1 };
                let closes = |i: usize| (0..quote).all(|k| chars.get(i + k) == Some(&c));
                (0..quote).for_each(|_| at.step(&chars));
                loop {
                    match chars.get(at.i) {
                        None => break,
                        Some('\\') => {
                            at.step(&chars);
                            at.step(&chars);
                        }
                        Some(_) if closes(at.i) => {
                            (0..quote).for_each(|_| at.step(&chars));
                            break;
                        }
                        Some('\n') if !triple => return None,
                        Some(_) => at.step(&chars),
                    }
                }
            }
            '(' | '[' | '{' => {
                open.push((c, at.line, at.column));
                at.step(&chars);
            }
            ')' | ']' | '}' => {
                let opener = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                if open.pop().map(|(o, ..)| o) != Some(opener) {
                    return None;
                }
                at.step(&chars);
            }
            _ => at.step(&chars),
        }
    }
    open.last().copied()
}

/// Where [`unclosed_bracket`] reads: an index into the characters, and its 1-based line and column.
struct Cursor {
    i: usize,
    line: u32,
    column: u32,
}

impl Cursor {
    /// Moves past the character at the cursor (if any).
    fn step(&mut self, chars: &[char]) {
        match chars.get(self.i) {
            Some('\n') => {
                self.line += 1;
                self.column = 1;
            }
            Some(_) => self.column += 1,
            None => return,
        }
        self.i += 1;
    }
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
