//! `agentrt train` end to end on a tiny random model served from a safetensors directory and the fixture
//! tools: the run directory's files, exact resumption, and a kill -9 in the middle of a run.

use std::path::Path;

use crate::common::{agentrt, kill_nine_then_resume, metrics, questions, read_json, read_jsonl, run_ok, set_flag, succeed, tiny_model, train_args};

#[test]
fn train_writes_a_run_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (model, qs, out) = (tiny_model(dir.path()), questions(dir.path()), dir.path().join("runs"));
    let played = agentrt().args(train_args(&model, &qs, &out, "straight", 3)).output().unwrap();
    let stderr = String::from_utf8_lossy(&played.stderr);
    assert!(played.status.success(), "{stderr}");
    // The default config samples with 8-bit activations; the tiny safetensors model has no GGUF blocks for
    // them, and the log says what it samples with instead.
    assert!(stderr.contains("with f32 activations: it has no GGUF blocks"), "{stderr}");
    let straight = out.join("straight");
    for f in [
        "config.toml",
        "metrics.jsonl",
        "transcripts.jsonl",
        "curves.png",
        "checkpoint-3/adapters/adapter_config.json",
        "checkpoint-3/optimizer.safetensors",
        "checkpoint-3/trainer_state.json",
    ] {
        assert!(straight.join(f).is_file(), "missing {f}");
    }
    let m = metrics(&straight);
    assert_eq!(m.iter().map(|l| l["step"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(m[2]["questions_seen"], 6);
    assert!(m.iter().any(|l| l["trained_samples"].as_u64().unwrap() > 0), "nothing was trained: {m:?}");
    // Sampling (the fused decoder) and the update (the differentiable one) agree on every trained token.
    for l in m.iter().filter(|l| l["logprob_gap_tokens"].as_u64().unwrap() > 0) {
        assert!(l["logprob_gap_abs_mean"].as_f64().unwrap() < 1e-3, "sampler and learner disagree: {l}");
    }

    // Sampled locally, every step knows its tokens' log-probs: the entropy proxy is a positive number.
    for l in &m {
        let nll = l["sampled_token_nll"].as_f64().unwrap_or(f64::NAN);
        assert!(nll.is_finite() && nll > 0.0, "no sampled-token NLL: {l}");
        // Per turn kind: every episode has a first reply; replies after a tool's output only where a
        // program ran, and the whole's mean lies between the kinds' means.
        let first = l["sampled_token_nll_first_reply"].as_f64().unwrap_or(f64::NAN);
        assert!(first.is_finite() && first > 0.0, "no first-reply NLL: {l}");
        if let Some(after) = l["sampled_token_nll_after_tool"].as_f64() {
            assert!(nll >= first.min(after) - 1e-9 && nll <= first.max(after) + 1e-9, "{l}");
        } else {
            assert!((nll - first).abs() < 1e-9, "{l}");
        }
        assert!((0.0..=1.0).contains(&l["read_more"].as_f64().unwrap()), "{l}");
    }

    // One step, then a resume to three: the same data order as the straight run (that the adapters and
    // every metric come out the same is `killed_and_resumed_runs_end_bit_for_bit_as_a_straight_one`'s).
    run_ok(train_args(&model, &qs, &out, "split", 1));
    let resumed = out.join("split");
    // A resume that would change more than the run's length is refused, naming the key, and changes nothing.
    let saved = std::fs::read_to_string(resumed.join("config.toml")).unwrap();
    let refused = agentrt().args(["train", "--fixture", "--resume", resumed.to_str().unwrap(), "--max-steps", "3", "--lr", "5e-2"]).output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("algorithm.lr = 0.05 (saved: 0.01)"), "{}", String::from_utf8_lossy(&refused.stderr));
    assert_eq!(std::fs::read_to_string(resumed.join("config.toml")).unwrap(), saved);
    let mut args = train_args(&model, &qs, &out, "split", 3);
    args.extend(["--resume".to_string(), resumed.to_str().unwrap().to_string()]);
    run_ok(args);
    let r = metrics(&resumed);
    assert_eq!(r.len(), 3);
    for (a, b) in m.iter().zip(&r) {
        assert_eq!((&a["step"], &a["questions_seen"]), (&b["step"], &b["questions_seen"]));
    }
    let ids = |run: &Path| -> Vec<String> {
        read_jsonl(&run.join("transcripts.jsonl")).iter().map(|l| l["episode"]["question"]["id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ids(&straight), ids(&resumed), "the data order after resuming differs");

    // The checkpoint evaluates end to end through `agentrt eval`.
    let eval_dir = dir.path().join("eval");
    let checkpoint = straight.join("checkpoint-3");
    succeed(
        agentrt()
            .args(["eval", "--fixture", "--model", model.to_str().unwrap(), "--adapter", checkpoint.to_str().unwrap(), "--questions", qs.to_str().unwrap()])
            .args(["--split", "train", "--num-samples", "3", "--max-turns", "2", "--max-new-tokens", "16", "--output-dir", eval_dir.to_str().unwrap()]),
    );
    let results = read_json(&eval_dir.join("results.json"));
    assert_eq!(results["num_questions"], 3);
    assert!(results["info"]["policy"].as_str().unwrap().contains("checkpoint-3"), "{results}");
    for f in ["results.md", "results.png", "transcripts.jsonl"] {
        assert!(eval_dir.join(f).is_file(), "missing {f}");
    }

    // A second run into the same directory without --resume is refused.
    let out2 = agentrt().args(train_args(&model, &qs, &out, "straight", 3)).output().unwrap();
    assert!(!out2.status.success() && String::from_utf8_lossy(&out2.stderr).contains("--resume"));
}

#[test]
fn kill_nine_mid_run_then_resume() {
    let dir = tempfile::tempdir().unwrap();
    let (model, qs, out) = (tiny_model(dir.path()), questions(dir.path()), dir.path().join("runs"));
    let run = out.join("killed");
    let mut resume = train_args(&model, &qs, &out, "killed", 4);
    resume.extend(["--resume".to_string(), run.to_str().unwrap().to_string()]);
    kill_nine_then_resume(&train_args(&model, &qs, &out, "killed", 1000), &resume, &run, 4);
    assert!(run.join("checkpoint-4/trainer_state.json").is_file());
}

/// Determinism by construction: two runs of one config and seed end with the same adapter file, byte for
/// byte, and the same metrics lines (their `seconds` aside); so does a run killed with SIGKILL three times,
/// at the instants its debug log names (step 2's sampling, step 3's update, the writing of step 3's resume
/// state), and resumed each time with a bare `--resume`. The default `run.save_steps` (5) means that the
/// kills in steps 2 and 3 find no checkpoint: the resume states are what the resumes start from.
#[test]
fn killed_and_resumed_runs_end_bit_for_bit_as_a_straight_one() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let (model, qs, out) = (tiny_model(dir.path()), questions(dir.path()), dir.path().join("runs"));
    let args = |name: &str| {
        let mut a = train_args(&model, &qs, &out, name, 4);
        let at = a.iter().position(|x| x == "run.save_steps=1").unwrap();
        a[at] = "run.save_steps=5".into();
        a
    };
    let adapter = |name: &str| std::fs::read(out.join(name).join("checkpoint-4/adapters/adapter_model.safetensors")).unwrap();
    // Every metric but the clock's.
    let untimed = |name: &str| -> Vec<serde_json::Value> {
        metrics(&out.join(name))
            .into_iter()
            .map(|mut l| {
                l.as_object_mut().unwrap().remove("seconds");
                l
            })
            .collect()
    };
    run_ok(args("first"));
    run_ok(args("second"));
    assert!(untimed("first").iter().any(|l| l["trained_samples"].as_u64().unwrap() > 0), "nothing was trained, so equal adapters show nothing");
    assert_eq!(untimed("first"), untimed("second"), "two straight runs of one seed logged different metrics");
    assert!(adapter("first") == adapter("second"), "two straight runs of one seed ended with different adapters");

    // A bare --resume of a run that was never started says so.
    let mut nothing = args("never-started");
    nothing.push("--resume".into());
    let refused = agentrt().args(&nothing).output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("no run to resume") && said.contains("never-started"), "{said}");

    // Started, then resumed with a bare --resume after each kill; the last resume runs to the end.
    let run = out.join("killed");
    for (kill, marker) in ["step 2: sampling", "step 3: update", "step 3: writing"].iter().enumerate() {
        let mut command = agentrt();
        command.args(args("killed")).env("AGENTRT_LOG", "info,agentrt_trainer=debug").stderr(std::process::Stdio::piped());
        if kill > 0 {
            command.arg("--resume");
        }
        let mut child = command.spawn().unwrap();
        let mut heard = Vec::new();
        for line in std::io::BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = line.unwrap();
            let found = line.contains(marker);
            heard.push(line);
            if found {
                child.kill().unwrap();
                break;
            }
        }
        let status = child.wait().unwrap();
        assert!(!status.success(), "the run ended before `{marker}` could kill it:\n{}", heard.join("\n"));
        if kill > 0 {
            assert!(heard.iter().any(|l| l.contains("resuming")), "a bare --resume did not resume:\n{}", heard.join("\n"));
        }
        assert!(!run.join("checkpoint-1").exists() && !run.join("checkpoint-2").exists(), "save_steps 5 writes no early checkpoint");
    }
    let mut resume = args("killed");
    resume.push("--resume".into());
    run_ok(resume);
    assert_eq!(untimed("first"), untimed("killed"), "the killed and resumed run logged other metrics");
    assert!(adapter("first") == adapter("killed"), "the killed and resumed run ended with other adapters");
    let names: Vec<String> = std::fs::read_dir(&run).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.starts_with("resume-") || n.ends_with(".partial")), "left behind: {names:?}");
}

