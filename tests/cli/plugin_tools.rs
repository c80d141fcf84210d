//! A plug-in tool component, built from guest-tools/word-stats-tool, is callable from a model program
//! by name, with positional and keyword arguments, records and results, and no runtime change. One
//! whose `describe` does not name its tools (components written by hand here) is refused at load. A plug-in
//! that traps (guest-tools/flaky-tool) fails only the call that trapped, however many programs share it.

use agentrt_runtime::{FixtureTools, InstanceReuse, Sandbox, SandboxConfig, SandboxError, EXAMPLE_PLUGIN_WASM, FLAKY_PLUGIN_WASM};
use std::path::PathBuf;
use std::sync::Arc;

use crate::common::{hand_written_plugin, load_plugin, sandbox_with_plugin, uncaught, Describe};

async fn sandbox_with_word_stats() -> Sandbox {
    sandbox_with_plugin(PathBuf::from(EXAMPLE_PLUGIN_WASM)).await
}

#[tokio::test]
async fn plugin_tools_are_listed_with_their_docs() {
    let sandbox = sandbox_with_word_stats().await;
    let names: Vec<String> = sandbox.plugins().signatures().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["summarize", "top_words", "word_count"]);
    let top = sandbox.plugins().signature("top_words").unwrap();
    assert_eq!(top.params, ["text", "n"]);
    assert!(top.doc.contains("most frequent"), "{}", top.doc);
}

#[tokio::test]
async fn a_program_calls_plugin_tools_by_name() {
    let sandbox = sandbox_with_word_stats().await;
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
    let sandbox = sandbox_with_word_stats().await;
    let report = sandbox.run("try:\n    top_words('a b', 0)\nexcept Exception as e:\n    print(e)\n").await;
    assert!(report.is_ok(), "{:?}", report.result);
    assert_eq!(report.stdout, "top_words: n must be from 1 to 100, got 0\n");

    let (tool, message) = uncaught(&sandbox, "word_count(42)").await;
    assert_eq!(tool, "word_count");
    assert!(message.contains("expected str"), "{message}");
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

/// The texts whose `flaky_count` traps (FNV-1a divisible by 3, as guest-tools/flaky-tool computes it).
fn traps(text: &str) -> bool {
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)) % 3 == 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_in_a_shared_plugin_instance_fails_only_the_call_that_hit_it() {
    let config = SandboxConfig { plugins: vec![PathBuf::from(FLAKY_PLUGIN_WASM)], ..SandboxConfig::default() };
    let sandbox = Arc::new(Sandbox::new(config, Arc::new(FixtureTools::default())).await.unwrap());
    assert_eq!(sandbox.plugins().reuses_instances("flaky_count"), Some(true));
    // 32 programs at once, each calling the one shared instance 20 times, catching the traps.
    let program = |p: usize| {
        format!(
            "out = []\nfor i in range(20):\n    try:\n        out.append(flaky_count('w ' * i + 'p{p}'))\n    except Exception as e:\n        out.append('trap' if 'trapped' in str(e) else str(e))\nprint(out)\n"
        )
    };
    let runs: Vec<_> = (0..32).map(|p| (p, sandbox.clone())).map(|(p, sb)| tokio::spawn(async move { (p, sb.run(&program(p)).await) })).collect();
    let mut trapped = 0;
    for run in runs {
        let (p, report) = run.await.unwrap();
        assert!(report.is_ok(), "program {p}: {:?}", report.result);
        let expected: Vec<String> = (0..20)
            .map(|i| {
                let text = format!("{}p{p}", "w ".repeat(i));
                if traps(&text) {
                    trapped += 1;
                    "'trap'".to_string()
                } else {
                    (i + 1).to_string()
                }
            })
            .collect();
        assert_eq!(report.stdout, format!("[{}]\n", expected.join(", ")), "program {p}");
    }
    assert!(trapped > 100, "the inputs hit the fault {trapped} times of 640");
    // Every trap cost its instance, and only it: a trapped instance never serves another call (each trap
    // needs an instance of its own), and the pool grows by no more than the programs running at once.
    let started = sandbox.plugins().instances_started("flaky_count").unwrap() as usize;
    assert!((trapped..=trapped + 32).contains(&started), "{started} instances for {trapped} traps");
    // Uncaught, the trap is the program's typed tool error naming the tool and the trap.
    let text = (0..).map(|i| format!("t{i}")).find(|t| traps(t)).unwrap();
    let (tool, message) = uncaught(&sandbox, &format!("flaky_count('{text}')")).await;
    assert_eq!(tool, "flaky_count");
    assert!(message.contains("trapped"), "{message}");
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

#[tokio::test]
async fn a_plugin_whose_describe_lists_no_tool_or_one_it_does_not_export_is_refused_naming_the_file_and_the_gap() {
    let dir = tempfile::tempdir().unwrap();

    // The same component with a describe that matches what it exports loads, and its tool runs.
    let sandbox = load_plugin(hand_written_plugin(dir.path(), "described.wasm", Describe::Lists(&["hello", "seven"]), &["hello", "seven"]))
        .await
        .expect("a well-described plug-in");
    assert_eq!(sandbox.plugins().signature("hello").unwrap().doc, "-> int: hello, by hand");
    let report = sandbox.run("print(hello() + seven())").await;
    assert_eq!(report.stdout, "14\n", "{:?}", report.result);

    /// A component that `describe`s some names and exports some tools, and what its refusal must say.
    struct Case {
        file: &'static str,
        described: &'static [&'static str],
        exported: &'static [&'static str],
        expected: &'static [&'static str],
    }
    let cases = [
        Case { file: "empty.wasm", described: &[], exported: &["hello"], expected: &["lists no tools", "`hello`"] },
        Case { file: "unexported.wasm", described: &["hello", "goodbye"], exported: &["hello"], expected: &["`goodbye`", "does not export", "`hello`"] },
        Case { file: "no_tools.wasm", described: &["hello"], exported: &[], expected: &["`hello`", "does not export", "exports no tool"] },
    ];
    for Case { file, described, exported, expected } in cases {
        let error = match load_plugin(hand_written_plugin(dir.path(), file, Describe::Lists(described), exported)).await {
            Ok(_) => panic!("{file}: describe() lists {described:?}, the component exports {exported:?}, and it loaded"),
            Err(error) => error,
        };
        assert!(matches!(error, SandboxError::UnusableTool { .. }), "{file}: {error:?}");
        let message = error.to_string();
        assert!(message.contains(&dir.path().join(file).display().to_string()) && message.contains("describe()"), "{file}: {message}");
        for part in expected {
            assert!(message.contains(part), "{file}: no {part:?} in: {message}");
        }
    }
}

