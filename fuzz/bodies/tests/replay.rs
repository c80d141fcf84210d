//! The fuzz targets' short run, on stable Rust (CI runs it with `cargo test --workspace`): every target's
//! body on its committed seeds (`fuzz/seeds/<target>/`), on every input a long run found failing
//! (`fuzz/regressions/<target>/`, kept fixed), and on seeded mutations of the seeds. The mutations are
//! cases of a SplitMix64 stream from `(seed, target, index)` alone, so a failing case replays by itself:
//! `AGENTRT_FUZZ_SEED` (default 0x5EED) and `AGENTRT_FUZZ_MUTATIONS` (a multiplier of each target's count,
//! default 1) size the run. The long runs are cargo-fuzz's (docs/reliability.md, "Coverage-guided fuzzing").

use agentrt_fuzz_bodies::{target, PART};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files of `fuzz/<kind>/<target>/`, sorted by name.
fn inputs(kind: &str, name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = fuzz_dir().join(kind).join(name);
    let Ok(read) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = read.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    files.sort();
    files.into_iter().map(|p| (p.clone(), std::fs::read(&p).expect("reading an input"))).collect()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Values that break lengths, counts and offsets, little-endian.
const INTERESTING: &[u64] =
    &[0, 1, 2, 7, 8, 16, 31, 32, 64, 127, 128, 255, 256, 0x7fff, 0xffff, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 1 << 32, 1 << 40, u64::MAX / 2, u64::MAX];

/// Tokens that matter to some parser here, spliced in whole.
const TOKENS: &[&[u8]] = &[
    b"<answer>",
    b"</answer>",
    b"<tool>",
    b"</tool>",
    b"```",
    b"```python\n",
    b"\n",
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"null",
    b"true",
    b"-1",
    b"1e999",
    b"NaN",
    b"nan",
    b"inf",
    b"\"\\ud800\"",
    b"[rollout]",
    b"[algorithm]",
    b"=",
    b"\xff",
    b"\0",
    PART,
];

/// One to eight mutations of `seed`, some with a piece of `other` spliced in.
fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(8) {
        let len = data.len();
        let at = rng.below(len + 1);
        match rng.below(9) {
            0 if len > 0 => data[at.min(len - 1)] ^= 1 << rng.below(8),
            1 if len > 0 => data[at.min(len - 1)] = rng.next() as u8,
            2 => {
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                data.splice(at..at, bytes);
            }
            3 if len > 0 => {
                let end = (at + 1 + rng.below(64)).min(len);
                data.drain(at.min(end)..end);
            }
            4 if len > 0 => {
                let end = (at + 1 + rng.below(64)).min(len);
                let piece = data[at.min(end)..end].to_vec();
                data.splice(at..at, piece.iter().copied().cycle().take(piece.len() * (1 + rng.below(4))));
            }
            5 => data.truncate(at),
            6 => {
                let v = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
                let width = [1, 2, 4, 8][rng.below(4)];
                for (i, b) in v[..width].iter().enumerate() {
                    if let Some(slot) = data.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            7 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                data.splice(at..at, t.iter().copied());
            }
            _ if !other.is_empty() => {
                let from = rng.below(other.len());
                let end = (from + 1 + rng.below(256)).min(other.len());
                data.splice(at..at, other[from..end].iter().copied());
            }
            _ => {}
        }
    }
    data
}

/// Runs `name`'s body on its seeds, its regressions and `count` mutations of its seeds; fails naming
/// every input whose property failed.
fn replay(name: &str, count: usize) {
    let body = target(name).expect("a target of that name");
    let seeds = inputs("seeds", name);
    assert!(!seeds.is_empty(), "fuzz/seeds/{name}/ holds no seed");
    let regressions = inputs("regressions", name);
    let seed: u64 = std::env::var("AGENTRT_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED);
    let scale: usize = std::env::var("AGENTRT_FUZZ_MUTATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let began = Instant::now();
    let mut failed = Vec::new();
    // A failing input is kept where it can be added to fuzz/regressions/<target>/ once fixed.
    let kept = std::env::temp_dir().join("agentrt-fuzz-failures").join(name);
    // The input being run by a reader that allocates by what it reads is kept too, as `in-flight`: an
    // abort (a failed allocation) leaves it there.
    std::fs::create_dir_all(&kept).expect("a directory for failing inputs");
    let in_flight = ["gguf", "safetensors_model", "adapter", "component_decode", "component_load"].contains(&name).then(|| kept.join("in-flight"));
    let mut run = |what: String, data: &[u8]| {
        if let Some(file) = &in_flight {
            std::fs::write(file, data).expect("keeping the input in flight");
        }
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| body(data))) {
            let why = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            let file = kept.join(what.replace(['/', ' '], "_"));
            let _ = std::fs::write(&file, data);
            failed.push(format!("{what} (kept as {}): {}", file.display(), why.lines().next().unwrap_or_default()));
        }
    };
    for (path, data) in seeds.iter().chain(&regressions) {
        run(path.display().to_string(), data);
    }
    let name_hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    for index in 0..count * scale {
        let mut rng = Rng(seed ^ name_hash ^ (index as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
        let from = &seeds[rng.below(seeds.len())].1;
        let other = &seeds[rng.below(seeds.len())].1;
        let data = mutate(&mut rng, from, other);
        run(format!("mutation {index} of seed {seed:#x}"), &data);
    }
    eprintln!("{name}: {} seeds, {} regressions, {} mutations in {:.1} s", seeds.len(), regressions.len(), count * scale, began.elapsed().as_secs_f64());
    let _ = std::fs::remove_file(kept.join("in-flight"));
    assert!(failed.is_empty(), "{name}: {} input(s) failed:\n{}", failed.len(), failed.join("\n"));
}

#[test]
fn serve_request() {
    replay("serve_request", 20000);
}

#[test]
fn model_reply() {
    replay("model_reply", 20000);
}

#[test]
fn train_config() {
    replay("train_config", 4000);
}

#[test]
fn gguf() {
    replay("gguf", 1000);
}

#[test]
fn safetensors_model() {
    replay("safetensors_model", 1500);
}

#[test]
fn adapter() {
    replay("adapter", 3000);
}

#[test]
fn component_decode() {
    replay("component_decode", 3000);
}

#[test]
fn component_load() {
    replay("component_load", 150);
}
