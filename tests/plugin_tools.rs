//! A plug-in tool component, built from guest-tools/word-stats-tool, is callable from a model program
//! by name, with positional and keyword arguments, records and results, and no runtime change.

use agentrt_runtime::{FixtureTools, InstanceReuse, ProgramError, Sandbox, SandboxConfig, SandboxError, EXAMPLE_PLUGIN_WASM};
use std::path::PathBuf;
use std::sync::Arc;

async fn sandbox_with_plugin() -> Sandbox {
    let config = SandboxConfig { plugins: vec![PathBuf::from(EXAMPLE_PLUGIN_WASM)], ..SandboxConfig::default() };
    Sandbox::new(config, Arc::new(FixtureTools::default())).await.expect("sandbox with the word-stats plug-in")
}

#[tokio::test]
async fn plugin_tools_are_listed_with_their_docs() {
    let sandbox = sandbox_with_plugin().await;
    let names: Vec<String> = sandbox.plugins().signatures().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["summarize", "top_words", "word_count"]);
    let top = sandbox.plugins().signature("top_words").unwrap();
    assert_eq!(top.params, ["text", "n"]);
    assert!(top.doc.contains("most frequent"), "{}", top.doc);
}

#[tokio::test]
async fn a_program_calls_plugin_tools_by_name() {
    let sandbox = sandbox_with_plugin().await;
    let program = r#"text = read_section("paris:summary")
n = word_count(text)
stats = summarize(text=text)
top = top_words(text, 2)
print(n, stats["words"], stats["longest_word"], top)
"#;
    let report = sandbox.run(program).await;
    assert!(report.is_ok(), "{:?}", report.result);
    assert_eq!(report.stdout, "10 10 populous [['and', 1], ['capital', 1]]\n");
    let tools: Vec<&str> = report.host_calls.iter().map(|c| c.tool.as_str()).collect();
    assert_eq!(tools, ["read_section", "word_count", "summarize", "top_words"]);
}

#[tokio::test]
async fn a_plugin_error_is_catchable_and_typed_when_uncaught() {
    let sandbox = sandbox_with_plugin().await;
    let report = sandbox.run("try:\n    top_words('a b', 0)\nexcept Exception as e:\n    print(e)\n").await;
    assert!(report.is_ok(), "{:?}", report.result);
    assert_eq!(report.stdout, "top_words: n must be from 1 to 100, got 0\n");

    let report = sandbox.run("word_count(42)").await;
    match report.result {
        Err(ProgramError::ToolFailed { tool, message, .. }) => {
            assert_eq!(tool, "word_count");
            assert!(message.contains("expected str"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_stateless_plugin_reuses_one_instance_and_gives_the_same_answers() {
    let program = "print([word_count('one two three') for _ in range(5)], summarize('Hi. Yo!')['sentences'])";
    let mut outputs = Vec::new();
    for (reuse, instances) in [(InstanceReuse::WhenStateless, 1), (InstanceReuse::Never, 6)] {
        let config = SandboxConfig { plugins: vec![PathBuf::from(EXAMPLE_PLUGIN_WASM)], plugin_reuse: reuse, ..SandboxConfig::default() };
        let sandbox = Sandbox::new(config, Arc::new(FixtureTools::default())).await.unwrap();
        assert_eq!(sandbox.plugins().reuses_instances("word_count"), Some(reuse == InstanceReuse::WhenStateless));
        let report = sandbox.run(program).await;
        assert!(report.is_ok(), "{:?}", report.result);
        assert_eq!(sandbox.plugins().instances_started("word_count"), Some(instances), "{reuse:?}");
        outputs.push(report.stdout);
    }
    assert_eq!(outputs[0], "[3, 3, 3, 3, 3] 2\n");
    assert_eq!(outputs[0], outputs[1]);
}

#[tokio::test]
async fn a_tool_name_taken_twice_is_an_error_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("word_stats_copy.wasm");
    std::fs::copy(EXAMPLE_PLUGIN_WASM, &copy).unwrap();
    let config = SandboxConfig { plugins: vec![PathBuf::from(EXAMPLE_PLUGIN_WASM), copy.clone()], ..SandboxConfig::default() };
    let error = match Sandbox::new(config, Arc::new(FixtureTools::default())).await {
        Ok(_) => panic!("two plug-ins exporting the same tools loaded"),
        Err(error) => error,
    };
    assert!(matches!(error, SandboxError::ToolNameTaken { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("word_stats_copy.wasm") && message.contains(EXAMPLE_PLUGIN_WASM), "{message}");
    assert!(message.contains("already provides") && !message.contains("not a valid WebAssembly component"), "{message}");
}
