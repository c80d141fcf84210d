//! `agentrt tool new`: a plug-in tool project, ready to build, in Rust, Python or JavaScript. The
//! project carries its own copy of the contract (`wit/deps/agentrt-tools/`), so every toolchain resolves
//! `agentrt:tools` with no path into this repository, and a `build.sh` that pins the toolchain. The
//! files are templates in `tool_templates/`, embedded in the binary.

use super::scaffold::{self, ProjectFile};
use anyhow::bail;
use std::path::PathBuf;

/// The contract every plug-in includes, as the host reads it.
pub(crate) const CONTRACT: &str = include_str!("../../wit/agentrt-tools.wit");

/// The wit-bindgen version a Rust project pins: the one the examples in `guest-tools/` are built with.
const WIT_BINDGEN: &str = "0.57";

/// The build scripts of Python and JavaScript projects (a Python grader of `agentrt env new` too). Each pins its toolchain on its `VERSION=` line,
/// the one place that version is written; the text-tools example in `guest-tools/` is built by the same
/// scripts.
pub(crate) const PYTHON_BUILD: &str = include_str!("tool_templates/python/build.sh");
const JS_BUILD: &str = include_str!("tool_templates/js/build.sh");
/// The lines that resolve OUT.wasm and the cache, the same in every build.sh that installs a toolchain.
pub(crate) const BUILD_PATHS: &str = include_str!("tool_templates/common/build_paths.sh");

/// The toolchain version a build script pins: the value of its `VERSION=` line.
fn pinned_version(build_script: &'static str) -> &'static str {
    build_script.lines().find_map(|line| line.strip_prefix("VERSION=")).expect("a build.sh template pins its toolchain on a `VERSION=` line")
}

/// Arguments of `agentrt tool`.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  agentrt tool new weather --lang python
  agentrt tool new unit-convert --lang rust --dir tools

A plug-in tool is a WebAssembly component of the agentrt:tools/tool world: every function of the
interface it exports becomes a tool that model programs call by name. docs/plugins.md has the contract.")]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

/// What to do with plug-in tools.
#[derive(clap::Subcommand)]
pub enum What {
    /// Create a plug-in tool project (WIT, source, build.sh, README, an example program) in NAME/.
    New(NewArgs),
}

/// Arguments of `agentrt tool new`.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  agentrt tool new weather --lang python         ./weather/ with app.py
  agentrt tool new unit-convert --lang rust --dir tools
  agentrt tool new dates --lang js
  cd weather && ./build.sh && agentrt exec example.py --tool weather.wasm --fixture

NAME/ gets wit/NAME.wit (package local:NAME, interface `tools` with a sample function
`hello: func(name: string) -> result<string, string>`), the contract in wit/deps/agentrt-tools/,
the source, build.sh, README.md, example.py and .gitignore. build.sh builds NAME.wasm (dashes become
underscores) with a pinned toolchain: cargo for wasm32-wasip2 (wit-bindgen 0.57), componentize-py
0.25.1 or componentize-js 0.23.0; the last two are installed on first use into
$AGENTRT_CACHE/toolchains (default ~/.cache/agentrt/toolchains).")]
pub struct NewArgs {
    /// The tool's name, kebab-case: lowercase letters and digits, words joined by `-`, each starting
    /// with a letter (`weather`, `unit-convert`). It names the directory, the WIT package and world.
    pub name: String,
    /// The language to write the tool in.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// Where to create NAME/.
    #[arg(long, value_name = "PARENT", default_value = ".")]
    pub dir: PathBuf,
}

/// A language a plug-in can be written in, with the toolchain that turns it into a component.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    /// Rust with wit-bindgen, built by cargo for wasm32-wasip2.
    Rust,
    /// Python with componentize-py.
    Python,
    /// JavaScript with componentize-js.
    Js,
}

/// One file of a project: its path inside NAME/, its template, and whether it is a script.
struct Template {
    path: &'static str,
    text: &'static str,
    executable: bool,
}

const fn file(path: &'static str, text: &'static str) -> Template {
    Template { path, text, executable: false }
}

const fn script(path: &'static str, text: &'static str) -> Template {
    Template { path, text, executable: true }
}

/// The files every project has, whatever its language.
const COMMON: &[Template] = &[
    file("wit/{{name}}.wit", include_str!("tool_templates/common/tool.wit")),
    file("wit/deps/agentrt-tools/agentrt-tools.wit", CONTRACT),
    file("example.py", include_str!("tool_templates/common/example.py")),
    file(".gitignore", include_str!("tool_templates/common/gitignore")),
];

const RUST: &[Template] = &[
    file("Cargo.toml", include_str!("tool_templates/rust/Cargo.toml")),
    file("src/lib.rs", include_str!("tool_templates/rust/lib.rs")),
    script("build.sh", include_str!("tool_templates/rust/build.sh")),
    file("README.md", include_str!("tool_templates/rust/README.md")),
];

const PYTHON: &[Template] = &[
    file("app.py", include_str!("tool_templates/python/app.py")),
    script("build.sh", PYTHON_BUILD),
    file("README.md", include_str!("tool_templates/python/README.md")),
];