/// `agentrt sweep` run again with the same arguments goes on where it stopped: points that reached their
/// steps are kept as they are, points short of them resume from their last checkpoint (here: a sweep of one
/// step, lengthened to two, then run a third time).
#[test]
fn a_sweep_run_again_resumes_short_points_and_keeps_finished_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (model, qs, out) = (tiny_model(dir.path()), questions(dir.path()), dir.path().join("runs"));
    let sweep = |steps: usize| {
        let fixed = [
            format!("env.wiki.questions={}", qs.display()),
            format!("run.output_dir={}", out.display()),
            format!("run.max_steps={steps}"),
            "run.save_steps=1".into(),
            "rollout.num_rollouts=2".into(),
            "rollout.batch_size=2".into(),
            "rollout.max_new_tokens=16".into(),
            "rollout.max_turns=2".into(),
            "algorithm.advantage=\"reinforce\"".into(),
            "algorithm.lr=1e-2".into(),
        ];
        let mut args: Vec<String> = vec!["sweep".into(), "--grid".into(), "run.seed=1,2".into()];
        for f in fixed {
            args.extend(["--set".into(), f]);
        }
        args.extend(["--".into(), "--fixture".into(), "--model".into(), model.to_str().unwrap().into()]);
        let output = agentrt().args(&args).output().unwrap();
        assert!(output.status.success(), "sweep of {steps} steps failed:\n{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let runs = || -> Vec<std::path::PathBuf> {
        let mut runs: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("config.toml").is_file()).collect();
        runs.sort();
        runs
    };
    let log = sweep(1);
    assert_eq!(log.matches("sweep: starting").count(), 2, "{log}");
    assert_eq!(runs().len(), 2);

    let log = sweep(2);
    assert_eq!(log.matches("after step 1").count(), 2, "both points resume where they stopped:\n{log}");
    for run in runs() {
        let steps: Vec<u64> = metrics(&run).iter().map(|l| l["step"].as_u64().unwrap()).collect();
        assert_eq!(steps, vec![1, 2], "{}", run.display());
        assert!(run.join("checkpoint-2/trainer_state.json").is_file());
    }
    let before: Vec<String> = runs().iter().map(|r| std::fs::read_to_string(r.join("metrics.jsonl")).unwrap()).collect();

    let log = sweep(2);
    assert_eq!(log.matches("reached step 2 before: kept").count(), 2, "{log}");
    let after: Vec<String> = runs().iter().map(|r| std::fs::read_to_string(r.join("metrics.jsonl")).unwrap()).collect();
    assert_eq!(before, after, "a finished point is not trained again");
    assert!(out.join("sweep_summary.md").is_file());
}