/// A negative number for a `u32` parameter says what the parameter takes and what it got.
#[tokio::test]
async fn a_negative_number_for_an_unsigned_parameter_says_so() {
    let sandbox = sandbox_with_word_stats().await;
    let (tool, message) = uncaught(&sandbox, "top_words('a b', -3)").await;
    assert_eq!(tool, "top_words");
    assert!(message.contains("expected a non-negative integer for u32 (got -3)"), "{message}");
}

/// A plug-in call is traced by parameter name, however the program passed its arguments.
#[tokio::test]
async fn plugin_calls_are_traced_with_their_parameter_names() {
    let sandbox = sandbox_with_word_stats().await;
    let report = sandbox.run("top_words('a b a', n=1)\ntop_words(text='a b', n=2)\nword_count('x y')\n").await;
    assert!(report.is_ok(), "{:?}", report.result);
    let args: Vec<&serde_json::Value> = report.host_calls.iter().map(|c| &c.args).collect();
    assert_eq!(args, [&serde_json::json!({"text": "a b a", "n": 1}), &serde_json::json!({"text": "a b", "n": 2}), &serde_json::json!({"text": "x y"})]);
}

/// The same file given twice (by `--tool` and by its directory) is one plug-in, not a clash with itself.
#[tokio::test]
async fn the_same_plugin_file_given_twice_loads_once() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("word_stats.wasm");
    std::os::unix::fs::symlink(std::fs::canonicalize(EXAMPLE_PLUGIN_WASM).unwrap(), &link).unwrap();
    let config = SandboxConfig { plugins: vec![PathBuf::from(EXAMPLE_PLUGIN_WASM), PathBuf::from(EXAMPLE_PLUGIN_WASM), link], ..SandboxConfig::default() };
    let sandbox = Sandbox::new(config, Arc::new(FixtureTools::default())).await.expect("one plug-in given three times loads");
    let names: Vec<String> = sandbox.plugins().signatures().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["summarize", "top_words", "word_count"]);
}

/// Two plug-ins exporting one tool name are refused from their WIT exports, before either is compiled:
/// nothing reaches a fresh component cache.
#[tokio::test]
async fn a_tool_name_clash_is_refused_before_any_compile() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("word_stats_copy.wasm");
    std::fs::copy(EXAMPLE_PLUGIN_WASM, &copy).unwrap();
    let cache = dir.path().join("cache");
    let config = SandboxConfig { plugins: vec![PathBuf::from(EXAMPLE_PLUGIN_WASM), copy], cache_dir: Some(cache.clone()), ..SandboxConfig::default() };
    let error = match Sandbox::new(config, Arc::new(FixtureTools::default())).await {
        Ok(_) => panic!("two plug-ins exporting the same tools loaded"),
        Err(error) => error,
    };
    assert!(matches!(&error, SandboxError::ToolNameTaken { .. }), "{error:?}");
    let compiled = std::fs::read_dir(&cache).map(|d| d.count()).unwrap_or(0);
    assert_eq!(compiled, 0, "a component was compiled before the clash was found");
    let mut names = agentrt_runtime::exported_tool_names(&std::fs::read(EXAMPLE_PLUGIN_WASM).unwrap());
    names.sort();
    assert_eq!(names, ["summarize", "top_words", "word_count"]);
}
