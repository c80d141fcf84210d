//! The soak: `agentrt train` plays episodes of sandboxed programs, several at once, against a real index
//! of the project's corpus, with a plug-in whose tool traps on a third of its inputs and a judge served by
//! `agentrt serve`, while faults are injected at random: the trainer killed with SIGKILL, the judge killed
//! (back within the client's retries, or only after the run failed on it), the run directory's disk
//! filled, and the plug-in replaced by a build that traps as it starts. After each fault that ends the trainer, the run is resumed with `--resume`; at the end its
//! metrics and transcripts must line up step for step (every step once, every episode once, the questions of
//! each step those the seeded data order gives a run with no fault), and its TensorBoard file must read
//! whole, every step in it.
//!
//! The run directory lives on a tmpfs of its own size, mounted in a user and mount namespace
//! (`unshare --user --map-root-user --mount`: no privilege needed), so "disk full" is the kernel's ENOSPC.
//! The test re-runs itself inside that namespace.
//!
//! `soak_in_ci` is a short seeded run (a few steps); `long_run` is sized by the environment:
//!
//! ```sh
//! AGENTRT_SOAK_EPISODES=1000 AGENTRT_SOAK_REPORT=/tmp/soak.json \
//!   cargo test --test cli -- --ignored --nocapture soak::long_run
//! ```
//!
//! | variable | default (CI / long) | meaning |
//! |---|---|---|
//! | `AGENTRT_SOAK_EPISODES` | 16 / 1000 | episodes in the run (steps x batch size x rollouts) |
//! | `AGENTRT_SOAK_BATCH` | 2 / 4 | questions per step |
//! | `AGENTRT_SOAK_ROLLOUTS` | 2 / 4 | episodes per question |
//! | `AGENTRT_SOAK_SEED` | 7 | the seed of the run and of the faults |
//! | `AGENTRT_SOAK_FAULTS` | 5 / 20 | faults injected, at most |
//! | `AGENTRT_SOAK_PAGES` | 8 / 40 | pages of data/wiki/pages.jsonl in the index (the first that have train questions) |
//! | `AGENTRT_SOAK_INDEX_DIR` | none | an existing index (its pages' questions are used) instead of building one |
//! | `AGENTRT_SOAK_F1_WEIGHT` | 1 | `algorithm.f1_weight`: 0 leaves the judge and the program bonus alone in the reward, so groups whose episodes all earn the same are skipped and most steps update nothing (a cheaper long run) |
//! | `AGENTRT_SOAK_BIN` | this build's `agentrt` | the binary to soak (a release build runs the long soak several times faster) |
//! | `AGENTRT_SOAK_REPORT` | none | a path for what happened, as JSON |

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::{hand_written_plugin, read_jsonl, Describe};
use agentrt_policy::rand::rngs::StdRng;
use agentrt_policy::rand::seq::SliceRandom;
use agentrt_policy::rand::{Rng, SeedableRng};
use agentrt_trainer::StepMetrics;

/// The binary soaked: `AGENTRT_SOAK_BIN`, or this build's.
fn agentrt() -> Command {
    Command::new(std::env::var_os("AGENTRT_SOAK_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_agentrt").into()))
}

/// The environment variable that marks the run inside the namespace.
const INSIDE: &str = "AGENTRT_SOAK_INSIDE_NAMESPACE";

#[test]
fn soak_in_ci() {
    if !inside_namespace("soak_in_ci", false) {
        return;
    }
    soak(Settings::from_env(Sizes { episodes: 16, batch: 2, rollouts: 2, faults: 5, pages: 8 }));
}

#[test]
#[ignore = "long: run with --ignored, sized by AGENTRT_SOAK_* (see the module's documentation)"]
fn long_run() {
    if !inside_namespace("long_run", true) {
        return;
    }
    soak(Settings::from_env(Sizes { episodes: 1000, batch: 4, rollouts: 4, faults: 20, pages: 40 }));
}

