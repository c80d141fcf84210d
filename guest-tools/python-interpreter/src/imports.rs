//! Which modules a program may import.
//!
//! monty ships an `os` module whose calls pause the VM for the host to serve; we serve none of them, but
//! a program that merely imports `os` or `pathlib` should learn at once, before it runs, that the sandbox
//! has no such access. So imports are checked against an allow-list of pure, in-memory modules.

use crate::bindings::agentrt::tools::types::ProgramError;
use ruff_python_ast::visitor::{walk_stmt, Visitor};
use ruff_python_ast::Stmt;

/// Modules that compute and touch nothing outside the program.
pub const ALLOWED_MODULES: &[&str] = &[
    "math", "re", "json", "collections", "itertools", "functools", "datetime", "typing", "dataclasses",
    "base64", "binascii", "unicodedata", "string",
];

/// Refuses a program that imports a module outside [`ALLOWED_MODULES`]. A program that does not parse
/// passes: monty reports the syntax error with its position.
pub fn check(program: &str) -> Result<(), ProgramError> {
    if !program.contains("import") {
        return Ok(());
    }
    let Ok(parsed) = ruff_python_parser::parse_module(program) else { return Ok(()) };
    let mut finder = ImportFinder { refused: None };
    for stmt in &parsed.syntax().body {
        finder.visit_stmt(stmt);
    }
    match finder.refused {
        None => Ok(()),
        Some(module) => Err(ProgramError::Forbidden(format!(
            "`import {module}` is not allowed: programs have no filesystem, network, processes or \
             environment. Allowed modules: {}",
            ALLOWED_MODULES.join(", ")
        ))),
    }
}

struct ImportFinder {
    refused: Option<String>,
}

impl ImportFinder {
    fn consider(&mut self, dotted: &str) {
        let root = dotted.split('.').next().unwrap_or(dotted);
        if self.refused.is_none() && !ALLOWED_MODULES.contains(&root) {
            self.refused = Some(dotted.to_string());
        }
    }
}

impl<'a> Visitor<'a> for ImportFinder {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(import) => {
                for alias in &import.names {
                    self.consider(alias.name.as_str());
                }
            }
            Stmt::ImportFrom(import) => match &import.module {
                Some(module) if import.level == 0 => self.consider(module.as_str()),
                // Relative imports have no package to come from here.
                _ => self.consider("."),
            },
            _ => walk_stmt(self, stmt),
        }
    }
}
