//! The sandbox fuzzer: seeded, in-process, on stable Rust (no cargo-fuzz). Each case is built from
//! `(seed, index)` alone, so any case can be replayed by itself, and is one of:
//!
//! - a generated program ([`programs`]): random but mostly well-formed Python of the interpreter's
//!   subset, with hostile statements mixed in, or a few hostile statements alone;
//! - a mutated real program or model reply ([`mutate`]): the repository's programs and HumanEval
//!   solutions, and the replies a model wrote, mutated by token, line and byte;
//! - bytes given to the runner as a guest component ([`wasm`]), as `agentrt exec script.wasm` does, or
//!   as a plug-in tool, as `agentrt exec prog.py --tool x.wasm` does.
//!
//! Each case runs under limits drawn from a few profiles (the shipped defaults, short, tight, a wall-time
//! bound with unlimited fuel, roomy), and every run is checked: no host panic (`catch_unwind` around each
//! run), every refusal a typed error value, and no bound escaped: the report's memory peak within the
//! memory limit, its stdout within the output limit, its tool calls within the call limit, its fuel
//! within the fuel limit, and a run that went past its wall-time limit (plus [`WALL_MARGIN`]) ended
//! with the time error. The process's resident memory is sampled after every case and must stay
//! bounded; a watchdog thread ends the process, naming the case, if a run never returns. Every 250
//! cases a worker runs a normal program and checks its output: the sandbox survives what came before.
//!
//! Two entry points (docs/reliability.md has the numbers):
//!
//! ```text
//! cargo test -p agentrt-runtime --test fuzz                       # CI: 2,000 cases, seed 0x5EED
//! AGENTRT_FUZZ_CASES=100000 AGENTRT_FUZZ_REPORT=/tmp/fuzz.json \
//!   cargo test -p agentrt-runtime --test fuzz -- --ignored --nocapture long_run
//! ```
//!
//! The test profile is enough (the time goes into wasm, which cranelift compiles the same in every
//! profile); `--release` works too.
//!
//! The long run reads `AGENTRT_FUZZ_CASES` (default 100,000), `AGENTRT_FUZZ_SEED` (default 1),
//! `AGENTRT_FUZZ_FIRST` (first case index, default 0), `AGENTRT_FUZZ_JOBS` (concurrent runs, default
//! the number of CPUs), `AGENTRT_FUZZ_HEAVY` (0 leaves out the rare mutated-interpreter cases, which
//! compile 6.7 MB of wasm each), `AGENTRT_FUZZ_VERBOSE` (1 prints every case's input and result) and
//! `AGENTRT_FUZZ_REPORT` (a path for the counts as JSON). To replay case 1234 of seed 1:
//! `AGENTRT_FUZZ_SEED=1 AGENTRT_FUZZ_FIRST=1234 AGENTRT_FUZZ_CASES=1 AGENTRT_FUZZ_VERBOSE=1 cargo test …`.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

mod mutate;
mod programs;
mod rng;
mod wasm;

use agentrt_environments::wiki::reply::parse_reply;
use agentrt_rollout::ReplyAction;
use agentrt_runtime::{ComponentCache, FixtureTools, GuestComponent, Limit, Limits, ProgramError, RunReport, Sandbox, SandboxConfig, SandboxError};
use rng::Rng;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use wasm::WasmOrigin;

/// The CI run's seed and size: about 15 s on 2 cores in the test profile.
const CI_SEED: u64 = 0x5EED;
const CI_CASES: u64 = 2_000;

/// How far past its wall-time limit a run may end with another result than the time error: the epoch
/// ticks every 5 ms and a tool call that never returns gets 500 ms of grace, so a second is far more
/// than any correct run needs and far less than a host call that blocks.
const WALL_MARGIN: Duration = Duration::from_secs(1);

/// A run still going this long after its wall-time limit is a hang: the watchdog ends the process.
const HANG_AFTER: Duration = Duration::from_secs(60);
/// Loading a guest (compiling it) has no wall-time limit of its own; a mutated interpreter takes
/// seconds to compile, so its bound is generous.
const LOAD_HANG_AFTER: Duration = Duration::from_secs(600);

/// How often a worker checks that a normal program still runs correctly.
const SURVIVAL_EVERY: u64 = 250;

const NORMAL: &str =
    "hits = search_pages(\"capital of France\")\nsections = view_sections(hits[0][\"page_id\"])\nprint(read_section(sections[0][\"section_id\"]))\n";
const NORMAL_OUTPUT: &str = "Paris is the capital and most populous city of France.\n";

#[derive(Clone, Debug)]
struct Settings {
    seed: u64,
    first: u64,
    cases: u64,
    jobs: usize,
    /// Whether the rare mutated-interpreter cases are included.
    heavy: bool,
    verbose: bool,
    report: Option<PathBuf>,
    progress_every: u64,
}

