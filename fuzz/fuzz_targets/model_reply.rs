#![no_main]
//! libFuzzer's entry for the `model_reply` target: its body is `agentrt_fuzz_bodies`'s, which the stable
//! replay test (fuzz/bodies/tests/replay.rs) runs too.

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrt_fuzz_bodies::target("model_reply").expect("a target of that name")(data));
