//! `agentrt exec` as a user runs it: the report it prints and its exit status.

use std::path::Path;
use std::process::{Command, Output};

fn agentrt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentrt")).args(args).output().expect("running agentrt")
}

fn text(output: &Output) -> (String, String) {
    (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// Runs `agentrt ARGS`: its exit status, stdout and stderr.
fn exit_and_text(args: &[&str]) -> (Option<i32>, String, String) {
    let output = agentrt(args);
    let (stdout, stderr) = text(&output);
    (output.status.code(), stdout, stderr)
}

const THREE_CALLS: &str = r#"hits = search_pages("Denver Broncos Super Bowl")
sections = view_sections(hits[0]["page_id"])
print(read_section(sections[0]["section_id"]))
"#;

fn write(dir: &Path, name: &str, content: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn three_calls_print_the_section_and_a_trace_of_three_host_calls() {
    let dir = tempfile::tempdir().unwrap();
    let program = write(dir.path(), "prog.py", THREE_CALLS.as_bytes());
    let output = agentrt(&["exec", &program, "--fixture"]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("The Denver Broncos are a professional American football team"), "{stdout}");
    assert!(stdout.contains("── host calls (3) ──"), "{stdout}");
    for call in ["1. search_pages(", "2. view_sections(page_id=\"denver_broncos\")", "3. read_section(section_id=\"denver_broncos:summary\")"] {
        assert!(stdout.contains(call), "missing {call:?} in\n{stdout}");
    }
    assert!(stdout.contains("fuel ") && stdout.contains("peak memory") && stdout.contains("wall "), "{stdout}");

    let output = agentrt(&["exec", &program, "--fixture", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("--json prints one JSON object");
    assert_eq!(report["host_calls"].as_array().unwrap().len(), 3);
    assert_eq!(report["host_calls"][1]["tool"], "view_sections");
    assert!(report["result"]["Ok"].is_object(), "{report}");
    assert!(report["fuel_used"].as_u64().unwrap() > 0);
    // Times name their unit.
    assert!(report["wall_time_us"].as_u64().unwrap() > 0, "{report}");
    assert!(report["host_calls"][0]["duration_us"].is_u64(), "{report}");
    assert!(report.get("wall_time").is_none() && report["host_calls"][0].get("duration").is_none(), "{report}");
}

#[test]
fn hostile_programs_exit_nonzero_with_their_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("loop.py", "while True:\n    pass\n", "limit-exceeded:"),
        ("bomb.py", "a = []\nwhile True:\n    a.append('x' * 1000000)\n", "limit-exceeded:memory"),
        ("recursion.py", "def f(n):\n    return f(n + 1)\nf(0)\n", "limit-exceeded:stack"),
        ("flood.py", "print('x' * 10000000)\n", "limit-exceeded:output"),
        ("file.py", "from pathlib import Path\nPath('/etc/passwd').read_text()\n", "forbidden"),
        ("socket.py", "import socket\n", "forbidden"),
        ("os.py", "import os\n", "forbidden"),
        ("syntax.py", "def f(:\n", "syntax"),
    ];
    for (name, program, kind) in cases {
        let path = write(dir.path(), name, program.as_bytes());
        let (code, stdout, stderr) = exit_and_text(&["exec", &path, "--fixture", "--timeout-ms", "900"]);
        assert_eq!(code, Some(1), "{name}: {stdout}\n{stderr}");
        assert!(stdout.contains(&format!("── error: {kind}")), "{name}: {stdout}");
    }
}

/// A hit names its page's best-matching section, so one `read_section` reaches the passage: the same in
/// the sandbox's fixture tools as in the index.
#[test]
fn a_hit_names_its_best_section() {
    let dir = tempfile::tempdir().unwrap();
    let program = write(
        dir.path(),
        "best.py",
        b"hits = search_pages(\"Scheele discovered oxygen\")\nprint(hits[0][\"page_id\"], hits[0][\"section_id\"])\nprint(read_section(hits[0][\"section_id\"])[:20])\n",
    );
    let (stdout, stderr) = text(&agentrt(&["exec", &program, "--fixture"]));
    assert!(stdout.contains("oxygen oxygen:discovery\n"), "{stdout}\n{stderr}");
    assert!(stdout.contains("── host calls (2) ──"), "{stdout}");
}

/// A misspelled name is reported like any other exception: CPython's `NameError`, with the line that
/// used it and the name marked under it, in the report and in what the model sees.
#[test]
fn a_misspelled_name_says_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let program = write(dir.path(), "typo.py", b"hits = search_pages(\"oxygen\")\nbest = hits[0]\nx = 1\ny = 2\nprint(bst[\"section_id\"])\n");
    let (code, stdout, stderr) = exit_and_text(&["exec", &program, "--fixture"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("── error: unknown-tool"), "{stdout}");
    assert!(stdout.contains("line 5") && stdout.contains("NameError: name 'bst' is not defined"), "{stdout}");
    // The source line, with the name marked under it as other exceptions' tracebacks mark theirs.
    assert!(stdout.contains("    print(bst[\"section_id\"])\n          ~~~\n"), "{stdout}");

    let output = agentrt(&["exec", &program, "--fixture", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("--json prints one JSON object");
    let error = &report["result"]["Err"];
    assert_eq!(error["error"], "unknown-tool", "{report}");
    assert_eq!(error["name"], "bst", "{report}");
    assert_eq!(error["line"], 5, "{report}");
    assert!(error["traceback"].as_str().unwrap().contains("NameError: name 'bst' is not defined"), "{report}");
}

/// What a user trips on first: a file that is not wasm at all, a core module, a component that imports
/// what the host does not provide, a program that is not UTF-8, a zero timeout, no program. Each exits
/// with status 2 and says what is wrong, where, in words.
#[test]
fn unusable_inputs_are_refused_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.wasm", b"hello, not wasm at all");
    let (code, _, stderr) = exit_and_text(&["exec", &bad, "--fixture"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("bad.wasm is not a valid WebAssembly component: it does not start with the WebAssembly magic bytes"), "{stderr}");
    assert!(!stderr.contains("0x61") && !stderr.contains("expected=["), "no byte arrays: {stderr}");
    let module = write(dir.path(), "module.wasm", &wat::parse_str("(module)").unwrap());
    let (_, stderr) = text(&agentrt(&["exec", &module, "--fixture"]));
    assert!(stderr.contains("module.wasm is not a valid WebAssembly component: it is a core WebAssembly module"), "{stderr}");
    let wasm = wat::parse_str(r#"(component (import "evil:host/escape" (instance (export "break-out" (func)))))"#).unwrap();
    let (code, _, stderr) = exit_and_text(&["exec", &write(dir.path(), "escape.wasm", &wasm), "--fixture"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("imports something the host does not provide") && stderr.contains("evil:host/escape"), "{stderr}");

    let latin1 = write(dir.path(), "latin1.py", b"print('caf\xe9')\n");
    let (code, stdout, stderr) = exit_and_text(&["exec", &latin1, "--fixture", "--json"]);
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    let error: serde_json::Value = serde_json::from_str(&stdout).expect("--json prints one JSON object, even for a setup error");
    assert_eq!(error["error"], "not-utf8", "{error}");
    assert_eq!(error["byte_offset"], 10, "{error}");
    assert!(error["message"].as_str().unwrap().contains("latin1.py: not UTF-8 text: the byte at offset 10 (0xe9)"), "{error}");
    assert!(stderr.contains("offset 10"), "{stderr}");

    let (code, _, stderr) = exit_and_text(&["exec", "--fixture", "--timeout-ms", "0", "--code", "print(1)"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--timeout-ms") && stderr.contains("0 ms cannot run anything"), "{stderr}");

    let (code, _, stderr) = exit_and_text(&["exec"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--code"), "{stderr}");
}

/// `search_passages` through the sandbox: positional or keyword arguments, `page_id=None` pooling every
/// page, one page when named, and a bad argument raised into the program as the other tools' are.
#[test]
fn search_passages_takes_its_arguments_as_python_does() {
    let dir = tempfile::tempdir().unwrap();
    let program = r#"pooled = search_passages("Super Bowl 50 Broncos")
print(pooled[0]["page_id"], "|", pooled[0]["section_id"], "|", pooled[0]["text"])
one = search_passages("capital of France", page_id="paris", k=1)
print(len(one), one[0]["page_id"], one[0]["score"] > 0)
print(search_passages("capital", None, 2)[0]["text"])
try:
    search_passages("capital", k=0)
except Exception as e:
    print("refused:", e)
"#;
    let path = write(dir.path(), "passages.py", program.as_bytes());
    let (code, stdout, stderr) = exit_and_text(&["exec", &path, "--fixture"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout
            .contains("denver_broncos | denver_broncos:super-bowl-50 | The Broncos defeated the Carolina Panthers 24-10 in Super Bowl 50 on February 7, 2016."),
        "{stdout}"
    );
    assert!(stdout.contains("1 paris True"), "{stdout}");
    assert!(stdout.contains("Paris is the capital and most populous city of France."), "{stdout}");
    assert!(stdout.contains("refused:") && stdout.contains("k must be an int from 1 to 50"), "{stdout}");
    assert!(stdout.contains("── host calls (3) ──"), "a refused call never reaches the host: {stdout}");
}