/// Runs this test again inside a new user and mount namespace, where it may mount a tmpfs; true when this
/// process is that run.
fn inside_namespace(test: &str, ignored: bool) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return true;
    }
    let exe = std::env::current_exe().unwrap();
    // The test's name as the harness knows it: its path below the test crate's root (`soak::soak_in_ci`).
    let name = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    };
    let mut cmd = Command::new("unshare");
    cmd.args(["--user", "--map-root-user", "--mount"]).arg(&exe).args(["--exact", &name, "--nocapture", "--test-threads", "1"]);
    if ignored {
        cmd.arg("--ignored");
    }
    let status =
        cmd.env(INSIDE, "1").status().unwrap_or_else(|e| panic!("running `unshare` (util-linux) to get a mount namespace for the run directory's tmpfs: {e}"));
    assert!(
        status.success(),
        "the soak inside its namespace failed ({status}); see its output above. If `unshare --user --map-root-user --mount` \
         itself is refused, this kernel does not allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone)"
    );
    false
}

struct Sizes {
    episodes: usize,
    batch: usize,
    rollouts: usize,
    faults: usize,
    pages: usize,
}

struct Settings {
    steps: usize,
    batch: usize,
    rollouts: usize,
    seed: u64,
    faults: usize,
    pages: usize,
    index_dir: Option<PathBuf>,
    f1_weight: f64,
    report: Option<PathBuf>,
}

impl Settings {
    fn from_env(d: Sizes) -> Settings {
        let num =
            |name: &str, default: usize| -> usize { std::env::var(name).map(|v| v.parse().unwrap_or_else(|e| panic!("{name}={v}: {e}"))).unwrap_or(default) };
        let (batch, rollouts) = (num("AGENTRT_SOAK_BATCH", d.batch), num("AGENTRT_SOAK_ROLLOUTS", d.rollouts));
        let episodes = num("AGENTRT_SOAK_EPISODES", d.episodes);
        assert!(batch > 0 && rollouts > 0 && episodes >= batch * rollouts, "AGENTRT_SOAK_EPISODES must hold at least one step");
        Settings {
            steps: episodes.div_ceil(batch * rollouts),
            batch,
            rollouts,
            seed: num("AGENTRT_SOAK_SEED", 7) as u64,
            faults: num("AGENTRT_SOAK_FAULTS", d.faults),
            pages: num("AGENTRT_SOAK_PAGES", d.pages),
            index_dir: std::env::var_os("AGENTRT_SOAK_INDEX_DIR").map(PathBuf::from),
            f1_weight: std::env::var("AGENTRT_SOAK_F1_WEIGHT").map_or(1.0, |v| v.parse().unwrap_or_else(|e| panic!("AGENTRT_SOAK_F1_WEIGHT={v}: {e}"))),
            report: std::env::var_os("AGENTRT_SOAK_REPORT").map(PathBuf::from),
        }
    }
}

/// What the driver injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
enum Fault {
    /// SIGKILL of the trainer, at any point of a step.
    KillTrainer,
    /// SIGKILL of the judge, restarted on its port within the judge client's retries.
    JudgeBlip,
    /// SIGKILL of the judge, restarted only once the trainer has ended (a run needing it fails).
    JudgeDown,
    /// The run directory's filesystem filled to the last byte, freed once the trainer has ended.
    DiskFull,
    /// SIGKILL of the trainer, and its plug-in replaced by one whose `describe()` traps (a bad deploy):
    /// the next start must refuse it, naming the file; the good build is put back and the run resumed.
    PluginTrap,
}

const FAULTS: [Fault; 5] = [Fault::KillTrainer, Fault::JudgeBlip, Fault::JudgeDown, Fault::DiskFull, Fault::PluginTrap];

/// One fault and what came of it.
#[derive(Debug, serde::Serialize)]
struct Injected {
    fault: Fault,
    /// The last step in metrics.jsonl when it was injected.
    after_step: usize,
    /// How the trainer ended: `killed`, `failed: <its last error line>`, `survived` or `finished`.
    trainer: String,
}