impl Settings {
    fn from_env() -> Settings {
        fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
            match std::env::var(name) {
                Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
                Err(_) => default,
            }
        }
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        Settings {
            seed: var("AGENTRT_FUZZ_SEED", 1),
            first: var("AGENTRT_FUZZ_FIRST", 0),
            cases: var("AGENTRT_FUZZ_CASES", 100_000),
            jobs: var("AGENTRT_FUZZ_JOBS", cpus).max(1),
            heavy: var("AGENTRT_FUZZ_HEAVY", 1u8) != 0,
            verbose: var("AGENTRT_FUZZ_VERBOSE", 0u8) != 0,
            report: std::env::var_os("AGENTRT_FUZZ_REPORT").map(PathBuf::from),
            progress_every: 2_000,
        }
    }
}

/// What one case gives the sandbox.
enum Input {
    Program(String),
    Reply(String),
    Wasm {
        bytes: Vec<u8>,
        program: String,
    },
    /// Bytes loaded as a plug-in tool, then a program that calls it.
    Plugin {
        bytes: Vec<u8>,
        program: String,
    },
}

struct Case {
    index: u64,
    origin: &'static str,
    input: Input,
    limits: Limits,
}

impl Case {
    /// A stable fingerprint of the input and its limits (FNV-1a), to show that a seed gives the same cases.
    fn fingerprint(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                h ^= *b as u64;
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        eat(self.origin.as_bytes());
        match &self.input {
            Input::Program(p) | Input::Reply(p) => eat(p.as_bytes()),
            Input::Wasm { bytes, program } | Input::Plugin { bytes, program } => {
                eat(bytes);
                eat(program.as_bytes());
            }
        }
        eat(format!("{:?}", self.limits).as_bytes());
        h
    }

    fn describe(&self) -> String {
        let input = match &self.input {
            Input::Program(p) => format!("program:\n{}", clip(p, 4_000)),
            Input::Reply(r) => format!("reply:\n{}", clip(r, 4_000)),
            Input::Wasm { bytes, program } | Input::Plugin { bytes, program } => {
                format!("{} bytes of wasm (first 64: {:02x?}), then program:\n{}", bytes.len(), &bytes[..bytes.len().min(64)], clip(program, 2_000))
            }
        };
        format!("case {} ({}), limits {:?}, {input}", self.index, self.origin, self.limits)
    }
}

fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// The limits of a case, from one of five profiles.
fn limits_for(rng: &mut Rng) -> Limits {
    let default = Limits::default();
    match rng.below(20) {
        // The shipped defaults (`Limits::default`, shared by `exec` and training): 200 M fuel, 64 MiB, 2 s, 64 KiB of output, 32 tool calls.
        0..=6 => default,
        // Short: a runaway program ends in a tenth of the time.
        7..=12 => Limits { fuel: 20_000_000, timeout: Duration::from_secs(1), ..default },
        // Tight: every bound small, down to a memory limit the interpreter cannot even start in.
        13..=15 => Limits {
            fuel: *rng.pick(&[10_000, 1_000_000, 5_000_000, 20_000_000]),
            memory_bytes: *rng.pick(&[1 << 20, 4 << 20, 16 << 20, 32 << 20]),
            timeout: Duration::from_secs(1),
            max_output_bytes: *rng.pick(&[0, 1, 100, 4_096]),
            max_host_calls: *rng.pick(&[0, 1, 3, 10]),
        },
        // Wall time alone: fuel without bound, a short deadline.
        16 | 17 => Limits { fuel: u64::MAX / 2, timeout: Duration::from_millis(*rng.pick(&[10, 30, 100, 250])), ..default },
        // Roomy: up to half the engine's memory ceiling, more output and calls.
        _ => Limits {
            fuel: 400_000_000,
            memory_bytes: *rng.pick(&[128 << 20, 256 << 20]),
            timeout: Duration::from_secs(3),
            max_output_bytes: 1 << 20,
            max_host_calls: 256,
        },
    }
}

/// What cases are made from, loaded once.
struct Material {
    corpus: mutate::Corpus,
    plugin: Vec<u8>,
    interpreter: Vec<u8>,
}

impl Material {
    fn load() -> Material {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        Material {
            corpus: mutate::Corpus::load(&root),
            plugin: std::fs::read(agentrt_runtime::EXAMPLE_PLUGIN_WASM).expect("the example plug-in, built by build.rs"),
            interpreter: std::fs::read(env!("AGENTRT_INTERPRETER_WASM")).expect("the interpreter, built by build.rs"),
        }
    }
}