const JS: &[Template] =
    &[file("tool.js", include_str!("tool_templates/js/tool.js")), script("build.sh", JS_BUILD), file("README.md", include_str!("tool_templates/js/README.md"))];

impl Lang {
    fn templates(self) -> &'static [Template] {
        match self {
            Lang::Rust => RUST,
            Lang::Python => PYTHON,
            Lang::Js => JS,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Lang::Rust => "src/lib.rs",
            Lang::Python => "app.py",
            Lang::Js => "tool.js",
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::New(args) => new(args),
    }
}

fn new(args: NewArgs) -> anyhow::Result<()> {
    check_name(&args.name)?;
    let files: Vec<ProjectFile> = COMMON
        .iter()
        .chain(args.lang.templates())
        .map(|t| ProjectFile { path: fill(t.path, &args.name), text: fill(t.text, &args.name), executable: t.executable })
        .collect();
    let root = scaffold::create(&args.dir, &args.name, &files)?;
    let snake = args.name.replace('-', "_");
    let shown = root.display();
    let wit = format!("wit/{}.wit", args.name);
    let rows = [
        (wit.as_str(), "the tool's interface: the functions a model program calls".to_string()),
        (args.lang.source(), "their implementation, plus describe and stateless".to_string()),
        ("build.sh", format!("builds {snake}.wasm with a pinned toolchain")),
        ("example.py", "a program that calls the tool".to_string()),
    ];
    let width = rows.iter().map(|(path, _)| path.len()).max().unwrap_or(0);
    println!("created {shown}/ ({}):", args.lang.label());
    for (path, what) in rows {
        println!("  {path:<width$}  {what}");
    }
    println!("next:\n  cd {shown} && ./build.sh\n  agentrt exec example.py --tool {snake}.wasm --fixture");
    Ok(())
}

/// A template with its placeholders filled in: the tool's name in kebab-case and snake_case, and the
/// pinned toolchain versions.
fn fill(template: &str, name: &str) -> String {
    // The shared lines first: they hold placeholders of their own.
    let build_paths = BUILD_PATHS.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
    template
        .replace("{{build_paths}}", &build_paths)
        .replace("{{world}}", "local:{{name}}/{{name}}@0.1.0")
        .replace("{{name}}", name)
        .replace("{{snake}}", &name.replace('-', "_"))
        .replace("{{wit_bindgen}}", WIT_BINDGEN)
        .replace("{{componentize_py}}", pinned_version(PYTHON_BUILD))
        .replace("{{componentize_js}}", pinned_version(JS_BUILD))
}

/// Words that cannot be the name: it becomes a WIT package and world name, and a Rust crate name.
const KEYWORDS: &[&str] = &[
    // WIT
    "as",
    "async",
    "bool",
    "borrow",
    "char",
    "constructor",
    "enum",
    "export",
    "f32",
    "f64",
    "flags",
    "from",
    "func",
    "future",
    "import",
    "include",
    "interface",
    "list",
    "map",
    "option",
    "own",
    "package",
    "record",
    "resource",
    "result",
    "s8",
    "s16",
    "s32",
    "s64",
    "static",
    "stream",
    "string",
    "tuple",
    "type",
    "u8",
    "u16",
    "u32",
    "u64",
    "use",
    "variant",
    "with",
    "world",
    // Rust (a single word becomes the crate's name)
    "abstract",
    "become",
    "box",
    "break",
    "const",
    "continue",
    "crate",
    "do",
    "dyn",
    "else",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "pub",
    "ref",
    "return",
    "self",
    "struct",
    "super",
    "trait",
    "true",
    "try",
    "typeof",
    "unsafe",
    "unsized",
    "virtual",
    "where",
    "while",
    "yield",
];

/// A name is kebab-case: words of lowercase letters and digits, each starting with a letter (WIT's
/// rule for identifiers), joined by single dashes; and not a keyword.
fn check_name(name: &str) -> anyhow::Result<()> {
    if !scaffold::is_kebab_case(name) {
        bail!(
            "`{name}` is not a valid tool name: use kebab-case, lowercase letters and digits in words joined by `-`, each \
             word starting with a letter (e.g. `weather`, `unit-convert`, `geo2-lookup`)"
        );
    }
    if KEYWORDS.contains(&name) {
        bail!("`{name}` is not a valid tool name: it is a keyword of WIT or Rust; choose another (e.g. `{name}-tool`)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kebab_case_words_that_start_with_a_letter() {
        for good in ["weather", "unit-convert", "geo2-lookup", "a", "x1-y2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Weather", "unit_convert", "-a", "a-", "a--b", "2fa", "a-2b", "über", "a b", "../x", "world", "fn"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_build_scripts_pin_a_version() {
        for script in [PYTHON_BUILD, JS_BUILD] {
            let version = pinned_version(script);
            assert!(!version.is_empty() && version.split('.').all(|part| part.parse::<u32>().is_ok()), "VERSION={version}");
        }
    }

    #[test]
    fn every_placeholder_is_filled() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            for template in COMMON.iter().chain(lang.templates()) {
                let text = fill(template.text, "my-tool");
                assert!(!text.contains("{{"), "{lang:?} {}: a placeholder is left in\n{text}", template.path);
            }
        }
    }
}