/// A running `agentrt serve` on a fixed loopback port: the judge.
struct Judge {
    child: Child,
    port: u16,
    log: PathBuf,
    starts: usize,
}

impl Judge {
    fn start(port: u16, log: PathBuf) -> Judge {
        let mut judge = Judge { child: Self::spawn(port, &log, 0), port, log, starts: 1 };
        judge.wait_ready();
        judge
    }

    fn spawn(port: u16, log: &Path, n: usize) -> Child {
        let log = std::fs::File::create(log.with_extension(format!("{n}.log"))).unwrap();
        agentrt()
            .args(["serve", "--model", "smollm2-135m", "--served-model-name", &Self::name(port), "--port", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// Waits for the URL line `serve` prints once it listens.
    fn wait_ready(&mut self) {
        let mut line = String::new();
        BufReader::new(self.child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.trim().ends_with(&format!(":{}/v1", self.port)), "the judge printed {line:?} (log: {})", self.log.display());
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn restart(&mut self) {
        self.child = Self::spawn(self.port, &self.log, self.starts);
        self.starts += 1;
        self.wait_ready();
    }

    /// The judge's model name, new for every soak: verdicts are cached by it (`$AGENTRT_CACHE/judge`), and a
    /// soak whose verdicts all came from an earlier one's cache would never need its judge.
    fn name(port: u16) -> String {
        format!("soak-judge-{}-{port}", std::process::id())
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }
}

impl Drop for Judge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The repository's corpus and questions.
fn data(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/wiki").join(file)
}

/// The index and the train questions of its pages: an existing index, or one built from the first
/// `pages` pages of the corpus that have train questions.
fn index_and_questions(s: &Settings, work: &Path) -> (PathBuf, PathBuf) {
    let questions: Vec<serde_json::Value> = read_jsonl(&data("questions.jsonl")).into_iter().filter(|q| q["split"] == "train").collect();
    let (index, pages): (PathBuf, Option<HashSet<String>>) = match &s.index_dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let mut chosen = Vec::new();
            for q in &questions {
                let page = q["page"].as_str().unwrap().to_string();
                if chosen.len() < s.pages && !chosen.contains(&page) {
                    chosen.push(page);
                }
            }
            let chosen: HashSet<String> = chosen.into_iter().collect();
            let text = std::fs::read_to_string(data("pages.jsonl")).unwrap();
            let subset: Vec<&str> =
                text.lines().filter(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_str().is_some_and(|id| chosen.contains(id))).collect();
            assert_eq!(subset.len(), chosen.len(), "every chosen page is in pages.jsonl");
            let pages_file = work.join("pages.jsonl");
            std::fs::write(&pages_file, subset.join("\n") + "\n").unwrap();
            let index = work.join("index");
            let out = agentrt().args(["index", "--pages"]).arg(&pages_file).arg("--index-dir").arg(&index).output().unwrap();
            assert!(out.status.success(), "agentrt index failed:\n{}", String::from_utf8_lossy(&out.stderr));
            (index, Some(chosen))
        }
    };
    let kept: Vec<String> =
        questions.iter().filter(|q| pages.as_ref().is_none_or(|p| p.contains(q["page"].as_str().unwrap()))).map(|q| q.to_string()).collect();
    let file = work.join("questions.jsonl");
    std::fs::write(&file, kept.join("\n") + "\n").unwrap();
    (index, file)
}

/// The run's config: the default model from the committed warm start (models/smollm2-135m-wiki-read, which
/// writes a search-and-read program, then answers), played as it was trained, with the flaky plug-in listed
/// after its prompt; two turns, a checkpoint every step. The answer's token F1 is part of the reward (unless
/// `AGENTRT_SOAK_F1_WEIGHT` says 0), so the groups differ and steps update the adapters (with the judge
/// alone, most groups earn the same and are skipped).
fn write_config(s: &Settings, work: &Path, questions: &Path, judge: &str) -> PathBuf {
    let warm_start = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/smollm2-135m-wiki-read");
    let agent: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(warm_start.join("agent.json")).unwrap()).unwrap();
    let prompt = format!("{}\n{{plugins}}", agent["system_prompt"].as_str().unwrap());
    let config = format!(
        "[model]\ninit_adapter = {adapter:?}\n\n[rollout]\nbatch_size = {batch}\nnum_rollouts = {rollouts}\nmax_turns = 2\nmax_new_tokens = 96\n\n\
[env.wiki]\nquestions = {questions:?}\nsystem_prompt = {prompt:?}\ndemonstration = false\njudge = \"openai:{judge}\"\n\n\
[algorithm]\nf1_weight = {f1_weight}\n\n[run]\nmax_steps = {steps}\nseed = {seed}\nsave_steps = 1\nsave_total_limit = 2\n",
        adapter = warm_start.display().to_string(),
        questions = questions.display().to_string(),
        batch = s.batch,
        rollouts = s.rollouts,
        steps = s.steps,
        seed = s.seed,
        f1_weight = s.f1_weight,
    );
    let path = work.join("soak.toml");
    std::fs::write(&path, config).unwrap();
    path
}

/// Starts the trainer on `run` (resumed when it exists) with the plug-in `plugin`, its output in `log`.
fn start_trainer(config: &Path, index: &Path, plugin: &Path, run: &Path, log: &Path) -> Child {
    let mut cmd = agentrt();
    cmd.arg("train").arg("--config").arg(config).arg("--index-dir").arg(index).arg("--tool").arg(plugin).arg("--no-progress");
    cmd.arg("--output-dir").arg(run.parent().unwrap()).arg("--run-name").arg(run.file_name().unwrap());
    if run.join("config.toml").exists() {
        cmd.arg("--resume").arg(run);
    }
    let log = std::fs::File::create(log).unwrap();
    cmd.stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap()
}

/// The steps of the whole lines of metrics.jsonl so far.
fn steps_done(run: &Path) -> usize {
    let Ok(text) = std::fs::read_to_string(run.join("metrics.jsonl")) else { return 0 };
    text.lines().filter(|l| l.ends_with('}')).filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["step"].as_u64()).max().unwrap_or(0) as usize
}