fn make_case(settings: &Settings, material: &Material, index: u64) -> Case {
    let mut rng = Rng::for_case(settings.seed, index);
    let limits = limits_for(&mut rng);
    let (origin, input) = match rng.below(100) {
        0..=44 => ("generated", Input::Program(programs::generate(&mut rng))),
        45..=54 => {
            let n = rng.between(1, 3);
            let parts: Vec<String> =
                (0..n).map(|_| if rng.percent(25) { format!("print({})", programs::tool_call(&mut rng)) } else { programs::hostile(&mut rng) }).collect();
            ("hostile", Input::Program(parts.join("\n") + "\n"))
        }
        55..=81 => {
            let programs = &material.corpus.programs;
            let original = &programs[rng.below(programs.len())];
            ("mutated-program", Input::Program(mutate::mutate(&mut rng, original, &material.corpus)))
        }
        82..=89 => {
            let replies = &material.corpus.replies;
            let original = &replies[rng.below(replies.len())];
            ("mutated-reply", Input::Reply(mutate::mutate(&mut rng, original, &material.corpus)))
        }
        _ => {
            let kind = if settings.heavy && rng.below(500) == 0 {
                WasmOrigin::MutatedInterpreter
            } else {
                *rng.pick(&[WasmOrigin::Random, WasmOrigin::Sections, WasmOrigin::MutatedPlugin, WasmOrigin::MutatedPlugin, WasmOrigin::MutatedPluginAsTool])
            };
            let bytes = match kind {
                WasmOrigin::Random => wasm::random(&mut rng),
                WasmOrigin::Sections => wasm::sections(&mut rng),
                WasmOrigin::MutatedPlugin | WasmOrigin::MutatedPluginAsTool => wasm::mutated(&mut rng, &material.plugin),
                WasmOrigin::MutatedInterpreter => wasm::mutated(&mut rng, &material.interpreter),
            };
            if kind == WasmOrigin::MutatedPluginAsTool {
                (kind.name(), Input::Plugin { bytes, program: programs::plugin_program(&mut rng) })
            } else {
                (kind.name(), Input::Wasm { bytes, program: programs::generate(&mut rng) })
            }
        }
    };
    Case { index, origin, input, limits }
}

/// Polls a future inside `catch_unwind`: a panic anywhere in a run becomes a value to count.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(move || inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Err(payload) => Poll::Ready(Err(panic_message(payload))),
        }
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Gaps in the stall monitor's 10 ms sleeps longer than this are recorded as host stalls.
const STALL: Duration = Duration::from_millis(250);

/// The host stalls seen so far: when each ended and how long it was. A stall is the whole process not
/// being scheduled (a loaded or paused machine): the monitor thread, which only sleeps, woke late.
static STALLS: Mutex<Vec<(Instant, Duration)>> = Mutex::new(Vec::new());

/// Sleeps 10 ms at a time and records every wake-up later than [`STALL`], until `finished`.
fn monitor_stalls(finished: Arc<AtomicBool>) {
    while !finished.load(Ordering::Relaxed) {
        let before = Instant::now();
        std::thread::sleep(Duration::from_millis(10));
        let gap = before.elapsed();
        if gap > STALL {
            STALLS.lock().unwrap().push((Instant::now(), gap));
        }
    }
}

/// The longest host stall that overlapped `from..to`.
fn stall_during(from: Instant, to: Instant) -> Option<Duration> {
    STALLS.lock().unwrap().iter().filter(|(end, gap)| *end >= from && end.checked_sub(*gap).is_none_or(|start| start <= to)).map(|(_, gap)| *gap).max()
}

/// What every run is checked for; each string names a bound that escaped. A run that went past its
/// wall-time limit while the whole process was stalled for at least [`WALL_MARGIN`] (`stalled`) is
/// not counted: a program can only end its run late without the time error when the host did not run
/// it, and a stall of the process says the host ran nothing.
fn violations(report: &RunReport, limits: &Limits, stalled: Option<Duration>) -> Vec<String> {
    let mut found = Vec::new();
    if report.peak_memory_bytes > limits.memory_bytes {
        found.push(format!("memory peak {} above the limit {}", report.peak_memory_bytes, limits.memory_bytes));
    }
    if report.stdout.len() > limits.max_output_bytes {
        found.push(format!("stdout of {} bytes above the limit {}", report.stdout.len(), limits.max_output_bytes));
    }
    if report.host_calls.len() > limits.max_host_calls as usize {
        found.push(format!("{} tool calls above the limit {}", report.host_calls.len(), limits.max_host_calls));
    }
    if report.fuel_used > limits.fuel {
        found.push(format!("fuel {} above the limit {}", report.fuel_used, limits.fuel));
    }
    let timed_out = matches!(report.result, Err(ProgramError::LimitExceeded { limit: Limit::Time }));
    if report.wall_time > limits.timeout + WALL_MARGIN && !timed_out && stalled.is_none_or(|s| s < WALL_MARGIN) {
        found.push(format!("ran {:?} against a wall limit of {:?} and ended with {}", report.wall_time, limits.timeout, category(&report.result)));
    }
    if let Err(error) = &report.result {
        if error.to_string().trim().is_empty() {
            found.push(format!("an error without a message: {error:?}"));
        }
    }
    found
}

fn category(result: &Result<agentrt_runtime::Outcome, ProgramError>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(e) => e.kind_name(),
    }
}

fn sandbox_error_kind(error: &SandboxError) -> &'static str {
    match error {
        SandboxError::Io { .. } => "io",
        SandboxError::InvalidComponent { .. } => "invalid-component",
        SandboxError::UnsatisfiedImport { .. } => "unsatisfied-import",
        SandboxError::WrongWorld { .. } => "wrong-world",
        SandboxError::UnusableTool { .. } => "unusable-tool",
        SandboxError::ToolNameTaken { .. } => "tool-name-taken",
        SandboxError::Config(_) => "config",
        SandboxError::Engine(_) => "engine",
    }
}

