//! Which modules a program may import, and how the guest's own modules are bound.
//!
//! monty ships an `os` module whose calls pause the VM for the host to serve; we serve none of them, but
//! a program that merely imports `os` or `pathlib` should learn at once, before it runs, that the sandbox
//! has no such access. So imports are checked against an allow-list of pure, in-memory modules.
//!
//! Two kinds are allowed: monty's own ([`MONTY_MODULES`]), compiled by monty as written, and the guest's
//! ([`crate::modules::GUEST_MODULES`]: `random`, `copy`, `string`, `hashlib`), which monty does not know.
//! An import of a guest module is rewritten in place, on the same line, into the assignment CPython's
//! import performs: `import random as r` becomes `r = __import__('random')`, and
//! `from random import randint` becomes `randint = __import__('random').randint`; the VM then asks the
//! guest for `__import__` and the module's attributes ([`crate::modules`]). Line numbers do not move, so
//! tracebacks and syntax errors point where the program says.

use crate::bindings::agentrt::tools::types::ProgramError;
use crate::modules;
use ruff_python_ast::visitor::{walk_stmt, Visitor};
use ruff_python_ast::{Alias, Stmt};
use std::borrow::Cow;

/// monty's modules that compute and touch nothing outside the program.
pub const MONTY_MODULES: &[&str] =
    &["math", "re", "json", "collections", "itertools", "functools", "datetime", "typing", "dataclasses", "base64", "binascii", "unicodedata"];

/// What `from M import *` binds for each of monty's modules: CPython 3.11's `__all__` (or public names)
/// of M intersected with the names monty 1.4's M defines (read from both; monty itself refuses
/// wildcard imports). Models write `from typing import *` and `from collections import *` out of habit.
const MONTY_WILDCARD: &[(&str, &[&str])] = &[
    (
        "math",
        &[
            "acos",
            "acosh",
            "asin",
            "asinh",
            "atan",
            "atan2",
            "atanh",
            "cbrt",
            "ceil",
            "comb",
            "copysign",
            "cos",
            "cosh",
            "degrees",
            "dist",
            "e",
            "erf",
            "erfc",
            "exp",
            "exp2",
            "expm1",
            "fabs",
            "factorial",
            "floor",
            "fmod",
            "frexp",
            "fsum",
            "gamma",
            "gcd",
            "hypot",
            "inf",
            "isclose",
            "isfinite",
            "isinf",
            "isnan",
            "isqrt",
            "lcm",
            "ldexp",
            "lgamma",
            "log",
            "log10",
            "log1p",
            "log2",
            "modf",
            "nan",
            "nextafter",
            "perm",
            "pi",
            "pow",
            "prod",
            "radians",
            "remainder",
            "sin",
            "sinh",
            "sqrt",
            "tan",
            "tanh",
            "tau",
            "trunc",
            "ulp",
        ],
    ),
    (
        "re",
        &[
            "A",
            "ASCII",
            "DOTALL",
            "I",
            "IGNORECASE",
            "M",
            "MULTILINE",
            "Match",
            "NOFLAG",
            "Pattern",
            "S",
            "compile",
            "error",
            "escape",
            "findall",
            "finditer",
            "fullmatch",
            "match",
            "search",
            "split",
            "sub",
        ],
    ),
    ("json", &["JSONDecodeError", "dump", "dumps", "load", "loads"]),
    ("collections", &["Counter", "defaultdict", "deque", "namedtuple"]),
    (
        "itertools",
        &[
            "accumulate",
            "chain",
            "combinations",
            "combinations_with_replacement",
            "compress",
            "count",
            "cycle",
            "dropwhile",
            "filterfalse",
            "groupby",
            "islice",
            "pairwise",
            "permutations",
            "product",
            "repeat",
            "starmap",
            "takewhile",
            "tee",
            "zip_longest",
        ],
    ),
    ("functools", &["cache", "lru_cache", "partial", "reduce"]),
    ("datetime", &["date", "datetime", "time", "timedelta", "timezone"]),
    (
        "typing",
        &[
            "Annotated",
            "Any",
            "Callable",
            "ClassVar",
            "Dict",
            "Final",
            "FrozenSet",
            "Generator",
            "Generic",
            "Iterable",
            "Iterator",
            "List",
            "Literal",
            "Mapping",
            "Never",
            "NoReturn",
            "Optional",
            "Protocol",
            "Self",
            "Sequence",
            "Set",
            "TYPE_CHECKING",
            "Tuple",
            "Type",
            "TypeVar",
            "Union",
        ],
    ),
    ("dataclasses", &["FrozenInstanceError", "MISSING", "dataclass", "field", "is_dataclass"]),
    (
        "base64",
        &[
            "a85decode",
            "a85encode",
            "b16decode",
            "b16encode",
            "b32decode",
            "b32encode",
            "b32hexdecode",
            "b32hexencode",
            "b64decode",
            "b64encode",
            "b85decode",
            "b85encode",
            "decodebytes",
            "encodebytes",
            "standard_b64decode",
            "standard_b64encode",
            "urlsafe_b64decode",
            "urlsafe_b64encode",
        ],
    ),
    (
        "binascii",
        &[
            "Error",
            "Incomplete",
            "a2b_base64",
            "a2b_hex",
            "a2b_qp",
            "a2b_uu",
            "b2a_base64",
            "b2a_hex",
            "b2a_qp",
            "b2a_uu",
            "crc32",
            "crc_hqx",
            "hexlify",
            "unhexlify",
        ],
    ),
    ("unicodedata", &["category", "combining", "is_normalized", "lookup", "name", "normalize", "unidata_version"]),
];

