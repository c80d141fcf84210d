//! Hostile programs: each must end with its own typed error, quickly (its limits are set so that the
//! slowest way to end, the wall-time bound, is under one second), without taking the runtime down; and
//! the same sandbox must then run a normal program correctly.

use agentrt_runtime::{FixtureTools, Limit, Limits, ProgramError, Sandbox, SandboxConfig, SandboxError};
use std::sync::Arc;
use std::time::Duration;

fn limits() -> Limits {
    Limits { timeout: Duration::from_millis(900), ..Limits::default() }
}

async fn sandbox() -> Sandbox {
    let config = SandboxConfig { limits: limits(), ..SandboxConfig::default() };
    Sandbox::new(config, Arc::new(FixtureTools::default())).await.expect("sandbox")
}

fn assert_limit(error: &ProgramError, accepted: &[Limit]) {
    match error {
        ProgramError::LimitExceeded { limit } if accepted.contains(limit) => {}
        other => panic!("expected a limit in {accepted:?}, got {other:?}"),
    }
}

const NORMAL: &str = r#"hits = search_pages("capital of France")
sections = view_sections(hits[0]["page_id"])
print(read_section(sections[0]["section_id"]))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_programs_end_typed_and_the_sandbox_survives() {
    let sandbox = sandbox().await;
    type Check = Box<dyn Fn(&ProgramError)>;
    let cases: Vec<(&str, &str, Check)> = vec![
        ("infinite loop", "while True:\n    pass\n", Box::new(|e| assert_limit(e, &[Limit::Fuel, Limit::Time]))),
        ("memory bomb", "blocks = []\nwhile True:\n    blocks.append('x' * 1000000)\n", Box::new(|e| assert_limit(e, &[Limit::Memory]))),
        ("deep recursion", "def f(n):\n    return f(n + 1)\nf(0)\n", Box::new(|e| assert_limit(e, &[Limit::Stack]))),
        ("10 MB print flood", "print('x' * 10000000)\n", Box::new(|e| assert_limit(e, &[Limit::Output]))),
        (
            "print flood in a loop",
            "for i in range(10000000):\n    print('spam spam spam spam spam spam spam')\n",
            Box::new(|e| assert_limit(e, &[Limit::Output])),
        ),
        (
            "reading a file",
            "from pathlib import Path\nprint(Path('/etc/passwd').read_text())\n",
            Box::new(|e| assert!(matches!(e, ProgramError::Forbidden { message } if message.contains("pathlib")), "{e:?}")),
        ),
        (
            "open() a file",
            "print(open('/etc/passwd').read())\n",
            Box::new(|e| assert!(matches!(e, ProgramError::Forbidden { .. } | ProgramError::UnknownTool { .. }), "{e:?}")),
        ),
        (
            "opening a socket",
            "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 80))\n",
            Box::new(|e| assert!(matches!(e, ProgramError::Forbidden { message } if message.contains("socket")), "{e:?}")),
        ),
        (
            "import os",
            "import os\nprint(os.environ)\n",
            Box::new(|e| assert!(matches!(e, ProgramError::Forbidden { message } if message.contains("import os")), "{e:?}")),
        ),
        ("syntax error", "x = 1\ndef f(:\n    pass\n", Box::new(|e| assert!(matches!(e, ProgramError::Syntax { line: 2, .. }), "{e:?}"))),
        (
            // Reported where the bracket opened, as CPython says it, not on the next line where the parser gave up.
            "a bracket never closed",
            "hits = search_pages('Paris')\nprint(read_section(hits[0]['section_id'])\nx = 1\n",
            Box::new(|e| assert!(matches!(e, ProgramError::Syntax { message, line: 2, column: 6 } if message == "'(' was never closed"), "{e:?}")),
        ),
        ("too many tool calls", "for i in range(1000):\n    search_pages('Paris')\n", Box::new(|e| assert_limit(e, &[Limit::HostCalls]))),
        (
            "an unknown tool",
            "delete_everything()\n",
            Box::new(|e| assert!(matches!(e, ProgramError::UnknownTool { name, .. } if name == "delete_everything"), "{e:?}")),
        ),
    ];
    for (name, program, check) in &cases {
        let report = sandbox.run(program).await;
        let error = report.result.as_ref().expect_err(name);
        eprintln!("{name}: {} in {:?} ({} fuel)", error.kind_name(), report.wall_time, report.fuel_used);
        check(error);
        let normal = sandbox.run(NORMAL).await;
        assert!(normal.is_ok(), "after {name}, a normal program failed: {:?}", normal.result);
        assert_eq!(normal.stdout, "Paris is the capital and most populous city of France.\n", "after {name}");
    }
}

#[tokio::test]
async fn a_tool_error_is_an_exception_the_program_can_catch() {
    let sandbox = sandbox().await;
    let program = "try:\n    read_section('no-such-section')\nexcept Exception as e:\n    print('caught:', e)\n";
    let report = sandbox.run(program).await;
    assert!(report.is_ok(), "{:?}", report.result);
    assert_eq!(report.stdout, "caught: read_section: no section with id `no-such-section`\n");
    // Uncaught, the same failure is a typed tool error.
    let report = sandbox.run("read_section('no-such-section')").await;
    match report.result {
        Err(ProgramError::ToolFailed { tool, .. }) => assert_eq!(tool, "read_section"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_malformed_component_is_a_load_error() {
    let sandbox = sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.wasm");
    std::fs::write(&path, b"\0asm this is not a component").unwrap();
    match sandbox.load_guest(&path) {
        Err(SandboxError::InvalidComponent { origin, .. }) => assert!(origin.contains("garbage.wasm")),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a malformed component loaded"),
    }
}

#[tokio::test]
async fn a_component_importing_an_unknown_function_is_refused() {
    let sandbox = sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("escape.wasm");
    let wasm = wat::parse_str(r#"(component (import "evil:host/escape" (instance (export "break-out" (func)))))"#).unwrap();
    std::fs::write(&path, wasm).unwrap();
    match sandbox.load_guest(&path) {
        Err(SandboxError::UnsatisfiedImport { detail, .. }) => assert!(detail.contains("evil:host/escape"), "{detail}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a component with an unknown import loaded"),
    }
}
