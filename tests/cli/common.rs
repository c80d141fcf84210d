//! What the CLI tests share: the binary, the fixture questions and a short `agentrt train` on a tiny model;
//! plug-ins built by their build scripts or by hand, and a sandbox that loads one.

use agentrt_runtime::{FixtureTools, ProgramError, Sandbox, SandboxConfig, SandboxError};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// The `agentrt` binary of this build, as a command to add arguments to.
pub fn agentrt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentrt"))
}

/// Runs `command` to its end, which must succeed; its stdout.
pub fn succeed(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(out.status.success(), "{command:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `agentrt ARGS`, which must succeed; its stdout.
pub fn run_ok<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    succeed(agentrt().args(args))
}

/// The rows of a JSON-lines file; a line that does not parse is named with the file.
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{} line {}: {e}", path.display(), i + 1)))
        .collect()
}

/// A JSON file's value.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A run's `metrics.jsonl`, one value a step.
pub fn metrics(run: &Path) -> Vec<serde_json::Value> {
    read_jsonl(&run.join("metrics.jsonl"))
}

/// A run killed with SIGKILL at an arbitrary point after its second checkpoint, then resumed: `agentrt
/// START` writes the run directory `run` (with more steps than it can reach), and `agentrt RESUME`, which
/// must succeed, resumes it to `steps` steps. Each step is then in metrics.jsonl once, in order, and no
/// half-written file is left. Returns the resumption's stdout and the run's metrics.
pub fn kill_nine_then_resume(start: &[String], resume: &[String], run: &Path, steps: u64) -> (String, Vec<serde_json::Value>) {
    let mut child = agentrt().args(start).stderr(std::process::Stdio::null()).spawn().unwrap();
    let started = std::time::Instant::now();
    while !run.join("checkpoint-2").join("trainer_state.json").exists() {
        assert!(started.elapsed().as_secs() < 300, "no checkpoint-2 after 5 minutes");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let stdout = run_ok(resume);
    let metrics = metrics(run);
    assert_eq!(metrics.iter().map(|l| l["step"].as_u64().unwrap()).collect::<Vec<_>>(), (1..=steps).collect::<Vec<_>>(), "each step once, in order");
    for entry in std::fs::read_dir(run).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        assert!(!name.ends_with(".partial") && !name.ends_with(".tmp"), "left over in {}: {name}", run.display());
    }
    (stdout, metrics)
}

/// Sets the value of `flag` in `args`, which must hold it (clap refuses a flag given twice, so a later one
/// cannot override it).
pub fn set_flag(args: &mut [String], flag: &str, value: &str) {
    let at = args.iter().position(|a| a == flag).unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    args[at + 1] = value.to_string();
}

/// A tiny random model in `dir`, as a safetensors directory.
pub fn tiny_model(dir: &Path) -> PathBuf {
    agentrt_policy::tiny::tiny_model_dir(dir).unwrap()
}

/// Three train-split questions about the fixture corpus (its pages: denver_broncos, paris, oxygen).
pub fn questions(dir: &Path) -> PathBuf {
    let p = dir.join("questions.jsonl");
    let rows = [
        r#"{"id": "q1", "question": "Who did the Broncos defeat in Super Bowl 50?", "answer": "Carolina Panthers", "page": "denver_broncos", "split": "train"}"#,
        r#"{"id": "q2", "question": "What is the capital of France?", "answer": "Paris", "page": "paris", "split": "train"}"#,
        r#"{"id": "q3", "question": "Who discovered oxygen?", "answer": "Carl Wilhelm Scheele", "page": "oxygen", "split": "train"}"#,
    ];
    std::fs::write(&p, rows.join("\n")).unwrap();
    p
}

/// `agentrt train` on the fixture tools: `steps` steps of 2 questions x 2 rollouts, short replies, a
/// checkpoint every step.
pub fn train_args(model: &Path, questions: &Path, out: &Path, name: &str, steps: usize) -> Vec<String> {
    let (questions, steps) = (format!("env.wiki.questions={}", questions.display()), steps.to_string());
    let flags: [&[&str]; 4] = [
        &["train", "--fixture", "--no-progress", "--model", model.to_str().unwrap(), "--set", &questions, "--max-steps", &steps],
        &["--num-rollouts", "2", "--batch-size", "2", "--advantage", "reinforce", "--lr", "1e-2", "--set", "run.save_steps=1"],
        &["--set", "rollout.max_new_tokens=16", "--set", "rollout.max_turns=2"],
        &["--output-dir", out.to_str().unwrap(), "--run-name", name],
    ];
    flags.concat().into_iter().map(String::from).collect()
}

/// What a hand-written plug-in's `metadata.describe()` does.
pub enum Describe<'a> {
    /// Lists these tools, each with a one-line description.
    Lists(&'a [&'a str]),
    /// Traps at once: a plug-in with a bug in its start.
    Traps,
}