/// Every module a program may import, for messages.
pub fn allowed_modules() -> Vec<&'static str> {
    MONTY_MODULES.iter().copied().chain(modules::GUEST_MODULES.iter().map(|(name, _)| *name)).collect()
}

/// Why an import of `module` is refused.
pub fn refusal(module: &str) -> String {
    format!(
        "`import {module}` is not allowed: programs have no filesystem, network, processes or environment. \
         Allowed modules: {}",
        allowed_modules().join(", ")
    )
}

/// Checks a program's imports and binds the guest's modules: refuses a program that imports a module
/// outside the allowed ones, and returns the source with imports of guest modules rewritten (borrowed
/// unchanged when it has none). A program that does not parse passes unchanged: monty reports the
/// syntax error with its position.
pub fn prepare(program: &str) -> Result<Cow<'_, str>, ProgramError> {
    if !program.contains("import") {
        return Ok(Cow::Borrowed(program));
    }
    let Ok(parsed) = ruff_python_parser::parse_module(program) else {
        return Ok(Cow::Borrowed(program));
    };
    let words = program.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).map(String::from).collect();
    let mut finder = ImportFinder { refused: None, edits: Vec::new(), words };
    for stmt in &parsed.syntax().body {
        finder.visit_stmt(stmt);
    }
    if let Some(module) = finder.refused {
        return Err(ProgramError::Forbidden(refusal(&module)));
    }
    if finder.edits.is_empty() {
        return Ok(Cow::Borrowed(program));
    }
    let mut rewritten = String::with_capacity(program.len() + 64 * finder.edits.len());
    let mut at = 0;
    for (start, end, replacement) in finder.edits {
        rewritten.push_str(&program[at..start]);
        rewritten.push_str(&replacement);
        // A statement that spanned lines (a parenthesised import list) keeps its line count.
        rewritten.extend(std::iter::repeat_n('\n', program[start..end].matches('\n').count()));
        at = end;
    }
    rewritten.push_str(&program[at..]);
    Ok(Cow::Owned(rewritten))
}

