//! The bodies of the coverage-guided fuzz targets: one function per parser that takes bytes from strangers,
//! each feeding it the input and checking what is known about its answer, not only that it returns.
//!
//! `fuzz/fuzz_targets/<name>.rs` (cargo-fuzz, libFuzzer, nightly) calls [`TARGETS`]' function of that name
//! and nothing else; `tests/replay.rs` (stable, in CI) calls the same functions on each target's committed
//! seeds (`fuzz/seeds/<name>/`), on the inputs the long runs found failing (`fuzz/regressions/<name>/`), and
//! on seeded mutations of the seeds. A body panics exactly when a property fails, so a finding is a crash to
//! libFuzzer and a failed test to cargo. docs/reliability.md lists the targets, their runs and findings.
//!
//! Readers that take a path are fed through a file (or a directory of files) in a scratch directory of the
//! thread's own, as their callers give them; inputs of several files are one input split at [`PART`].

use std::cell::RefCell;
use std::path::{Path, PathBuf};

pub mod component;
pub mod config;
pub mod model;
pub mod reply;
pub mod request;

/// A target: its name (`fuzz/fuzz_targets/<name>.rs`, `fuzz/seeds/<name>/`) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("serve_request", request::serve_request),
    ("model_reply", reply::model_reply),
    ("train_config", config::train_config),
    ("gguf", model::gguf),
    ("safetensors_model", model::safetensors_model),
    ("adapter", model::adapter),
    ("component_decode", component::component_decode),
    ("component_load", component::component_load),
];

/// The separator of an input that is several files (`config.json`, then `model.safetensors`...).
pub const PART: &[u8] = b"\n#~part~#\n";

/// `data` cut at each [`PART`].
pub fn parts(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(at) = rest.windows(PART.len()).position(|w| w == PART) {
        out.push(&rest[..at]);
        rest = &rest[at + PART.len()..];
    }
    out.push(rest);
    out
}

/// `files` joined with [`PART`]: an input of several files, as [`parts`] cuts it.
pub fn join_parts(files: &[&[u8]]) -> Vec<u8> {
    files.join(PART)
}

thread_local! {
    static SCRATCH: RefCell<Option<tempfile::TempDir>> = const { RefCell::new(None) };
}

/// This thread's scratch directory (in /dev/shm where there is one: the readers are fed through files
/// millions of times), emptied of what `name` held before.
pub fn scratch(name: &str) -> PathBuf {
    let root = SCRATCH.with(|s| {
        s.borrow_mut()
            .get_or_insert_with(|| {
                let shm = Path::new("/dev/shm");
                let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
                tempfile::Builder::new().prefix("agentrt-fuzz-").tempdir_in(base).expect("a scratch directory")
            })
            .path()
            .to_path_buf()
    });
    let path = root.join(name);
    if path.is_dir() {
        std::fs::remove_dir_all(&path).expect("emptying a scratch directory");
    } else if path.exists() {
        std::fs::remove_file(&path).expect("removing a scratch file");
    }
    path
}

/// Writes `bytes` to `path`.
pub fn write(path: &Path, bytes: &[u8]) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("a scratch directory");
    }
    std::fs::write(path, bytes).expect("writing a scratch file");
}

/// The target named `name`.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// With `AGENTRT_FUZZ_VERBOSE=1`, says how an input ended (a seed should get far: one that is refused at
/// its header gives the fuzzer little to start from).
pub fn note(how: impl FnOnce() -> String) {
    static VERBOSE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *VERBOSE.get_or_init(|| std::env::var("AGENTRT_FUZZ_VERBOSE").is_ok_and(|v| v == "1")) {
        eprintln!("fuzz: {}", how());
    }
}

/// Fails (panics, which libFuzzer reports as a crash) with what is wrong and the input's beginning.
#[track_caller]
pub fn violated(what: &str, data: &[u8]) -> ! {
    let shown = String::from_utf8_lossy(&data[..data.len().min(300)]).into_owned();
    panic!("fuzz property violated: {what}\n  input ({} bytes): {shown:?}", data.len())
}
