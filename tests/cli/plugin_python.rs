//! The Python example plug-in (guest-tools/text-tools/python), built with componentize-py by the build.sh of
//! a `tool new` Python project (which installs the pinned componentize-py from PyPI when it is missing),
//! called from a program through every function: strings, records, lists, options, results and negative
//! integers cross the WIT boundary both ways; a Python exception reaches the program and the model with
//! its message and without wasm frames; the stateless plug-in serves many calls from one instance.

use crate::common::{assert_text_tools_round_trip, build_text_tools_example, sandbox_with_plugin, uncaught};

#[tokio::test(flavor = "multi_thread")]
async fn the_python_example_plugin_round_trips_every_kind_of_value() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = sandbox_with_plugin(build_text_tools_example("python", dir.path().join("text_tools_py.wasm"))).await;
    assert_text_tools_round_trip(&sandbox, "Python").await;
    assert_eq!(sandbox.plugins().signature("shift").unwrap().params, ["numbers", "delta"]);
    assert!(sandbox.plugins().signature("words").unwrap().doc.contains("position"));
    assert_eq!(sandbox.plugins().reuses_instances("words"), Some(true), "app.py declares itself stateless");
    assert_eq!(sandbox.plugins().instances_started("words"), Some(1), "seven calls, one warm instance");

    // A Python exception: the program gets the tool's name and the exception's message, no wasm frames.
    let (tool, message) = uncaught(&sandbox, "explode('kaboom: the plug-in raised')").await;
    assert_eq!(tool, "explode");
    assert!(message.contains("kaboom: the plug-in raised") && message.contains("ValueError"), "{message}");
    assert!(message.contains("text_tools_py.wasm crashed"), "{message}");
    assert!(!message.contains("0x") && !message.contains("wasm backtrace"), "wasm frames in: {message}");

    // The crashed instance is dropped; the next call starts a fresh one and works.
    let report = sandbox.run("print(word_count('still here'))").await;
    assert_eq!(report.stdout, "2\n", "{:?}", report.result);
    assert_eq!(sandbox.plugins().instances_started("words"), Some(2));
}