struct ImportFinder {
    refused: Option<String>,
    /// (start, end, replacement) of each import statement that names a guest module, in source order.
    edits: Vec<(usize, usize, String)>,
    /// Every identifier-like word of the program: a wildcard import binds only the names it uses.
    words: std::collections::HashSet<String>,
}

enum Kind {
    Monty,
    Guest(&'static [&'static str]),
}

impl ImportFinder {
    fn kind(&mut self, dotted: &str) -> Option<Kind> {
        let root = dotted.split('.').next().unwrap_or(dotted);
        if MONTY_MODULES.contains(&root) {
            return Some(Kind::Monty);
        }
        if let Some(exports) = modules::exports(root) {
            return Some(Kind::Guest(exports));
        }
        if self.refused.is_none() {
            self.refused = Some(dotted.to_string());
        }
        None
    }

    fn import(&mut self, start: usize, end: usize, names: &[Alias]) {
        let mut parts = Vec::with_capacity(names.len());
        let mut guest = false;
        for alias in names {
            let name = alias.name.as_str();
            match self.kind(name) {
                None => return,
                Some(Kind::Monty) => parts.push(match &alias.asname {
                    Some(asname) => format!("import {name} as {}", asname.as_str()),
                    None => format!("import {name}"),
                }),
                Some(Kind::Guest(_)) => {
                    guest = true;
                    parts.push(if name.contains('.') {
                        format!("raise ModuleNotFoundError({:?})", format!("No module named '{name}'"))
                    } else {
                        let binding = alias.asname.as_ref().map_or(name, |a| a.as_str());
                        format!("{binding} = __import__('{name}')")
                    });
                }
            }
        }
        if guest {
            self.edits.push((start, end, parts.join("; ")));
        }
    }

    fn import_from(&mut self, start: usize, end: usize, module: &str, names: &[Alias]) {
        let exports = match self.kind(module) {
            Some(Kind::Guest(exports)) => exports,
            Some(Kind::Monty) if names.iter().any(|a| a.name.as_str() == "*") => {
                // As CPython binds them, limited to the names the program mentions (the rest are unused).
                let all = MONTY_WILDCARD.iter().find(|(m, _)| *m == module).map_or(&[][..], |(_, names)| *names);
                let used: Vec<&str> = all.iter().copied().filter(|n| self.words.contains(*n)).collect();
                let replacement = if used.is_empty() { "pass".to_string() } else { format!("from {module} import {}", used.join(", ")) };
                self.edits.push((start, end, replacement));
                return;
            }
            _ => return,
        };
        let parts: Vec<String> = if module.contains('.') {
            vec![format!("raise ModuleNotFoundError({:?})", format!("No module named '{module}'"))]
        } else if names.iter().any(|a| a.name.as_str() == "*") {
            exports.iter().map(|name| format!("{name} = __import__('{module}').{name}")).collect()
        } else {
            names
                .iter()
                .map(|alias| {
                    let name = alias.name.as_str();
                    if exports.contains(&name) {
                        let binding = alias.asname.as_ref().map_or(name, |a| a.as_str());
                        format!("{binding} = __import__('{module}').{name}")
                    } else {
                        let message = format!("cannot import name '{name}' from '{module}' (the sandbox's {module} has: {})", exports.join(", "));
                        format!("raise ImportError({message:?})")
                    }
                })
                .collect()
        };
        self.edits.push((start, end, parts.join("; ")));
    }
}

impl<'a> Visitor<'a> for ImportFinder {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(import) => self.import(import.range.start().to_usize(), import.range.end().to_usize(), &import.names),
            Stmt::ImportFrom(import) => match &import.module {
                Some(module) if import.level == 0 => {
                    self.import_from(import.range.start().to_usize(), import.range.end().to_usize(), module.as_str(), &import.names)
                }
                // Relative imports have no package to come from here.
                _ => {
                    self.kind(".");
                }
            },
            _ => walk_stmt(self, stmt),
        }
    }
}