/// How one case ended.
struct Finding {
    category: String,
    panic: Option<String>,
    violations: Vec<String>,
    /// For program runs: the wall time and its limit.
    wall: Option<(Duration, Duration)>,
    guest_trap: Option<String>,
    /// The error's message, for `AGENTRT_FUZZ_VERBOSE`.
    detail: String,
    /// For a run that ended past its wall-time limit plus the margin during a host stall: the stall.
    overrun_in_stall: Option<Duration>,
}

impl Finding {
    /// A case that ran no program: its category, what it broke and the error's message.
    fn without_run(category: String, violations: Vec<String>, detail: String) -> Finding {
        Finding { category, panic: None, violations, wall: None, guest_trap: None, detail, overrun_in_stall: None }
    }

    /// A case the host panicked on, with the panic's message.
    fn host_panic(message: String) -> Finding {
        Finding { panic: Some(message), ..Finding::without_run("host-panic".into(), Vec::new(), String::new()) }
    }
}

/// Everything counted over a run of the fuzzer.
#[derive(Default, serde::Serialize)]
struct Stats {
    seed: u64,
    first: u64,
    cases: u64,
    jobs: usize,
    program_runs: u64,
    categories: BTreeMap<String, u64>,
    by_origin: BTreeMap<String, BTreeMap<String, u64>>,
    panics: u64,
    panic_cases: Vec<String>,
    violation_count: u64,
    violations: Vec<String>,
    guest_traps: Vec<String>,
    survival_checks: u64,
    runs_past_wall_limit: u64,
    /// Runs past their wall-time limit plus the margin, not counted as violations because the whole
    /// process was stalled meanwhile.
    overruns_during_host_stalls: u64,
    host_stalls: u64,
    longest_host_stall_ms: f64,
    max_overshoot_ms: f64,
    max_wall_ms: f64,
    total_wall_s: f64,
    rss_start_bytes: u64,
    rss_after_first_tenth_bytes: u64,
    rss_end_bytes: u64,
    rss_peak_bytes: u64,
    rss_bound_bytes: u64,
    fingerprint: String,
    elapsed_s: f64,
    cases_per_s: f64,
    cpu: String,
}

impl Stats {
    fn add(&mut self, case: &Case, finding: Finding) {
        self.cases += 1;
        *self.categories.entry(finding.category.clone()).or_default() += 1;
        *self.by_origin.entry(case.origin.to_string()).or_default().entry(finding.category.clone()).or_default() += 1;
        // Findings are printed as they happen too: a long run's log has them before it ends.
        if let Some(message) = finding.panic {
            self.panics += 1;
            let text = format!("{message}\n{}", case.describe());
            eprintln!("fuzz: HOST PANIC: {text}");
            if self.panic_cases.len() < 20 {
                self.panic_cases.push(text);
            }
        }
        for v in finding.violations {
            self.violation_count += 1;
            let text = format!("{v}\n{}", case.describe());
            eprintln!("fuzz: VIOLATION: {text}");
            if self.violations.len() < 20 {
                self.violations.push(text);
            }
        }
        if let Some((wall, timeout)) = finding.wall {
            self.program_runs += 1;
            self.total_wall_s += wall.as_secs_f64();
            self.max_wall_ms = self.max_wall_ms.max(wall.as_secs_f64() * 1e3);
            if wall > timeout {
                self.runs_past_wall_limit += 1;
                self.max_overshoot_ms = self.max_overshoot_ms.max((wall - timeout).as_secs_f64() * 1e3);
            }
        }
        if let Some(stall) = finding.overrun_in_stall {
            self.overruns_during_host_stalls += 1;
            eprintln!(
                "fuzz: a run ended {:?} late during a host stall of {stall:?}: case {} ({})",
                finding.wall.map(|(w, t)| w - t).unwrap_or_default(),
                case.index,
                case.origin
            );
        }
        if let Some(trap) = finding.guest_trap {
            let text = format!("{}\n{}", clip(&trap, 2_000), case.describe());
            eprintln!("fuzz: GUEST TRAP: {text}");
            if self.guest_traps.len() < 20 {
                self.guest_traps.push(text);
            }
        }
    }