#[test]
fn print_config_gives_the_commented_defaults_or_the_config_the_layers_make() {
    let defaults = run_ok(["train", "--print-config"]);
    assert_eq!(defaults, agentrt_trainer::DEFAULT_CONFIG);

    let merged = run_ok(["train", "--print-config", "--lr", "0.00125", "--set", "rollout.max_turns=7"]);
    assert!(merged.contains("lr = 0.00125") && merged.contains("max_turns = 7"), "the flags and --set reach the printed config:\n{merged}");
    assert!(merged.starts_with("[") && !merged.contains("\n# "), "the merged config is the config a run saves, without the defaults' comments:\n{merged}");

    let out = agentrt().args(["train", "--print-config", "--set", "rollout.max_turns=many"]).output().unwrap();
    assert!(!out.status.success(), "a bad override is an error, also when only printing");
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_turns"), "the error names the key: {}", String::from_utf8_lossy(&out.stderr));
}

/// DAPO's dynamic sampling on the tiny model and the fixture tools. The rewards are the overlong penalty
/// alone (the tiny model answers nothing right): each rollout's reward falls with its reply's length, so a
/// group is all-equal (dropped) only when every reply ran to the limit. Each step draws groups until it
/// has `batch_size` with a signal or has drawn `max_draws` x `batch_size`; every kept group trains, no
/// dropped one does; and with no signal at all nothing trains: the adapters stay as they were.
#[test]
fn dynamic_sampling_draws_until_the_batch_is_full_or_the_cap_and_dropped_groups_train_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (model, qs, out) = (tiny_model(dir.path()), questions(dir.path()), dir.path().join("runs"));
    let run = |name: &str, penalty: f64, trains: bool| {
        let mut args = train_args(&model, &qs, &out, name, 3);
        for set in [
            "algorithm.advantage=grpo",
            "algorithm.dynamic_sampling=true",
            "algorithm.max_draws=3",
            "algorithm.program_bonus=0",
            &format!("algorithm.overlong_penalty={penalty}"),
            "algorithm.overlong_buffer=95",
            "rollout.max_new_tokens=96",
            "rollout.temperature=2.0",
            "rollout.top_k=0",
            "run.eval_steps=2",
            "run.eval_questions=2",
            "run.eval_split=train",
            "run.eval_skip=1",
        ] {
            args.extend(["--set".to_string(), set.to_string()]);
        }
        // train_args says reinforce; dynamic sampling needs a group baseline.
        let at = args.iter().position(|a| a == "--advantage").unwrap();
        args.drain(at..at + 2);
        if trains {
            run_ok(args);
        } else {
            // A run that updated nothing writes its steps and checkpoints, then fails saying so.
            let refused = agentrt().args(args).output().unwrap();
            assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("the run trained nothing"), "{refused:?}");
        }
        out.join(name)
    };

    let signal = run("signal", 1.0, true);
    let m = metrics(&signal);
    assert_eq!(m.len(), 3);
    let (batch, cap, group) = (2u64, 6u64, 2u64);
    let mut seen = 0;
    for l in &m {
        let n = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("no {k}: {l}"));
        let (drawn, kept, dropped) = (n("groups_drawn"), n("groups_kept"), n("groups_dropped"));
        assert_eq!(drawn, kept + dropped, "{l}");
        assert_eq!(n("groups_equal"), dropped, "dynamic sampling drops exactly the all-equal groups: {l}");
        assert!(kept == batch || drawn == cap, "a step stopped before its batch was full or the cap was hit: {l}");
        assert!(kept <= batch && drawn <= cap, "{l}");
        assert_eq!(n("trained_samples"), kept * group, "every kept group trains, no dropped one: {l}");
        assert_eq!(n("episodes"), drawn * group, "{l}");
        seen += drawn;
        assert_eq!(n("questions_seen"), seen, "each drawn group is a question drawn: {l}");
    }
    assert!(m.iter().any(|l| l["draw_rounds"].as_u64().unwrap() > 1), "no step needed a second draw, so the test shows nothing: {m:?}");
    assert!(m.iter().any(|l| l["groups_kept"].as_u64().unwrap() > 0), "nothing was kept: {m:?}");
    // The held-out slice: before training, at step 2 and at the last step, also on those metrics lines.
    let dev = read_jsonl(&signal.join("dev_eval.jsonl"));
    assert_eq!(dev.iter().map(|l| l["step"].as_u64().unwrap()).collect::<Vec<_>>(), vec![0, 2, 3]);
    assert!(dev.iter().all(|l| l["questions"] == 2 && l["accuracy"].is_number()), "{dev:?}");
    assert!(m[0]["dev_accuracy"].is_null() && m[1]["dev_accuracy"].is_number() && m[2]["dev_accuracy"].is_number(), "{m:?}");

    // No signal at all: every group is dropped, every step draws up to the cap, and nothing trains.
    let flat = run("flat", 0.0, false);
    for l in metrics(&flat) {
        assert_eq!((l["groups_drawn"].as_u64(), l["groups_kept"].as_u64(), l["trained_samples"].as_u64()), (Some(cap), Some(0), Some(0)), "{l}");
        assert!(l["grad_norm"].is_null(), "an optimizer step was taken on nothing: {l}");
    }
    let adapters = |step: u32| std::fs::read(flat.join(format!("checkpoint-{step}/adapters/adapter_model.safetensors"))).unwrap();
    assert_eq!(adapters(1), adapters(3), "dropped groups changed the adapters");
    if m[1..].iter().any(|l| l["groups_kept"].as_u64().unwrap() > 0) {
        let trained = |step: u32| std::fs::read(signal.join(format!("checkpoint-{step}/adapters/adapter_model.safetensors"))).unwrap();
        assert_ne!(trained(1), trained(3), "kept groups did not change the adapters");
    }
}

