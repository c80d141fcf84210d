//! A plug-in tool whose guest traps on about a third of its inputs: `flaky_count(text)` counts words,
//! unless the text's FNV-1a hash is divisible by 3, when it panics (with `panic = "abort"`, a wasm trap).
//! Which inputs trap depends on the text alone, so a program that trapped traps again when replayed, and a
//! model's programs hit the fault at random.

mod bindings {
    wit_bindgen::generate!({
        path: ["../../wit", "wit"],
        world: "example:flaky/flaky",
    });
}

use bindings::exports::agentrt::tools::metadata::{self, ToolDoc};
use bindings::exports::example::flaky::words;

struct Flaky;

fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl words::Guest for Flaky {
    fn flaky_count(text: String) -> u32 {
        if fnv1a(&text) % 3 == 0 {
            panic!("flaky_count: the injected fault for this input");
        }
        text.split_whitespace().count() as u32
    }
}

impl metadata::Guest for Flaky {
    fn describe() -> Vec<ToolDoc> {
        vec![ToolDoc { name: "flaky-count".into(), description: "-> int: the number of words in text".into() }]
    }

    fn stateless() -> bool {
        // One instance may serve many calls: a trap must not poison the calls after it.
        true
    }
}

bindings::export!(Flaky with_types_in bindings);