    fn summary(&self) -> String {
        let mut s = format!(
            "fuzz: seed {:#x}, cases {}..{} ({} cases, {} program runs) on {} jobs in {:.1} s ({:.1} cases/s); fingerprint {}\n",
            self.seed,
            self.first,
            self.first + self.cases,
            self.cases,
            self.program_runs,
            self.jobs,
            self.elapsed_s,
            self.cases_per_s,
            self.fingerprint
        );
        s += &format!("host panics: {}; bound violations: {}; survival checks passed: {}\n", self.panics, self.violation_count, self.survival_checks);
        s += &format!(
            "wall time: {} runs ended past their limit, the latest {:.1} ms past it; the longest run {:.1} ms; {} runs past it by more than {:?} during a host stall\n",
            self.runs_past_wall_limit, self.max_overshoot_ms, self.max_wall_ms, self.overruns_during_host_stalls, WALL_MARGIN
        );
        s += &format!("host stalls (the process not scheduled for over {:?}): {}, the longest {:.0} ms\n", STALL, self.host_stalls, self.longest_host_stall_ms);
        s += &format!(
            "resident memory: {} MiB at start, {} MiB after the first tenth, {} MiB at the end, {} MiB peak (bound {} MiB)\n",
            self.rss_start_bytes >> 20,
            self.rss_after_first_tenth_bytes >> 20,
            self.rss_end_bytes >> 20,
            self.rss_peak_bytes >> 20,
            self.rss_bound_bytes >> 20
        );
        s += "outcomes:\n";
        for (category, n) in &self.categories {
            s += &format!("  {category:<40} {n:>8}\n");
        }
        s += "by origin:\n";
        for (origin, categories) in &self.by_origin {
            let total: u64 = categories.values().sum();
            let parts: Vec<String> = categories.iter().map(|(c, n)| format!("{c} {n}")).collect();
            s += &format!("  {origin} ({total}): {}\n", parts.join(", "));
        }
        for trap in &self.guest_traps {
            s += &format!("guest trap: {trap}\n");
        }
        s
    }

    fn assert_clean(&self) {
        let mut problems = Vec::new();
        if self.panics > 0 {
            problems.push(format!("{} host panics:\n{}", self.panics, self.panic_cases.join("\n---\n")));
        }
        if self.violation_count > 0 {
            problems.push(format!("{} bound violations:\n{}", self.violation_count, self.violations.join("\n---\n")));
        }
        if self.rss_peak_bytes > self.rss_bound_bytes {
            problems.push(format!("resident memory reached {} MiB, above the bound of {} MiB", self.rss_peak_bytes >> 20, self.rss_bound_bytes >> 20));
        }
        assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    }
}

/// The process's resident memory, in bytes (0 where /proc is missing).
fn rss_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<u64>().ok()).map_or(0, |kb| kb << 10)
}

fn cpu_name() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map_or_else(|| "unknown".into(), |s| s.trim().to_string())
}

/// The two sandboxes: one for programs (the shared component cache, the example plug-in loaded), one
/// for loading fuzzed components, with a cache of its own in `scratch` so that mutants that compile
/// never reach the user's cache. Its cache starts with the interpreter's entry copied from the shared
/// one, which saves compiling the interpreter again.
async fn sandboxes(scratch: &Path) -> (Arc<Sandbox>, Arc<Sandbox>) {
    let config = SandboxConfig { plugins: vec![PathBuf::from(agentrt_runtime::EXAMPLE_PLUGIN_WASM)], ..SandboxConfig::default() };
    let programs = Sandbox::new(config, Arc::new(FixtureTools::default())).await.expect("the programs' sandbox");
    let cache_dir = scratch.join("components");
    ComponentCache::default_location().copy_entries_of(agentrt_runtime::INTERPRETER_ORIGIN, &cache_dir).expect("the scratch cache");
    let config = SandboxConfig { cache_dir: Some(cache_dir), ..SandboxConfig::default() };
    let components = Sandbox::new(config, Arc::new(FixtureTools::default())).await.expect("the components' sandbox");
    (Arc::new(programs), Arc::new(components))
}

/// Runs a program (in `guest`, or the built-in interpreter) and reads its report the way callers do.
async fn run_checked(sandbox: &Sandbox, guest: Option<&GuestComponent>, program: &str, limits: Limits) -> Finding {
    let begun = Instant::now();
    let run = CatchUnwind(Box::pin(async {
        let report = match guest {
            Some(guest) => sandbox.run_guest(guest, program, limits).await,
            None => sandbox.run_with_limits(program, limits).await,
        };
        // What the episode runner, `agentrt exec` and the trainer do with a report.
        let _ = report.observation();
        let _ = serde_json::to_string(&report).expect("a report serialises");
        report
    }));
    let outcome = run.await;
    let stalled = stall_during(begun, Instant::now());
    match outcome {
        Err(message) => Finding::host_panic(message),
        Ok(report) => {
            let guest_trap = match &report.result {
                Err(ProgramError::GuestTrap { message }) => Some(message.clone()),
                _ => None,
            };
            let detail = report.result.as_ref().err().map(|e| clip(&e.to_string(), 300)).unwrap_or_default();
            Finding {
                category: category(&report.result),
                panic: None,
                violations: violations(&report, &limits, stalled),
                overrun_in_stall: (report.wall_time > limits.timeout + WALL_MARGIN).then_some(stalled).flatten(),
                wall: Some((report.wall_time, limits.timeout)),
                guest_trap,
                detail,
            }
        }
    }
}