/// A run whose every group has equal rewards (GRPO on a random model, no partial credit) updates nothing:
/// each step says so, the counters say the groups were all equal but none was dropped (dynamic sampling is
/// off), and `agentrt train` fails at the end, after writing its steps and checkpoint.
#[test]
fn a_run_that_updates_nothing_says_so_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (model, qs, out) = (tiny_model(dir.path()), questions(dir.path()), dir.path().join("runs"));
    let mut args = train_args(&model, &qs, &out, "flat", 2);
    set_flag(&mut args, "--advantage", "grpo");
    args.extend(["--set".to_string(), "algorithm.program_bonus=0".to_string()]);
    let output = agentrt().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a run that trained nothing succeeded:\n{stderr}");
    for step in [1, 2] {
        assert!(stderr.contains(&format!("step {step}: no update: all 2 groups had equal rewards")), "step {step} said nothing:\n{stderr}");
    }
    assert!(stderr.contains("error: the run trained nothing: in each of its 2 steps every group had equal rewards"), "{stderr}");
    let run = out.join("flat");
    assert!(run.join("checkpoint-2/adapters/adapter_config.json").is_file());
    for l in metrics(&run) {
        let n = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("no {k}: {l}"));
        assert_eq!((n("optimizer_steps"), n("groups_kept"), n("groups_equal"), n("groups_dropped")), (0, 0, 2, 0), "{l}");
    }
}

