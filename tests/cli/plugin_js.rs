//! JavaScript plug-ins, built with componentize-js exactly as their `build.sh` builds them (which installs
//! the pinned componentize-js from npm into `$AGENTRT_CACHE/toolchains` when it is missing; node and npm
//! are needed): the example (guest-tools/text-tools/js) called from a program, and a project from
//! `agentrt tool new --lang js` whose functions throw plain `Error`s, as plug-in authors write them. A
//! thrown Error reaches the program and the model with its message, from any function.

use crate::common::{agentrt, assert_text_tools_round_trip, build_plugin, build_text_tools_example, sandbox_with_plugin, uncaught};

#[tokio::test(flavor = "multi_thread")]
async fn the_javascript_example_plugin_round_trips_values_and_explains_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox_with_plugin(build_text_tools_example("js", dir.path().join("text_tools_js.wasm"))).await;
    assert_text_tools_round_trip(&sandbox, "JavaScript").await;

    // `explode` returns no result: its Error traps the instance, and the message is in the crash's account.
    let (tool, message) = uncaught(&sandbox, "explode('kaboom: the plug-in threw')").await;
    assert_eq!(tool, "explode");
    assert!(message.contains("text_tools_js.wasm crashed") && message.contains("kaboom: the plug-in threw"), "{message}");
    assert!(!message.contains("expected a string"), "{message}");
}

/// A plug-in as its author writes it: `throw new Error(...)` wherever something goes wrong, with no
/// ComponentError, in `result` functions (sync and async) and in a function without one.
const THROWING_TOOL_JS: &str = r#"
export const metadata = {
  describe() {
    return [
      { name: "hello", description: "-> str: a greeting for name" },
      { name: "later", description: "-> str: a greeting for name, asynchronously" },
      { name: "crash", description: "always fails" },
    ];
  },
  stateless() {
    return true;
  },
};

export const tools = {
  hello(name) {
    if (name === "") {
      throw new Error("kaboom: name must not be empty");
    }
    if (name === "bug") {
      return name.missing.length;
    }
    if (name === "payload") {
      throw { payload: "an error with its own payload" };
    }
    return `Hello, ${name}!`;
  },
  async later(name) {
    await null;
    throw new Error(`kaboom later: ${name}`);
  },
  crash(message) {
    throw new Error(message);
  },
};
"#;

const THROWING_TOOL_WIT: &str = r#"package local:my-tool@0.1.0;

interface tools {
    hello: func(name: string) -> result<string, string>;
    later: func(name: string) -> result<string, string>;
    crash: func(message: string) -> u32;
}

world my-tool {
    include agentrt:tools/tool@0.1.0;
    export tools;
}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_error_thrown_by_a_javascript_plugin_reaches_the_program_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let output = agentrt().args(["tool", "new", "my-tool", "--lang", "js", "--dir", dir.path().to_str().unwrap()]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let project = dir.path().join("my-tool");
    std::fs::write(project.join("tool.js"), THROWING_TOOL_JS).unwrap();
    std::fs::write(project.join("wit/my-tool.wit"), THROWING_TOOL_WIT).unwrap();
    let sandbox = sandbox_with_plugin(build_plugin(&project.join("build.sh"), &[], project.join("my_tool.wasm"))).await;
    let leftovers: Vec<String> = std::fs::read_dir(&project)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n.ends_with(".js"))
        .collect();
    assert!(leftovers.is_empty(), "build.sh left {leftovers:?} in the project");

    // In a `result` function the Error is the tool's error: a RuntimeError with its message, which the
    // program catches; the instance lives on.
    let program = r#"for name in ["", "bug", "payload"]:
    try:
        hello(name)
    except Exception as e:
        print(type(e).__name__, e)
try:
    later("you")
except RuntimeError as e:
    print(e)
print(hello("you"))
"#;
    let report = sandbox.run(program).await;
    assert!(report.is_ok(), "{:?}\n{}", report.result, report.stdout);
    let lines: Vec<&str> = report.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", report.stdout);
    assert_eq!(lines[0], "RuntimeError hello: kaboom: name must not be empty");
    assert!(lines[1].starts_with("RuntimeError hello: TypeError: ") && lines[1].contains("missing"), "an error other than Error is named: {}", lines[1]);
    assert_eq!(lines[2], "RuntimeError hello: an error with its own payload");
    assert_eq!(lines[3], "later: kaboom later: you");
    assert_eq!(lines[4], "Hello, you!");
    assert_eq!(sandbox.plugins().instances_started("hello"), Some(1), "no call crashed the instance");

    let (tool, message) = uncaught(&sandbox, "hello('')").await;
    assert_eq!((tool.as_str(), message.as_str()), ("hello", "kaboom: name must not be empty"));

    // Without a `result` the Error traps the instance, and the message is in the crash's account.
    let (tool, message) = uncaught(&sandbox, "crash('kaboom: no result to carry it')").await;
    assert_eq!(tool, "crash");
    assert!(message.contains("my_tool.wasm crashed") && message.contains("kaboom: no result to carry it"), "{message}");
}