struct Shared {
    settings: Settings,
    material: Material,
    programs: Arc<Sandbox>,
    components: Arc<Sandbox>,
    scratch: PathBuf,
    next: AtomicU64,
    stats: Mutex<Stats>,
    /// Cases running now: their start and how long they may take before the watchdog calls them hung.
    in_flight: Mutex<HashMap<u64, (Instant, Duration, String)>>,
    rss_peak: AtomicU64,
}

async fn run_case(shared: &Shared, case: &Case) -> Finding {
    match &case.input {
        Input::Program(program) => run_checked(&shared.programs, None, program, case.limits).await,
        Input::Reply(reply) => match std::panic::catch_unwind(|| parse_reply(reply)) {
            Err(payload) => Finding::host_panic(panic_message(payload)),
            Ok(ReplyAction::Program(program)) => run_checked(&shared.programs, None, &program, case.limits).await,
            Ok(ReplyAction::Answer(_)) => Finding::without_run("reply-answer".into(), Vec::new(), String::new()),
            Ok(ReplyAction::Nothing) => Finding::without_run("reply-nothing".into(), Vec::new(), String::new()),
        },
        Input::Wasm { bytes, program } => {
            let path = shared.scratch.join(format!("case-{}.wasm", case.index));
            std::fs::write(&path, bytes).expect("writing the case's wasm");
            let sandbox = shared.components.clone();
            let load_path = path.clone();
            let loaded = tokio::task::spawn_blocking(move || std::panic::catch_unwind(AssertUnwindSafe(|| sandbox.load_guest(&load_path))))
                .await
                .expect("the loading task is not cancelled");
            let _ = std::fs::remove_file(&path);
            match loaded {
                Err(payload) => Finding::host_panic(panic_message(payload)),
                Ok(Err(error)) => {
                    let kind = sandbox_error_kind(&error);
                    let mut violations = Vec::new();
                    if !matches!(error, SandboxError::InvalidComponent { .. } | SandboxError::UnsatisfiedImport { .. } | SandboxError::WrongWorld { .. }) {
                        violations.push(format!("a fuzzed component was refused with an unexpected error: {error}"));
                    }
                    if error.to_string().trim().is_empty() {
                        violations.push("a refusal without a message".into());
                    }
                    Finding::without_run(format!("wasm-refused:{kind}"), violations, String::new())
                }
                Ok(Ok(guest)) => {
                    let mut finding = run_checked(&shared.components, Some(&guest), program, case.limits).await;
                    finding.category = format!("wasm-loaded:{}", finding.category);
                    finding
                }
            }
        }
        Input::Plugin { bytes, program } => {
            let path = shared.scratch.join(format!("case-{}-tool.wasm", case.index));
            std::fs::write(&path, bytes).expect("writing the case's wasm");
            let config = SandboxConfig { plugins: vec![path.clone()], cache_dir: Some(shared.scratch.join("components")), ..SandboxConfig::default() };
            let built = CatchUnwind(Box::pin(Sandbox::new(config, Arc::new(FixtureTools::default())))).await;
            let _ = std::fs::remove_file(&path);
            match built {
                Err(message) => Finding::host_panic(message),
                Ok(Err(error)) => {
                    let kind = sandbox_error_kind(&error);
                    let mut violations = Vec::new();
                    if matches!(error, SandboxError::Io { .. } | SandboxError::Config(_) | SandboxError::Engine(_)) {
                        violations.push(format!("a fuzzed plug-in was refused with an unexpected error: {error}"));
                    }
                    if error.to_string().trim().is_empty() {
                        violations.push("a refusal without a message".into());
                    }
                    let detail = clip(&error.to_string(), 300);
                    Finding::without_run(format!("plugin-refused:{kind}"), violations, detail)
                }
                Ok(Ok(sandbox)) => {
                    let mut finding = run_checked(&sandbox, None, program, case.limits).await;
                    finding.category = format!("plugin-loaded:{}", finding.category);
                    finding
                }
            }
        }
    }
}

