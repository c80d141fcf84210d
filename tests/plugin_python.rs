//! The Python example plug-in (guest-tools/text-tools/python), built here with componentize-py exactly as
//! docs/plugins.md says (its build.sh installs the pinned componentize-py from PyPI when it is missing),
//! called from a program through every function: strings, records, lists, options, results and negative
//! integers cross the WIT boundary both ways; a Python exception reaches the program and the model with
//! its message and without wasm frames; the stateless plug-in serves many calls from one instance.

use agentrt_runtime::{FixtureTools, ProgramError, Sandbox, SandboxConfig};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn build_python_example(out_dir: &Path) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("guest-tools/text-tools/python/build.sh");
    let wasm = out_dir.join("text_tools_py.wasm");
    let output = Command::new("bash").arg(&script).arg(&wasm).output().expect("running build.sh");
    assert!(output.status.success(), "{} failed:\n{}\n{}", script.display(), String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(wasm.is_file(), "build.sh wrote no {}", wasm.display());
    wasm
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_example_plugin_round_trips_every_kind_of_value() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = build_python_example(dir.path());
    let config = SandboxConfig { plugins: vec![wasm], ..SandboxConfig::default() };
    let sandbox = Sandbox::new(config, Arc::new(FixtureTools::default())).await.expect("loading the Python plug-in");
    let names: Vec<String> = sandbox.plugins().signatures().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["explode", "first_integer", "repeat", "shift", "word_count", "words"]);
    assert_eq!(sandbox.plugins().signature("shift").unwrap().params, ["numbers", "delta"]);
    assert!(sandbox.plugins().signature("words").unwrap().doc.contains("position"));
    assert_eq!(sandbox.plugins().reuses_instances("words"), Some(true), "app.py declares itself stateless");

    let program = r#"print(word_count("It's a tool, in Python."))
print(words("to be"))
print(first_integer("from -42 to 7"), first_integer("no digits"))
print(shift([1, -2, 9007199254740993], -10))
print(repeat(text="ab", times=3))
try:
    repeat("ab", -1)
except Exception as e:
    print(type(e).__name__, e)
"#;
    let report = sandbox.run(program).await;
    assert!(report.is_ok(), "{:?}\n{}", report.result, report.stdout);
    assert_eq!(
        report.stdout,
        "5\n\
         [{'end': 2, 'start': 0, 'word': 'to'}, {'end': 5, 'start': 3, 'word': 'be'}]\n\
         -42 None\n\
         [-9, -12, 9007199254740983]\n\
         ababab\n\
         RuntimeError repeat: times must be from 0 to 100, got -1\n"
    );
    assert_eq!(report.host_calls.len(), 7);
    assert_eq!(sandbox.plugins().instances_started("words"), Some(1), "seven calls, one warm instance");

    // A Python exception: the program gets the tool's name and the exception's message, no wasm frames.
    let report = sandbox.run("explode('kaboom: the plug-in raised')").await;
    let Err(ProgramError::ToolFailed { tool, message, .. }) = &report.result else { panic!("expected a tool failure, got {:?}", report.result) };
    assert_eq!(tool, "explode");
    assert!(message.contains("kaboom: the plug-in raised") && message.contains("ValueError"), "{message}");
    assert!(message.contains("text_tools_py.wasm crashed"), "{message}");
    assert!(!message.contains("0x") && !message.contains("wasm backtrace"), "wasm frames in: {message}");
    let observation = report.observation();
    assert!(observation.contains("kaboom: the plug-in raised") && observation.contains("explode"), "{observation}");

    // The crashed instance is dropped; the next call starts a fresh one and works.
    let report = sandbox.run("print(word_count('still here'))").await;
    assert_eq!(report.stdout, "2\n", "{:?}", report.result);
    assert_eq!(sandbox.plugins().instances_started("words"), Some(2));
}
