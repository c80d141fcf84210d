//! Builds the guest components (guest-tools/, a workspace of its own) for wasm32-wasip2 from source,
//! and tells the runtime where they are. Nothing prebuilt is committed.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const GUESTS: &[(&str, &str)] = &[("python-interpreter", "AGENTRT_INTERPRETER_WASM"), ("word-stats-tool", "AGENTRT_WORD_STATS_WASM")];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let guests_dir = manifest_dir.join("../guest-tools");
    let wit_dir = manifest_dir.join("../wit");
    println!("cargo:rerun-if-changed={}", wit_dir.display());
    println!("cargo:rerun-if-changed={}", guests_dir.join("Cargo.toml").display());
    println!("cargo:rerun-if-changed={}", guests_dir.join("Cargo.lock").display());
    for (crate_dir, _) in GUESTS {
        println!("cargo:rerun-if-changed={}", guests_dir.join(crate_dir).display());
    }

    // One guest build per outer target directory, shared by the debug and release profiles.
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target_dir = out_dir.ancestors().nth(4).map(|t| t.join("wasm-guests")).unwrap_or_else(|| out_dir.join("wasm-guests"));

    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(&guests_dir).args(["build", "--release", "--target", "wasm32-wasip2", "--target-dir"]).arg(&target_dir);
    // The outer build's flags and wrappers are for the host target, not for wasm.
    for var in
        ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS", "CARGO_BUILD_TARGET", "CARGO_TARGET_DIR", "RUSTC_WORKSPACE_WRAPPER", "RUSTC_WRAPPER"]
    {
        command.env_remove(var);
    }
    let output = command.output().expect("running cargo to build the guest components");
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if stderr.contains("wasm32-wasip2") && (stderr.contains("not installed") || stderr.contains("can't find crate")) {
            "\nhint: the wasm32-wasip2 target is missing; run `rustup target add wasm32-wasip2`"
        } else {
            ""
        };
        panic!("building the guest components in {} failed:\n{stderr}{hint}", guests_dir.display());
    }
    for (crate_dir, env_name) in GUESTS {
        let wasm = target_dir.join("wasm32-wasip2/release").join(format!("{}.wasm", crate_dir.replace('-', "_")));
        assert!(Path::new(&wasm).is_file(), "the guest build did not produce {}", wasm.display());
        println!("cargo:rustc-env={env_name}={}", wasm.display());
    }
}
