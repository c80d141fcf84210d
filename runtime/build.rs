//! Builds the guest components (guest-tools/, a workspace of its own) for wasm32-wasip2 from source,
//! and tells the runtime where they are. Nothing prebuilt is committed.
//!
//! The guests have a toolchain of their own (guest-tools/rust-toolchain.toml: monty needs a newer rustc
//! than the main workspace's), so the guest build runs through rustup with that channel, and none of the
//! variables cargo sets for this build script (RUSTC, CARGO, RUSTUP_TOOLCHAIN, ...) reach it.

use std::env;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

const GUESTS: &[(&str, &str)] = &[
    ("python-interpreter", "AGENTRT_INTERPRETER_WASM"),
    ("word-stats-tool", "AGENTRT_WORD_STATS_WASM"),
    ("flaky-tool", "AGENTRT_FLAKY_TOOL_WASM"),
    ("test-grader", "AGENTRT_TEST_GRADER_WASM"),
];

/// Variables of the outer build that would point the guest build at the wrong toolchain or target, or
/// give it the host's flags and wrappers.
const OUTER_VARS: &[&str] = &[
    "RUSTC",
    "RUSTDOC",
    "RUSTC_LINKER",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "RUSTUP_TOOLCHAIN",
    "RUSTUP_TOOLCHAIN_SOURCE",
];

/// `CARGO_*` variables the guest build keeps: where cargo's home is, the jobserver (so the guest build
/// shares the outer build's jobs), and the user's network, registry and terminal settings. Every other
/// `CARGO_*` (the build script's own, `CARGO_TARGET_DIR`, `CARGO_BUILD_*`, `CARGO_ENCODED_RUSTFLAGS`, ...)
/// is removed.
const KEPT_CARGO_PREFIXES: &[&str] = &["CARGO_HOME", "CARGO_MAKEFLAGS", "CARGO_NET_", "CARGO_HTTP_", "CARGO_REGISTRIES_", "CARGO_REGISTRY_", "CARGO_TERM_"];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let guests_dir = manifest_dir.join("../guest-tools");
    let wit_dir = manifest_dir.join("../wit");
    let toolchain_file = guests_dir.join("rust-toolchain.toml");
    println!("cargo:rerun-if-changed={}", wit_dir.display());
    println!("cargo:rerun-if-changed={}", guests_dir.join("Cargo.toml").display());
    println!("cargo:rerun-if-changed={}", guests_dir.join("Cargo.lock").display());
    println!("cargo:rerun-if-changed={}", toolchain_file.display());
    for (crate_dir, _) in GUESTS {
        println!("cargo:rerun-if-changed={}", guests_dir.join(crate_dir).display());
    }
    let channel = guest_channel(&toolchain_file);
    let install = format!("rustup toolchain install {channel} --profile minimal --target wasm32-wasip2");

    // One guest build per outer target directory, shared by the debug and release profiles.
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target_dir = out_dir.ancestors().nth(4).map(|t| t.join("wasm-guests")).unwrap_or_else(|| out_dir.join("wasm-guests"));

    let mut command = Command::new("rustup");
    command.current_dir(&guests_dir).args(["run", &channel, "cargo", "build", "--release", "--target", "wasm32-wasip2", "--target-dir"]).arg(&target_dir);
    for var in OUTER_VARS {
        command.env_remove(var);
    }
    for (var, _) in env::vars_os() {
        let Some(var) = var.to_str() else { continue };
        if var.starts_with("CARGO") && !KEPT_CARGO_PREFIXES.iter().any(|kept| var.starts_with(kept)) {
            command.env_remove(var);
        }
    }
    let output = match command.output() {
        Ok(output) => output,
        Err(error) if error.kind() == ErrorKind::NotFound => panic!(
            "building the guest components needs rustup, which is not on PATH: {} pins Rust {channel} (with the \
             wasm32-wasip2 target) for them. Install rustup (https://rustup.rs), then run `{install}`",
            toolchain_file.display()
        ),
        Err(error) => panic!("running `rustup run {channel} cargo build` for the guest components: {error}"),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if stderr.contains("is not installed") && stderr.contains("toolchain") {
            format!("\nhint: the guests' toolchain (Rust {channel}, pinned by {}) is missing; run `{install}`", toolchain_file.display())
        } else if stderr.contains("wasm32-wasip2") && (stderr.contains("not installed") || stderr.contains("can't find crate")) {
            format!("\nhint: the wasm32-wasip2 target of Rust {channel} is missing; run `rustup target add wasm32-wasip2 --toolchain {channel}`")
        } else {
            String::new()
        };
        panic!("building the guest components in {} with Rust {channel} failed:\n{stderr}{hint}", guests_dir.display());
    }
    for (crate_dir, env_name) in GUESTS {
        let wasm = target_dir.join("wasm32-wasip2/release").join(format!("{}.wasm", crate_dir.replace('-', "_")));
        assert!(Path::new(&wasm).is_file(), "the guest build did not produce {}", wasm.display());
        println!("cargo:rustc-env={env_name}={}", wasm.display());
    }
}

/// The `channel` of guest-tools/rust-toolchain.toml.
fn guest_channel(toolchain_file: &Path) -> String {
    let text = std::fs::read_to_string(toolchain_file).unwrap_or_else(|e| panic!("reading {}: {e}", toolchain_file.display()));
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("channel")?.trim_start().strip_prefix('='))
        .map(|value| value.trim().trim_matches('"').to_string())
        .next()
        .filter(|channel| !channel.is_empty())
        .unwrap_or_else(|| panic!("{} names no `channel = \"...\"`", toolchain_file.display()))
}
