//! `agentrt env new`: an environment package, ready to evaluate and train once its grader is built: a
//! manifest, a few tasks, a system prompt and a grader component in Python with its pinned build. The
//! files are templates in `env_templates/`, embedded in the binary; the grader's build script is the
//! Python plug-in tools' (one toolchain pin for both).

use super::scaffold::{self, ProjectFile};
use super::tool::{BUILD_PATHS, CONTRACT, PYTHON_BUILD};
use anyhow::bail;
use std::path::PathBuf;

/// `agentrt env --help`'s examples.
pub const EXAMPLES: &str = "\
Examples:
  agentrt env new arithmetic
  agentrt env new trivia --dir environments

An environment package is a folder with an environment.toml: its tasks, prompt, reply grammar, tools
and grader. `--env DIR` plays it in eval, train and trajectories sample. docs/environments.md walks
through one.";

/// What to do with environment packages (`agentrt env ...`).
#[derive(clap::Subcommand)]
pub enum EnvCommand {
    /// Create an environment package (manifest, tasks, prompt, Python grader) in NAME/.
    #[command(after_help = "\
Examples:
  agentrt env new arithmetic
  agentrt env new trivia --dir environments
  cd arithmetic && ./grader/build.sh && agentrt eval --env . --num-samples 0

NAME/ gets environment.toml (the manifest), tasks.jsonl (six arithmetic tasks: replace them with
yours), prompt.md, grader/app.py (a grader component: the answer inside <answer>...</answer> against the
task's `answer`), grader/build.sh (builds grader/grader.wasm with componentize-py, installed on first
use into $AGENTRT_CACHE/toolchains), grader/wit/ (the contract), README.md and .gitignore. `--env DIR`
plays a package in eval and train; docs/environments.md walks through one.")]
    New {
        /// The environment's name, kebab-case (`arithmetic`, `unit-convert`): it names the folder.
        name: String,
        /// Where to create NAME/.
        #[arg(long, value_name = "PARENT", default_value = ".")]
        dir: PathBuf,
    },
}

/// The package's files, with the name filled in.
fn templates(name: &str) -> Vec<ProjectFile> {
    let file = |path: &str, text: &str| ProjectFile { path: path.into(), text: text.replace("{{name}}", name), executable: false };
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
        ProjectFile { executable: true, ..file("grader/build.sh", &build) },
    ]
}

pub fn run(command: EnvCommand) -> anyhow::Result<()> {
    match command {
        EnvCommand::New { name, dir } => new(&name, &dir),
    }
}

fn new(name: &str, dir: &std::path::Path) -> anyhow::Result<()> {
    check_name(name)?;
    let root = scaffold::create(dir, name, &templates(name))?;
    let shown = root.display();
    println!("created {shown}/:");
    for (path, what) in [
        ("environment.toml", "the manifest: tasks, splits, prompt, reply grammar, tools, grader"),
        ("tasks.jsonl", "six arithmetic tasks: replace them with yours"),
        ("prompt.md", "the system prompt"),
        ("grader/app.py", "the grader component: grade(task, answer)"),
        ("grader/build.sh", "builds grader/grader.wasm with a pinned componentize-py"),
    ] {
        println!("  {path:<16}  {what}");
    }
    println!("next:\n  {shown}/grader/build.sh\n  agentrt eval --env {shown} --num-samples 0\n  agentrt train --env {shown} --max-steps 10");
    Ok(())
}

/// An environment's name: kebab-case words (it names a folder and appears in logs), not a built-in one's.
fn check_name(name: &str) -> anyhow::Result<()> {
    if !scaffold::is_kebab_case(name) {
        bail!("`{name}` is not a valid environment name: use kebab-case, lowercase letters and digits in words joined by `-`, each starting with a letter");
    }
    if agentrt_environments::BUILT_IN.contains(&name) {
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
        new("sums", dir.path()).unwrap();
        let root = dir.path().join("sums");
        for t in templates("sums") {
            assert!(!t.text.contains("{{"), "{} keeps a placeholder", t.path);
            assert!(root.join(&t.path).is_file(), "{}", t.path);
        }
        let build = std::fs::read_to_string(root.join("grader/build.sh")).unwrap();
        assert!(build.contains("-w agentrt:tools/grader@0.1.0") && build.contains("$here/grader.wasm"), "{build}");
        let manifest = agentrt_environments::package::Manifest::read(&root).unwrap();
        assert_eq!((manifest.name.as_str(), manifest.grader.kind.as_str()), ("sums", "component"));
        let again = new("sums", dir.path()).unwrap_err().to_string();
        assert!(again.contains("already exists"), "{again}");
        assert!(check_name("wiki").is_err() && check_name("Sums").is_err() && check_name("unit-convert").is_ok());
    }
}
