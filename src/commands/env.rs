//! `agentrt env new`: an environment package, ready to evaluate and train once its grader is built: a
//! manifest, a few tasks, a system prompt and a grader component in Python with its pinned build. The
//! files are templates in `env_templates/`, embedded in the binary; the grader's build script is the
//! Python plug-in tools' (one toolchain pin for both).

use super::tool::{make_executable, BUILD_PATHS, CONTRACT, PYTHON_BUILD};
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};

/// Arguments of `agentrt env`.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  agentrt env new arithmetic
  agentrt env new trivia --dir environments

An environment package is a folder with an environment.toml: its tasks, prompt, reply grammar, tools
and grader. `--env DIR` plays it in eval, train and trajectories. docs/environments.md walks through one.")]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

/// What to do with environment packages.
#[derive(clap::Subcommand)]
pub enum What {
    /// Create an environment package (manifest, tasks, prompt, Python grader) in NAME/.
    New(NewArgs),
}

/// Arguments of `agentrt env new`.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  agentrt env new arithmetic
  cd arithmetic && ./grader/build.sh && agentrt eval --env . --num-samples 0

NAME/ gets environment.toml (the manifest), tasks.jsonl (six arithmetic tasks: replace them with
yours), prompt.md, grader/app.py (a grader component: the answer inside <answer>...</answer> against the
task's `answer`), grader/build.sh (builds grader/grader.wasm with componentize-py, installed on first use into
$AGENTRT_CACHE/toolchains), grader/wit/ (the contract), README.md and .gitignore.")]
pub struct NewArgs {
    /// The environment's name, kebab-case (`arithmetic`, `unit-convert`): it names the folder.
    pub name: String,
    /// Where to create NAME/.
    #[arg(long, value_name = "PARENT", default_value = ".")]
    pub dir: PathBuf,
}

/// One file of a package: its path inside NAME/, its text, and whether it is a script.
struct Template {
    path: &'static str,
    text: String,
    executable: bool,
}

/// The package's files, with the name filled in.
fn templates(name: &str) -> Vec<Template> {
    let fill = |text: &str| text.replace("{{name}}", name);
    let file = |path: &'static str, text: &str| Template { path, text: fill(text), executable: false };
    // The Python tools' build script, building the grader world into grader/grader.wasm.
    let build_paths = BUILD_PATHS.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
    let build = PYTHON_BUILD
        .replace("Builds the {{name}} plug-in", "Builds the {{name}} environment's grader")
        .replace("{{build_paths}}", &build_paths)
        .replace("{{world}}", "agentrt:tools/grader@0.1.0")
        .replace("{{snake}}", "grader");
    vec![
        file("environment.toml", include_str!("env_templates/environment.toml")),
        file("tasks.jsonl", include_str!("env_templates/tasks.jsonl")),
        file("prompt.md", include_str!("env_templates/prompt.md")),
        file("README.md", include_str!("env_templates/README.md")),
        file(".gitignore", include_str!("env_templates/gitignore")),
        file("grader/app.py", include_str!("env_templates/grader/app.py")),
        file("grader/wit/agentrt-tools.wit", CONTRACT),
        Template { path: "grader/build.sh", text: fill(&build), executable: true },
    ]
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::New(args) => new(args),
    }
}

fn new(args: NewArgs) -> anyhow::Result<()> {
    check_name(&args.name)?;
    let root = args.dir.join(&args.name);
    if !args.dir.is_dir() {
        bail!("--dir {}: not a folder (nothing was written)", args.dir.display());
    }
    // create_dir, not create_dir_all: it fails on anything already there, so nothing is ever overwritten.
    if let Err(error) = std::fs::create_dir(&root) {
        if error.kind() == std::io::ErrorKind::AlreadyExists {
            bail!("{} already exists; choose another NAME or --dir (nothing was written)", root.display());
        }
        return Err(error).with_context(|| format!("creating {}", root.display()));
    }
    if let Err(error) = write_package(&root, &args.name) {
        // The folder is ours: leave nothing half-made behind.
        let _ = std::fs::remove_dir_all(&root);
        return Err(error);
    }
    let shown = root.display();
    println!("created {shown}/:");
    for (path, what) in [
        ("environment.toml", "the manifest: tasks, splits, prompt, reply grammar, tools, grader"),
        ("tasks.jsonl", "six arithmetic tasks: replace them with yours"),
        ("prompt.md", "the system prompt"),
        ("grader/app.py", "the grader component: grade(task, answer)"),
    ] {
        println!("  {path:<16}  {what}");
    }
    println!("next:\n  {shown}/grader/build.sh\n  agentrt eval --env {shown} --num-samples 0\n  agentrt train --env {shown} --max-steps 10");
    Ok(())
}

fn write_package(root: &Path, name: &str) -> anyhow::Result<()> {
    for template in templates(name) {
        let path = root.join(template.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &template.text).with_context(|| format!("writing {}", path.display()))?;
        if template.executable {
            make_executable(&path)?;
        }
    }
    Ok(())
}

/// An environment's name: kebab-case words (it names a folder and appears in logs).
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.split('-').all(|word| word.starts_with(|c: char| c.is_ascii_lowercase()) && word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    if !ok {
        bail!("`{name}` is not a valid environment name: use kebab-case, lowercase letters and digits in words joined by `-`, each starting with a letter");
    }
    if ["wiki", "code"].contains(&name) {
        bail!("`{name}` is a built-in environment's name; choose another");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled_and_the_manifest_reads() {
        let dir = tempfile::tempdir().unwrap();
        new(NewArgs { name: "sums".into(), dir: dir.path().to_path_buf() }).unwrap();
        let root = dir.path().join("sums");
        for t in templates("sums") {
            assert!(!t.text.contains("{{"), "{} keeps a placeholder", t.path);
            assert!(root.join(t.path).is_file(), "{}", t.path);
        }
        let build = std::fs::read_to_string(root.join("grader/build.sh")).unwrap();
        assert!(build.contains("-w agentrt:tools/grader@0.1.0") && build.contains("$here/grader.wasm"), "{build}");
        let manifest = agentrt_environments::package::Manifest::read(&root).unwrap();
        assert_eq!((manifest.name.as_str(), manifest.grader.kind.as_str()), ("sums", "component"));
        let again = new(NewArgs { name: "sums".into(), dir: dir.path().to_path_buf() }).unwrap_err().to_string();
        assert!(again.contains("already exists"), "{again}");
        assert!(check_name("wiki").is_err() && check_name("Sums").is_err() && check_name("unit-convert").is_ok());
    }
}