/// A plug-in component written by hand (in WAT) in `dir`: its `metadata.describe()` does what `describe`
/// says, and its interface `local:hand/tools@0.1.0` exports `exported`, each a `func() -> u32` that returns 7.
pub fn hand_written_plugin(dir: &Path, file: &str, describe: Describe, exported: &[&str]) -> PathBuf {
    let (described, describe_body): (&[&str], &str) = match describe {
        Describe::Lists(names) => (names, "(i32.const 16)"),
        Describe::Traps => (&[], "unreachable"),
    };
    // Linear memory: describe's return area (the list's pointer and length) at 16, the list's records
    // (name and description, each a pointer and a length) at 512, their strings from 1024.
    let (mut records, mut strings) = (Vec::<u8>::new(), Vec::<u8>::new());
    for name in described {
        for text in [name.to_string(), format!("-> int: {name}, by hand")] {
            records.extend((1024 + strings.len() as u32).to_le_bytes());
            records.extend((text.len() as u32).to_le_bytes());
            strings.extend(text.as_bytes());
        }
    }
    let list = [512u32.to_le_bytes(), (described.len() as u32).to_le_bytes()].concat();
    let data = |bytes: &[u8]| bytes.iter().map(|b| format!("\\{b:02x}")).collect::<String>();
    let core_funcs: String = exported.iter().map(|t| format!(r#"(func (export "{t}") (result i32) (i32.const 7))"#)).collect();
    let lifted: String = exported.iter().enumerate().map(|(i, t)| format!(r#"(func $tool{i} (result u32) (canon lift (core func $core "{t}")))"#)).collect();
    let exports: String = exported.iter().enumerate().map(|(i, t)| format!(r#"(export "{t}" (func $tool{i}))"#)).collect();
    let wat = format!(
        r#"(component
  (core module $m
    (memory (export "memory") 1)
    (data (i32.const 16) "{list}")
    (data (i32.const 512) "{records}")
    (data (i32.const 1024) "{strings}")
    (func (export "describe") (result i32) {describe_body})
    (func (export "stateless") (result i32) (i32.const 1))
    {core_funcs})
  (core instance $core (instantiate $m))
  (type $doc (record (field "name" string) (field "description" string)))
  (func $describe (result (list $doc)) (canon lift (core func $core "describe") (memory (core memory $core "memory"))))
  (func $stateless (result bool) (canon lift (core func $core "stateless")))
  (component $metadata
    (type $doc-def (record (field "name" string) (field "description" string)))
    (import "import-type-tool-doc" (type $doc (eq $doc-def)))
    (import "import-func-describe" (func $describe (result (list $doc))))
    (import "import-func-stateless" (func $stateless (result bool)))
    (export $doc-out "tool-doc" (type $doc))
    (type $describe-type (func (result (list $doc-out))))
    (export "describe" (func $describe) (func (type $describe-type)))
    (export "stateless" (func $stateless)))
  (instance $meta (instantiate $metadata
    (with "import-type-tool-doc" (type $doc))
    (with "import-func-describe" (func $describe))
    (with "import-func-stateless" (func $stateless))))
  (export "agentrt:tools/metadata@0.1.0" (instance $meta))
  {lifted}
  (instance $tools {exports})
  (export "local:hand/tools@0.1.0" (instance $tools)))"#,
        list = data(&list),
        records = data(&records),
        strings = data(&strings),
    );
    let path = dir.join(file);
    std::fs::write(&path, wat::parse_str(&wat).unwrap_or_else(|e| panic!("{e}\n{wat}"))).unwrap();
    path
}

/// A sandbox on the fixture tools with the plug-in `wasm` loaded, or why it was refused.
pub async fn load_plugin(wasm: PathBuf) -> Result<Sandbox, SandboxError> {
    Sandbox::new(SandboxConfig { plugins: vec![wasm], ..SandboxConfig::default() }, Arc::new(FixtureTools::default())).await
}

/// A sandbox on the fixture tools with the plug-in `wasm` loaded.
pub async fn sandbox_with_plugin(wasm: PathBuf) -> Sandbox {
    let shown = wasm.display().to_string();
    load_plugin(wasm).await.unwrap_or_else(|e| panic!("loading the plug-in {shown}: {e}"))
}

/// Runs `bash SCRIPT ARGS... WASM`, a plug-in's build script; the component it wrote.
pub fn build_plugin(script: &Path, args: &[&str], wasm: PathBuf) -> PathBuf {
    let output = Command::new("bash").arg(script).args(args).arg(&wasm).output().expect("running a plug-in's build script");
    assert!(output.status.success(), "{} failed:\n{}\n{}", script.display(), String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(wasm.is_file(), "{} wrote no {}", script.display(), wasm.display());
    wasm
}

/// The text-tools example (guest-tools/text-tools) in `lang` (`python` or `js`), built by its build script
/// (which installs the pinned toolchain into `$AGENTRT_CACHE/toolchains` when it is missing) as `wasm`.
pub fn build_text_tools_example(lang: &str, wasm: PathBuf) -> PathBuf {
    build_plugin(&Path::new(env!("CARGO_MANIFEST_DIR")).join("guest-tools/text-tools/build.sh"), &[lang], wasm)
}

/// Calls every function of the text-tools example loaded in `sandbox` (written in `language`): strings,
/// records, lists, options, results and negative integers cross the WIT boundary both ways, and a
/// `result` function's error is an exception the program catches.
pub async fn assert_text_tools_round_trip(sandbox: &Sandbox, language: &str) {
    let names: Vec<String> = sandbox.plugins().signatures().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["explode", "first_integer", "repeat", "shift", "word_count", "words"]);
    let program = format!(
        r#"print(word_count("It's a tool, in {language}."))
print(words("to be"))
print(first_integer("from -42 to 7"), first_integer("no digits"))
print(shift([1, -2, 9007199254740993], -10))
print(repeat(text="ab", times=3))
try:
    repeat("ab", -1)
except Exception as e:
    print(type(e).__name__, e)
"#
    );
    let report = sandbox.run(&program).await;
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
}

/// The tool's failure when `program` leaves it uncaught, (tool, message), which the model reads in the
/// observation.
pub async fn uncaught(sandbox: &Sandbox, program: &str) -> (String, String) {
    let report = sandbox.run(program).await;
    let observation = report.observation();
    match report.result {
        Err(ProgramError::ToolFailed { tool, message, .. }) => {
            assert!(observation.contains(&message), "the model reads the message:\n{observation}");
            (tool, message)
        }
        other => panic!("expected a tool failure from {program:?}, got {other:?}"),
    }
}