/// The last line of a log that says what went wrong.
fn last_error(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().rev().find(|l| l.contains("rror")).unwrap_or("(no error line)").trim().to_string()
}

/// Fills the filesystem holding `dir` to its last byte; the file to delete to free it again.
fn fill_disk(dir: &Path) -> PathBuf {
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let block = vec![0xa5u8; 1 << 20];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {}: {e}", filler.display()),
        }
    }
    // What a 1 MiB write could not fit, byte by byte.
    while let Ok(1..) = f.write(&[0xa5]) {}
    filler
}

fn wait_for_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// How long a run may go without finishing a step before the soak calls it hung.
const STEP_LIMIT: Duration = Duration::from_secs(900);

/// Runs `run` to its last step while injecting faults (none when `faults` is 0); what was injected.
#[allow(clippy::too_many_arguments)]
fn drive(
    s: &Settings,
    rng: &mut StdRng,
    config: &Path,
    index: &Path,
    plugin: &Path,
    trapping: &[u8],
    run: &Path,
    judge: &mut Judge,
    logs: &Path,
) -> Vec<Injected> {
    let faults = s.faults;
    let disk = run.parent().unwrap().to_path_buf();
    let mut injected: Vec<Injected> = Vec::new();
    for segment in 0.. {
        let log = logs.join(format!("{}-trainer-{segment}.log", run.file_name().unwrap().to_string_lossy()));
        let mut trainer = start_trainer(config, index, plugin, run, &log);
        // Each fault lands after 0 or 1 more step and then 0 to 4 s into the next: before, during and after
        // sampling, judging, the update and the checkpoint.
        // The kinds come in rounds of five in a seeded order, so every five faults hold one of each.
        let plan = |rng: &mut StdRng, done: usize, injected: &[Injected]| {
            (injected.len() < faults).then(|| {
                let round = injected.len() / FAULTS.len();
                let mut kinds = FAULTS;
                kinds.shuffle(&mut StdRng::seed_from_u64(s.seed ^ (round as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d)));
                (kinds[injected.len() % kinds.len()], done + rng.random_range(0..2), Duration::from_millis(rng.random_range(0..4000)))
            })
        };
        let mut pending = plan(rng, steps_done(run), &injected);
        let mut last_progress = (steps_done(run), Instant::now());
        // A judge killed and back within the retries: the trainer goes on, unless the blip outlasted them.
        let mut blip_in_flight = false;
        let (status, ended_by_fault) = loop {
            if let Some(status) = trainer.try_wait().unwrap() {
                break (status, false);
            }
            let done = steps_done(run);
            if done != last_progress.0 {
                last_progress = (done, Instant::now());
                blip_in_flight = false;
            }
            assert!(last_progress.1.elapsed() < STEP_LIMIT, "no step for {STEP_LIMIT:?}: the trainer hangs (log: {})", log.display());
            let Some((fault, at, delay)) = pending else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            if done < at || last_progress.1.elapsed() < delay {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            println!("soak: {fault:?} after step {done} (trainer start {segment})");
            let ended_with = |trainer: &mut Child, what: &str| -> ExitStatus {
                wait_for_exit(trainer, STEP_LIMIT).unwrap_or_else(|| panic!("the trainer went on {STEP_LIMIT:?} {what} (log: {})", log.display()))
            };
            let outcome = match fault {
                Fault::KillTrainer => {
                    trainer.kill().unwrap();
                    trainer.wait().unwrap();
                    "killed".to_string()
                }
                Fault::JudgeBlip => {
                    judge.kill();
                    std::thread::sleep(Duration::from_millis(200));
                    judge.restart();
                    blip_in_flight = true;
                    "survived".to_string()
                }
                Fault::JudgeDown => {
                    judge.kill();
                    let ended = ended_with(&mut trainer, "without its judge");
                    judge.restart();
                    if ended.success() {
                        "finished".to_string()
                    } else {
                        let error = last_error(&log);
                        assert!(error.contains(&judge.url()) || error.contains("judge"), "a run that lost its judge must say so; it said {error:?}");
                        format!("failed: {error}")
                    }
                }
                Fault::DiskFull => {
                    let filler = fill_disk(&disk);
                    let ended = ended_with(&mut trainer, "on a full disk");
                    std::fs::remove_file(&filler).unwrap();
                    if ended.success() {
                        "finished".to_string()
                    } else {
                        let error = last_error(&log);
                        assert!(
                            error.contains("No space left on device") && error.contains(&disk.display().to_string()),
                            "a write refused for space must name its file: {error:?}"
                        );
                        format!("failed: {error}")
                    }
                }
                Fault::PluginTrap => {
                    trainer.kill().unwrap();
                    trainer.wait().unwrap();
                    let good = std::fs::read(plugin).unwrap();
                    std::fs::write(plugin, trapping).unwrap();
                    let refused_log = logs.join(format!("{}-plugin-trap-{segment}.log", run.file_name().unwrap().to_string_lossy()));
                    let mut refused = start_trainer(config, index, plugin, run, &refused_log);
                    let status = ended_with(&mut refused, "with a plug-in that traps at load");
                    std::fs::write(plugin, good).unwrap();
                    let error = last_error(&refused_log);
                    assert!(!status.success(), "a trainer started with a plug-in that traps in describe() ran (log: {})", refused_log.display());
                    assert!(
                        error.contains(&plugin.display().to_string()) && error.contains("trap"),
                        "the refusal must name the plug-in and its trap: {error:?}"
                    );
                    format!("killed; refused the trapping plug-in at its next start: {error}")
                }
            };
            println!("soak:   the trainer {outcome}");
            injected.push(Injected { fault, after_step: done, trainer: outcome });
            if fault == Fault::JudgeBlip {
                pending = plan(rng, done, &injected);
                continue;
            }
            break (trainer.wait().unwrap(), true);
        };
        if status.success() && steps_done(run) >= s.steps {
            return injected;
        }
        if !ended_by_fault {
            // Only a judge blip that outlasted the client's retries may end a run by itself.
            let error = last_error(&log);
            assert!(blip_in_flight && !status.success(), "the trainer ended ({status}) with no fault to end it: {error:?} (log: {})", log.display());
            injected.last_mut().unwrap().trainer = format!("failed: {error}");
        }
    }
    unreachable!()
}

/// The question ids of the episodes each step logged (a step logs its first question's group), checking
/// that every step logged exactly one group, once.
fn transcripts_by_step(s: &Settings, run: &Path) -> BTreeMap<u64, Vec<String>> {
    let mut by_step: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in read_jsonl(&run.join("transcripts.jsonl")) {
        by_step.entry(line["step"].as_u64().unwrap()).or_default().push(line["episode"]["question"]["id"].as_str().unwrap().to_string());
    }
    assert_eq!(by_step.keys().copied().collect::<Vec<_>>(), (1..=s.steps as u64).collect::<Vec<_>>(), "transcripts: every step once");
    for (step, ids) in &by_step {
        assert_eq!(ids.len(), s.rollouts, "step {step}: one group of transcripts, none lost, none twice");
    }
    by_step
}

/// The steps of metrics.jsonl, checked to be 1..=steps in order with the questions seen so far.
fn check_metrics(s: &Settings, run: &Path) -> Vec<StepMetrics> {
    let metrics = StepMetrics::read(&run.join("metrics.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    let steps: Vec<usize> = metrics.iter().map(|m| m.step).collect();
    assert_eq!(steps, (1..=s.steps).collect::<Vec<_>>(), "metrics.jsonl: every step once, in order");
    for m in &metrics {
        assert_eq!(m.questions_seen, m.step * s.batch, "{m}");
        assert_eq!(m.episodes, s.batch * s.rollouts, "{m}");
    }
    metrics
}

/// Reads the TensorBoard event file record by record (length, its CRC, data, its CRC): whole, every CRC
/// right; the steps of its scalar events.
fn tensorboard_steps(run: &Path) -> BTreeSet<i64> {
    let path = run.join(agentrt_tensorboard::EVENT_FILE);
    let records = agentrt_tensorboard::read_records(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(records.iter().filter(|r| r.step == 0).count(), 1, "one version record, none of step 0 besides");
    records.iter().map(|r| r.step).filter(|&step| step > 0).collect()
}

fn soak(s: Settings) {
    let work = tempfile::tempdir().unwrap();
    let disk = work.path().join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    // Room for two checkpoints of the default model's adapters and optimizer, the logs and a spare.
    let mount = Command::new("mount").args(["-t", "tmpfs", "-o", "size=512m", "tmpfs"]).arg(&disk).status().unwrap();
    assert!(mount.success(), "mounting a tmpfs at {} inside the namespace", disk.display());
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();

    let started = Instant::now();
    let (index, questions) = index_and_questions(&s, work.path());
    let mut judge = Judge::start(free_port(), logs.join("judge"));
    let config = write_config(&s, work.path(), &questions, &format!("{}@{}", Judge::name(judge.port), judge.url()));
    // rand's StdRng at the version Cargo.lock pins: the faults of a seed are the same on every machine.
    let mut rng = StdRng::seed_from_u64(s.seed ^ 0x50a4);

    // A plug-in whose `describe()` traps: a plug-in with a bug in its start, for the `plugin-trap` fault.
    let trapping = std::fs::read(hand_written_plugin(work.path(), "trapping.wasm", Describe::Traps, &["flaky-count"])).unwrap();
    let plugin = work.path().join("flaky.wasm");
    std::fs::copy(agentrt_runtime::FLAKY_PLUGIN_WASM, &plugin).unwrap();

    let run = disk.join("soak");
    let injected = drive(&s, &mut rng, &config, &index, &plugin, &trapping, &run, &mut judge, &logs);
    let metrics = check_metrics(&s, &run);
    let transcripts = transcripts_by_step(&s, &run);
    let tb = tensorboard_steps(&run);
    assert_eq!(tb, (1..=s.steps as i64).collect::<BTreeSet<_>>(), "the TensorBoard file holds every step's scalars");
    let checkpoints: Vec<String> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("checkpoint-") || n.contains("partial"))
        .collect();
    assert!(checkpoints.contains(&format!("checkpoint-{}", s.steps)), "the last checkpoint is there: {checkpoints:?}");

    // Each step played the questions the seeded data order gives it, as a run with no fault does (its
    // transcripts are its first question's group).
    let train: Vec<String> = read_jsonl(&questions).iter().map(|q| q["id"].as_str().unwrap().to_string()).collect();
    let mut order = agentrt_trainer::run_dir::DataOrder::new(train.len(), s.seed);
    for (step, ids) in &transcripts {
        let first = &train[order.at((*step as usize - 1) * s.batch)];
        assert!(ids.iter().all(|id| id == first), "step {step} played {ids:?}, where the data order gives {first}");
    }

    // What the programs did, in the logged transcripts (a step logs its first question's group): their turns,
    // tool calls and how the flaky plug-in's ended.
    let (mut programs, mut program_errors, mut tool_calls, mut plugin_calls, mut plugin_traps) = (0usize, 0usize, 0usize, 0usize, 0usize);
    for line in read_jsonl(&run.join("transcripts.jsonl")) {
        for turn in line["episode"]["turns"].as_array().unwrap() {
            programs += turn["program"].is_string() as usize;
            program_errors += turn["program_error"].is_string() as usize;
            for call in turn["tool_calls"].as_array().unwrap() {
                tool_calls += 1;
                if call["tool"] == "flaky_count" {
                    plugin_calls += 1;
                    plugin_traps += call["error"].is_string() as usize;
                }
            }
        }
    }
    let count = |f: Fault| injected.iter().filter(|i| i.fault == f).count();
    let report = serde_json::json!({
        "steps": s.steps,
        "episodes": metrics.iter().map(|m| m.episodes).sum::<usize>(),
        "batch": s.batch,
        "rollouts": s.rollouts,
        "seed": s.seed,
        "faults": injected,
        "faults_by_kind": {
            "kill-trainer": count(Fault::KillTrainer),
            "judge-blip": count(Fault::JudgeBlip),
            "judge-down": count(Fault::JudgeDown),
            "disk-full": count(Fault::DiskFull),
            "plugin-trap": count(Fault::PluginTrap),
        },
        "judge_starts": judge.starts,
        "programs": programs,
        "program_errors": program_errors,
        "tool_calls": tool_calls,
        "plugin_calls": plugin_calls,
        "plugin_traps": plugin_traps,
        "optimizer_steps": metrics.iter().map(|m| m.optimizer_steps).sum::<usize>(),
        "trained_samples": metrics.iter().map(|m| m.trained_samples).sum::<usize>(),
        "reward_mean": metrics.iter().map(|m| m.reward_mean).sum::<f64>() / metrics.len() as f64,
        "seconds": started.elapsed().as_secs(),
    });
    println!("soak: {}", serde_json::to_string_pretty(&report).unwrap());
    if let Some(p) = &s.report {
        std::fs::write(p, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    }
    let _ = Command::new("umount").arg(&disk).status();
}