/// `agentrt bench rl` plays and trains the recipe's steps for real and reports each step's phases from the
/// run's own metrics, the same numbers the run wrote.
#[test]
fn bench_rl_reports_the_steps_the_run_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let (model, qs, out) = (tiny_model(dir.path()), questions(dir.path()), dir.path().join("runs"));
    let questions = format!("env.wiki.questions={}", qs.display());
    let args = [
        "bench",
        "rl",
        "--fixture",
        "--json",
        "--steps",
        "2",
        "--model",
        model.to_str().unwrap(),
        "--set",
        &questions,
        "--set",
        "rollout.batch_size=2",
        "--set",
        "rollout.num_rollouts=2",
        "--set",
        "rollout.max_new_tokens=16",
        "--set",
        "rollout.max_turns=2",
        "--set",
        "algorithm.advantage=reinforce",
        "--output-dir",
        out.to_str().unwrap(),
    ];
    let report: serde_json::Value = serde_json::from_str(&run_ok(args)).unwrap();
    let written = metrics(&out.join("bench-rl"));
    assert_eq!(report["steps"].as_array().unwrap(), &written, "the report is the run's metrics");
    assert_eq!(written.len(), 2);
    // The recipe's questions and rollouts as overridden, no dynamic sampling: 4 episodes a step.
    assert!(written.iter().all(|m| m["episodes"] == 4), "{written:?}");
    let hour = 4.0 * 3600.0 / written[1]["seconds"]["step"].as_f64().unwrap();
    assert!((report["episodes_per_hour"].as_f64().unwrap() - hour).abs() < 1e-6 * hour, "{report}");
    assert!(report["sampler_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(report["machine"].as_str().unwrap().contains("kernels"), "{}", report["machine"]);
    // `--report` reads the same run back to the same numbers, without claiming the machine it runs on.
    let mut read: serde_json::Value = serde_json::from_str(&run_ok(["bench", "rl", "--report", out.join("bench-rl").to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(read["machine"], "machine not recorded in the run");
    read["machine"] = report["machine"].clone();
    assert_eq!(read, report);
    // A second run into the same folder is refused rather than mixed with the first.
    let again = agentrt().args(args).output().unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds a run"), "{}", String::from_utf8_lossy(&again.stderr));
}

/// `bench rl --report` on a run an older binary played (1638097, kept in bench/rollout/pair-2026-11-29): its
/// saved config reads as it ran (f32 sampling), and what its metrics do not time is absent, not a rate over
/// zero seconds.
#[test]
fn bench_rl_reports_a_run_an_older_binary_played() {
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/rollout/pair-2026-11-29/qwen_sft-old");
    let report: serde_json::Value = serde_json::from_str(&run_ok(["bench", "rl", "--report", run.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(report["sampler_activations"], "F32", "{report}");
    assert_eq!(report["steps"].as_array().unwrap().len(), 3);
    // Steps 2 and 3: 64 episodes in 409.6 + 235.5 s.
    assert_eq!(report["episodes_per_hour"].as_f64().unwrap().round(), 357.0, "{report}");
    assert!(report["sampler_tokens_per_s"].is_null() && report["sampled_tokens_per_forward_s"].is_null(), "{report}");
    assert!(report["tokens_per_sampler_step"].is_null(), "{report}");
    // 6,841 + 6,722 tokens sampled in 130.9 + 132.2 s of the generate phase.
    assert!((report["sampled_tokens_per_s"].as_f64().unwrap() - 51.6).abs() < 0.05, "{report}");
    let too_short = tempfile::tempdir().unwrap();
    std::fs::copy(run.join("config.toml"), too_short.path().join("config.toml")).unwrap();
    let first = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap().lines().next().unwrap().to_string();
    std::fs::write(too_short.path().join("metrics.jsonl"), first + "\n").unwrap();
    let out = agentrt().args(["bench", "rl", "--report", too_short.path().to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 steps' metrics"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `rollout.draw = "unsettled"`: the tiny random model answers nothing, so every group is 0 of 2 and
/// settles its question at once (`settled_after = 1`); after the first round over the three questions a
/// step draws a settled one only for about `settled_share` of the positions and passes over the others.
/// Every group's outcome is in groups.jsonl, a resumed run passes over the same positions as a straight
/// one, and with `settled_share = 0` the run stops saying every question is settled.
#[test]
fn unsettled_draw_passes_over_settled_questions_and_resumes_alike() {
    let dir = tempfile::tempdir().unwrap();
    let (model, qs, out) = (tiny_model(dir.path()), questions(dir.path()), dir.path().join("runs"));
    let unsettled = |name: &str, steps: usize, share: &str| {
        let mut args = train_args(&model, &qs, &out, name, steps);
        // The answer turn's own temperature, a key the defaults leave out, rides along through the resume.
        let sets = ["rollout.draw=unsettled", "rollout.settled_after=1", &format!("rollout.settled_share={share}"), "rollout.temperature_after_tool=1.5"];
        for set in sets {
            args.extend(["--set".to_string(), set.to_string()]);
        }
        args
    };
    run_ok(unsettled("straight", 5, "0.5"));
    let straight = out.join("straight");
    let saved = std::fs::read_to_string(straight.join("config.toml")).unwrap();
    assert!(saved.contains("temperature_after_tool = 1.5"), "{saved}");
    let m = metrics(&straight);
    let passed: Vec<u64> = m.iter().map(|l| l["questions_passed_over"].as_u64().unwrap()).collect();
    assert_eq!(passed[0], 0, "nothing is settled before the first groups: {passed:?}");
    assert!(passed.iter().sum::<u64>() > 0, "no settled question was passed over: {passed:?}");
    let seen: Vec<u64> = m.iter().map(|l| l["questions_seen"].as_u64().unwrap()).collect();
    assert_eq!(seen[4], 10 + passed.iter().sum::<u64>(), "positions walked: groups drawn plus those passed over");
    let groups = read_jsonl(&straight.join("groups.jsonl"));
    assert_eq!(groups.iter().map(|l| l["step"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
    for l in &groups {
        let g = l["groups"].as_array().unwrap();
        assert_eq!(g.len(), 2, "{l}");
        assert!(g.iter().all(|g| g["of"] == 2 && g["correct"] == 0), "{l}");
    }

    // Two steps, then a resume to five: the same positions passed over, the same groups.
    run_ok(unsettled("split", 2, "0.5"));
    let mut resume = unsettled("split", 5, "0.5");
    resume.extend(["--resume".to_string(), out.join("split").to_str().unwrap().to_string()]);
    run_ok(resume);
    assert_eq!(read_jsonl(&out.join("split").join("groups.jsonl")), groups);
    assert_eq!(
        metrics(&out.join("split")).iter().map(|l| l["questions_passed_over"].clone()).collect::<Vec<_>>(),
        m.iter().map(|l| l["questions_passed_over"].clone()).collect::<Vec<_>>()
    );

    // Nothing drawn but settled questions, and none of them kept: a loud stop, not an endless walk.
    let refused = agentrt().args(unsettled("stuck", 5, "0")).output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("every one of the 3 questions is settled"), "{stderr}");
}