async fn worker(shared: Arc<Shared>) {
    let settings = &shared.settings;
    let end = settings.first + settings.cases;
    let mut since_survival = 0;
    loop {
        let index = shared.next.fetch_add(1, Ordering::Relaxed);
        if index >= end {
            return;
        }
        let case = make_case(settings, &shared.material, index);
        let allowed = match case.input {
            Input::Wasm { .. } | Input::Plugin { .. } => LOAD_HANG_AFTER + case.limits.timeout,
            _ => HANG_AFTER + case.limits.timeout,
        };
        shared.in_flight.lock().unwrap().insert(index, (Instant::now(), allowed, case.origin.to_string()));
        if settings.verbose {
            eprintln!("{}", case.describe());
        }
        let finding = run_case(&shared, &case).await;
        shared.in_flight.lock().unwrap().remove(&index);
        if settings.verbose {
            eprintln!("case {index}: {} {}{}", finding.category, finding.detail, finding.panic.as_deref().map(|p| format!(" PANIC {p}")).unwrap_or_default());
        }
        let rss = rss_bytes("VmRSS:");
        shared.rss_peak.fetch_max(rss, Ordering::Relaxed);
        let done = {
            let mut stats = shared.stats.lock().unwrap();
            stats.fingerprint = format!("{:016x}", u64::from_str_radix(&stats.fingerprint, 16).unwrap_or(0).wrapping_add(case.fingerprint()));
            stats.add(&case, finding);
            if stats.cases == settings.cases.div_ceil(10) {
                stats.rss_after_first_tenth_bytes = rss;
            }
            stats.cases
        };
        if settings.progress_every > 0 && done % settings.progress_every == 0 {
            let stats = shared.stats.lock().unwrap();
            eprintln!(
                "fuzz: {done}/{} cases, {} panics, {} violations, rss {} MiB, {}",
                settings.cases,
                stats.panics,
                stats.violation_count,
                rss >> 20,
                stats.categories.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", ")
            );
        }
        since_survival += 1;
        if since_survival == SURVIVAL_EVERY {
            since_survival = 0;
            let report = shared.programs.run_with_limits(NORMAL, Limits::default()).await;
            let mut stats = shared.stats.lock().unwrap();
            if report.is_ok() && report.stdout == NORMAL_OUTPUT {
                stats.survival_checks += 1;
            } else {
                stats.violation_count += 1;
                let text = format!("after case {index}, a normal program failed: {:?}, stdout {:?}", report.result, report.stdout);
                eprintln!("fuzz: VIOLATION: {text}");
                stats.violations.push(text);
            }
        }
    }
}

/// Runs `settings.cases` cases on `settings.jobs` concurrent workers and counts what happened.
fn fuzz(settings: Settings) -> Stats {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(settings.jobs).enable_all().build().expect("a tokio runtime");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let (programs, components) = runtime.block_on(sandboxes(scratch.path()));
    let material = Material::load();
    // Warm up both sandboxes before measuring the resident memory the run starts from.
    runtime.block_on(async {
        assert_eq!(programs.run(NORMAL).await.stdout, NORMAL_OUTPUT);
        assert!(components.run(NORMAL).await.is_ok());
    });
    let rss_start = rss_bytes("VmRSS:");
    let heaviest = Limits { memory_bytes: 256 << 20, ..Limits::default() }.memory_bytes as u64;
    let stats = Stats {
        seed: settings.seed,
        first: settings.first,
        jobs: settings.jobs,
        rss_start_bytes: rss_start,
        // Each concurrent run may hold its memory limit, wasmtime keeps up to 1 MiB of each of the pool's
        // memories resident, and a component being compiled needs room: 1 GiB for all of that.
        rss_bound_bytes: rss_start + settings.jobs as u64 * heaviest + (1 << 30),
        cpu: cpu_name(),
        ..Stats::default()
    };
    let shared = Arc::new(Shared {
        next: AtomicU64::new(settings.first),
        settings: settings.clone(),
        material,
        programs,
        components,
        scratch: scratch.path().to_path_buf(),
        stats: Mutex::new(stats),
        in_flight: Mutex::new(HashMap::new()),
        rss_peak: AtomicU64::new(rss_start),
    });

    let finished = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let shared = shared.clone();
        let finished = finished.clone();
        std::thread::spawn(move || {
            while !finished.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(500));
                let in_flight = shared.in_flight.lock().unwrap();
                if let Some((index, (started, _, origin))) = in_flight.iter().find(|(_, (started, allowed, _))| started.elapsed() > *allowed) {
                    let case = make_case(&shared.settings, &shared.material, *index);
                    eprintln!("fuzz: HANG: case {index} ({origin}) has run for {:?}: {}", started.elapsed(), case.describe());
                    std::process::exit(3);
                }
            }
        })
    };

    let monitor = {
        let finished = finished.clone();
        std::thread::spawn(move || monitor_stalls(finished))
    };

    let started = Instant::now();
    runtime.block_on(async {
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..settings.jobs {
            workers.spawn(worker(shared.clone()));
        }
        while let Some(joined) = workers.join_next().await {
            joined.expect("a fuzz worker failed outside any run");
        }
    });
    finished.store(true, Ordering::Relaxed);
    watchdog.join().expect("the watchdog");
    monitor.join().expect("the stall monitor");

    let mut stats = std::mem::take(&mut *shared.stats.lock().unwrap());
    stats.elapsed_s = started.elapsed().as_secs_f64();
    stats.cases_per_s = stats.cases as f64 / stats.elapsed_s;
    stats.rss_end_bytes = rss_bytes("VmRSS:");
    {
        let stalls = STALLS.lock().unwrap();
        let run = started..started + started.elapsed();
        let during: Vec<Duration> = stalls.iter().filter(|(end, _)| run.contains(end)).map(|(_, gap)| *gap).collect();
        stats.host_stalls = during.len() as u64;
        stats.longest_host_stall_ms = during.iter().max().map_or(0.0, |g| g.as_secs_f64() * 1e3);
    }
    stats.rss_peak_bytes = shared.rss_peak.load(Ordering::Relaxed).max(stats.rss_end_bytes);
    eprint!("{}", stats.summary());
    if let Some(path) = &settings.report {
        std::fs::write(path, serde_json::to_string_pretty(&stats).expect("stats serialise")).expect("writing the report");
        eprintln!("fuzz: counts written to {}", path.display());
    }
    stats
}

