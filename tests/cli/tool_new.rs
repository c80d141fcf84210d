//! `agentrt tool new` as a plug-in author runs it: the project it writes for each language, its WIT read
//! as the toolchains read it, and (for Rust, whose toolchain every machine that builds agentrt has) the
//! project built and run in the sandbox.

use std::path::Path;
use std::process::{Command, Output};

fn agentrt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentrt")).args(args).output().expect("running agentrt")
}

fn text(output: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn repo(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// `tool new my-tool --lang LANG` in `parent`; the project's directory.
fn new_project(parent: &Path, lang: &str) -> std::path::PathBuf {
    let output = agentrt(&["tool", "new", "my-tool", "--lang", lang, "--dir", parent.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("./build.sh"), "it says what to do next: {}", text(&output));
    parent.join("my-tool")
}

/// The project's WIT resolves with the contract from `wit/deps/`, as wit-bindgen, componentize-py and
/// componentize-js resolve it, and its world exports the metadata and the sample tool.
fn check_wit(project: &Path) {
    let contract = std::fs::read_to_string(project.join("wit/deps/agentrt-tools/agentrt-tools.wit")).unwrap();
    assert_eq!(contract, repo("wit/agentrt-tools.wit"), "the contract is copied as it is");

    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_dir(project.join("wit")).expect("the project's WIT resolves");
    assert_eq!(resolve.packages[package].name.to_string(), "local:my-tool@0.1.0");
    let world = resolve.select_world(&[package], Some("my-tool")).expect("the world is named after the tool");
    let exports: Vec<String> = resolve.worlds[world].exports.keys().map(|key| resolve.name_world_key(key)).collect();
    assert!(exports.contains(&"agentrt:tools/metadata@0.1.0".to_string()), "{exports:?}");
    assert!(exports.contains(&"local:my-tool/tools@0.1.0".to_string()), "{exports:?}");
    let metadata = resolve.interfaces.iter().find(|(_, i)| i.name.as_deref() == Some("metadata")).unwrap().1;
    assert!(metadata.functions.contains_key("stateless"), "the contract asks plug-ins whether they keep state");
    let tools = resolve.interfaces.iter().find(|(_, i)| i.name.as_deref() == Some("tools")).unwrap().1;
    assert!(tools.functions.contains_key("hello"));
}

fn check_files(project: &Path, lang_files: &[&str]) {
    let common = ["wit/my-tool.wit", "wit/deps/agentrt-tools/agentrt-tools.wit", "example.py", ".gitignore", "build.sh", "README.md"];
    for file in common.iter().chain(lang_files) {
        let path = project.join(file);
        let content = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!content.contains("{{"), "{file}: a template placeholder is left in");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(project.join("build.sh")).unwrap().permissions().mode();
        assert!(mode & 0o100 != 0, "build.sh is executable");
    }
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    assert!(readme.contains("agentrt exec example.py --tool my_tool.wasm"), "{readme}");
}

#[test]
fn python_and_js_projects_hold_their_source_a_pinned_build_and_a_wit_that_resolves() {
    let dir = tempfile::tempdir().unwrap();

    let python = new_project(&dir.path().join("python"), "python");
    check_files(&python, &["app.py"]);
    check_wit(&python);
    let build = std::fs::read_to_string(python.join("build.sh")).unwrap();
    assert!(build.contains("VERSION=0.25.1") && build.contains("-w local:my-tool/my-tool@0.1.0"), "{build}");

    let js = new_project(&dir.path().join("js"), "js");
    check_files(&js, &["tool.js"]);
    check_wit(&js);
    let build = std::fs::read_to_string(js.join("build.sh")).unwrap();
    assert!(build.contains("VERSION=0.23.0") && build.contains("--disable http fetch-event"), "{build}");
    let source = std::fs::read_to_string(js.join("tool.js")).unwrap();
    assert!(source.contains("export const tools") && source.contains("stateless()"), "{source}");
}

#[test]
fn an_existing_directory_or_a_bad_name_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().to_str().unwrap();
    std::fs::create_dir(dir.path().join("taken")).unwrap();
    std::fs::write(dir.path().join("taken/keep.txt"), "mine").unwrap();

    let output = agentrt(&["tool", "new", "taken", "--lang", "python", "--dir", parent]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("already exists"), "{}", text(&output));
    assert_eq!(std::fs::read_to_string(dir.path().join("taken/keep.txt")).unwrap(), "mine");
    assert!(!dir.path().join("taken/build.sh").exists());

    for bad in ["My_Tool", "2fa", "a--b", "world"] {
        let output = agentrt(&["tool", "new", bad, "--lang", "rust", "--dir", parent]);
        assert_eq!(output.status.code(), Some(2), "{bad}: {}", text(&output));
        assert!(text(&output).contains("not a valid tool name"), "{bad}: {}", text(&output));
        assert!(!dir.path().join(bad).exists(), "{bad}");
    }
}

/// `--dir` is made when its parent exists, and refused (nothing made) when the parent is missing: a typo
/// does not grow a whole tree.
#[test]
fn a_dir_whose_parent_is_missing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo/dir");
    let output = agentrt(&["tool", "new", "my-tool", "--lang", "python", "--dir", typo.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let parent = dir.path().join("typo");
    assert!(text(&output).contains(&format!("its parent {} does not exist", parent.display())), "{}", text(&output));
    assert!(!parent.exists(), "the tree was made");

    let fresh = dir.path().join("tools");
    let output = agentrt(&["tool", "new", "my-tool", "--lang", "python", "--dir", fresh.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    assert!(fresh.join("my-tool/build.sh").is_file());
}

#[test]
fn a_rust_project_builds_for_wasm32_wasip2_and_its_tool_runs_in_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let project = new_project(dir.path(), "rust");
    check_files(&project, &["Cargo.toml", "src/lib.rs"]);
    check_wit(&project);

    // The same wit-bindgen as the example plug-in, which the guest workspace builds and tests.
    let wit_bindgen = |manifest: &str| manifest.lines().find(|l| l.starts_with("wit-bindgen")).map(str::to_string);
    let generated = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
    assert_eq!(wit_bindgen(&generated), wit_bindgen(&repo("guest-tools/word-stats-tool/Cargo.toml")));

    // A target directory kept between runs (under this workspace's target/), so only the first run
    // compiles wit-bindgen.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tool-new-rust");
    let build = Command::new(project.join("build.sh")).env("CARGO_TARGET_DIR", &target).output().expect("running build.sh");
    assert!(build.status.success(), "{}", text(&build));
    let wasm = project.join("my_tool.wasm");
    assert!(wasm.exists(), "build.sh puts the component beside itself");

    let output = agentrt(&["exec", project.join("example.py").to_str().unwrap(), "--tool", wasm.to_str().unwrap(), "--fixture"]);
    let report = text(&output);
    assert!(output.status.success(), "{report}");
    assert!(report.contains("Hello, world!"), "{report}");
    assert!(report.contains("caught: hello: name must not be empty"), "an Err is a RuntimeError the program catches: {report}");
}
