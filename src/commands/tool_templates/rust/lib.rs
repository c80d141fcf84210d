//! The `{{name}}` plug-in tool for agentrt. Build: ./build.sh
//!
//! wit-bindgen turns `wit/{{name}}.wit` (and the contract in `wit/deps/`) into one trait per exported
//! interface: `tools::Guest` for your functions, `metadata::Guest` for the host's questions about them.
//! Return `Err(message)` from a `result` function for an error the model's program can catch; a panic
//! traps the instance and fails the call, and the model sees the tool's name and the end of stderr.

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "local:{{name}}/{{name}}",
    });
}

use bindings::exports::agentrt::tools::metadata::{self, ToolDoc};
use bindings::exports::local::{{snake}}::tools;

struct Tool;

impl tools::Guest for Tool {
    fn hello(name: String) -> Result<String, String> {
        if name.trim().is_empty() {
            return Err("name must not be empty".into());
        }
        Ok(format!("Hello, {name}!"))
    }
}

impl metadata::Guest for Tool {
    /// One line per function, by its WIT name (kebab-case). The model reads it after the tool's name
    /// and parameters, as in "- hello(name) -> str: a greeting for name (not empty)".
    fn describe() -> Vec<ToolDoc> {
        vec![ToolDoc { name: "hello".into(), description: "-> str: a greeting for name (not empty)".into() }]
    }

    /// No call depends on an earlier one, so the host may reuse one instance for many calls. Return
    /// false once a call keeps state that a later call reads: each call then gets a fresh instance.
    fn stateless() -> bool {
        true
    }
}

bindings::export!(Tool with_types_in bindings);