/// The CI run: a fixed seed, 2,000 cases on 2 workers.
#[test]
fn seeded_fuzz_finds_no_panic_no_hang_and_no_escaped_bound() {
    let settings = Settings { seed: CI_SEED, first: 0, cases: CI_CASES, jobs: 2, heavy: false, verbose: false, report: None, progress_every: 0 };
    let stats = fuzz(settings);
    assert_eq!(stats.cases, CI_CASES);
    stats.assert_clean();
    // The generator reaches every kind of ending; a change that stopped it from reaching one would
    // silently weaken the test.
    for kind in [
        "ok",
        "syntax",
        "exception",
        "limit-exceeded:fuel",
        "limit-exceeded:memory",
        "limit-exceeded:time",
        "limit-exceeded:output",
        "limit-exceeded:host-calls",
    ] {
        assert!(stats.categories.get(kind).copied().unwrap_or(0) > 0, "no case ended as {kind}: {}", stats.summary());
    }
    assert!(stats.categories.keys().any(|c| c.starts_with("wasm-refused:")), "no fuzzed component was refused");
}

/// The long run (see the module's documentation for its settings).
#[test]
#[ignore = "the long run: AGENTRT_FUZZ_CASES=100000 cargo test -p agentrt-runtime --test fuzz -- --ignored --nocapture long_run"]
fn long_run() {
    let stats = fuzz(Settings::from_env());
    stats.assert_clean();
}

#[test]
fn a_seed_always_builds_the_same_cases() {
    let material = Material::load();
    let settings = |seed| Settings { seed, first: 0, cases: 300, jobs: 1, heavy: false, verbose: false, report: None, progress_every: 0 };
    let prints = |seed| (0..300).map(|i| make_case(&settings(seed), &material, i).fingerprint()).collect::<Vec<_>>();
    assert_eq!(prints(7), prints(7));
    assert_ne!(prints(7), prints(8));
}

/// Programs the fuzzer found ending wrongly, with the ending they must have now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_fuzzer_found_stays_fixed() {
    let sandbox = Sandbox::new(SandboxConfig::default(), Arc::new(FixtureTools::default())).await.expect("sandbox");
    let default = Limits::default();
    // Each program, its limits and the endings it may have; what matters is that it is no longer a
    // guest trap and no bound escapes.
    let found: &[(&str, Limits, &[&str])] = &[
        // Seed 1, case 756: a list of 10**9 values is 16 GB, more than wasm32 can address; Rust's Vec
        // panicked with "capacity overflow" inside the guest, reported as a guest trap with a wasm
        // backtrace. (An interpreter that checks the size first may raise MemoryError instead.)
        ("x = [0] * (10**9)\n", default, &["limit-exceeded:memory", "exception"]),
        // The same through smallvec (a tuple).
        ("x = (0,) * 10**9\n", default, &["limit-exceeded:memory", "exception"]),
        // Seed 1, cases 19429 and 127585: the output bound cut `é` in half, and the half became U+FFFD,
        // 3 bytes of stdout under a limit of 1.
        ("print('é✓ 中文', 3.14159)\n", Limits { max_output_bytes: 1, ..default }, &["limit-exceeded:output"]),
        // Seed 1, case 27758 (101 bytes under a limit of 100), and cases 157541 and 194468 (65,537 and
        // 65,538 bytes under the default 65,536).
        ("print('x' + 'é' * 100)\n", Limits { max_output_bytes: 100, ..default }, &["limit-exceeded:output"]),
        ("while True:\n    print('é✓ 中文')\n", default, &["limit-exceeded:output"]),
        // Found looking into the cases above: what a program printed after its last newline stayed in
        // the guest's line buffer and was lost (`print('abcdef', end='')` printed nothing). Now it
        // arrives, and past the bound it is the output limit.
        ("print('abc', end='')\nprint('def', end='')\n", default, &["ok"]),
        ("print('é✓ 中文', 3.14159, end='')\n", Limits { max_output_bytes: 1, ..default }, &["limit-exceeded:output"]),
    ];
    for (program, limits, endings) in found {
        let report = sandbox.run_with_limits(program, *limits).await;
        let ending = category(&report.result);
        assert!(endings.contains(&ending.as_str()), "{program:?} ended {ending}: {:?}", report.result);
        if ending == "exception" {
            assert!(matches!(&report.result, Err(ProgramError::Exception { type_name, .. }) if type_name == "MemoryError"), "{:?}", report.result);
        }
        assert_eq!(violations(&report, limits, None), Vec::<String>::new(), "{program:?}");
        if ending == "ok" {
            assert_eq!(report.stdout, "abcdef", "{program:?}");
        }
        let normal = sandbox.run(NORMAL).await;
        assert_eq!(normal.stdout, NORMAL_OUTPUT, "after {program:?}");
    }
}
