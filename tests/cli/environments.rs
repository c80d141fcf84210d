//! Environment packages: a folder made by `agentrt env new`, with its tasks and a grader component, is
//! evaluated and trained with no change to the project's source; a grader component that runs past its
//! bounds fails that answer's grade, named, and the run goes on.

use crate::common::{agentrt, metrics, read_json, read_jsonl, succeed, tiny_model};
use std::path::{Path, PathBuf};

/// `agentrt env new NAME --dir DIR`: the package's folder.
fn new_package(dir: &Path, name: &str) -> PathBuf {
    let made = succeed(agentrt().args(["env", "new", name, "--dir", dir.to_str().unwrap()]));
    assert!(made.contains("environment.toml") && made.contains("grader/build.sh"), "{made}");
    dir.join(name)
}

/// Six tasks of each split of the package, answers the grader reads.
fn write_tasks(package: &Path, extra: &str) {
    let rows: Vec<String> = (0..12)
        .map(|i| {
            let split = if i % 2 == 0 { "train" } else { "test" };
            format!(r#"{{"id": "s{i}", "split": "{split}", "question": "What is {i} plus {i}?", "answer": {}{extra}}}"#, 2 * i)
        })
        .collect();
    std::fs::write(package.join("tasks.jsonl"), rows.join("\n") + "\n").unwrap();
}

/// The acceptance test of environment packages: `env new`, a tasks file, the package's Python grader built
/// by its own build.sh, then `eval --env DIR`, `trajectories sample --env DIR` and `train --env DIR
/// --max-steps 2`, with nothing of the project's source changed.
#[test]
fn a_new_package_is_evaluated_and_trained_with_its_own_grader_component() {
    let dir = tempfile::tempdir().unwrap();
    let package = new_package(dir.path(), "sums");
    write_tasks(&package, "");
    let built = std::process::Command::new("bash").arg(package.join("grader/build.sh")).output().unwrap();
    assert!(built.status.success(), "grader/build.sh failed:\n{}", String::from_utf8_lossy(&built.stderr));
    assert!(package.join("grader/grader.wasm").is_file());

    let model = tiny_model(dir.path());
    let (env, model) = (package.to_str().unwrap(), model.to_str().unwrap());
    let out = dir.path().join("eval");
    succeed(agentrt().args(["eval", "--env", env, "--model", model, "--num-samples", "0", "--max-new-tokens", "8", "--output-dir", out.to_str().unwrap()]));
    let results = read_json(&out.join("results.json"));
    assert_eq!(results["num_questions"], 6, "the six `test` tasks (the package's eval split): {results}");
    assert!(results["info"]["judge"].as_str().unwrap().contains("grader.wasm"), "the report names the grader: {results}");
    let transcripts = read_jsonl(&out.join("transcripts.jsonl"));
    assert_eq!(transcripts.len(), 6);
    for t in &transcripts {
        assert_eq!(t["reward_components"][0][0], "correct", "the grader's own part: {t}");
        assert!(t.get("grader_error").is_none(), "an honest grader graded every answer: {t}");
    }

    // Rejection sampling plays the package's `train` tasks, graded by its grader.
    let samples = dir.path().join("samples.jsonl");
    let printed = succeed(agentrt().args([
        "trajectories",
        "sample",
        "--env",
        env,
        "--model",
        model,
        "--k",
        "2",
        "--max-new-tokens",
        "8",
        "--out",
        samples.to_str().unwrap(),
    ]));
    assert!(printed.contains("of 12 episodes played"), "six train tasks, twice each: {printed}");
    let manifest = read_json(&dir.path().join("samples.jsonl.manifest.json"));
    assert_eq!(manifest["environment"], "sums", "{manifest}");
    assert!(
        manifest["settings"]["questions"].as_str().unwrap().ends_with("sums/tasks.jsonl")
            && manifest["settings"]["judge"].as_str().unwrap().contains("grader.wasm"),
        "{manifest}"
    );

    let runs = dir.path().join("runs");
    succeed(
        agentrt()
            .args(["train", "--env", env, "--no-progress", "--model", model, "--max-steps", "2", "--num-rollouts", "2", "--batch-size", "2"])
            .args([
                "--advantage",
                "reinforce",
                "--set",
                "rollout.max_new_tokens=8",
                "--set",
                "run.eval_steps=1",
                "--set",
                "run.eval_questions=2",
                "--set",
                "run.eval_skip=0",
            ])
            .args(["--output-dir", runs.to_str().unwrap(), "--run-name", "sums"]),
    );
    let lines = metrics(&runs.join("sums"));
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l["reward_correct"].is_number() && l["turns"] == 1.0), "{lines:?}");
    let settings = read_json(&runs.join("sums/environment.json"));
    assert_eq!((settings["name"].as_str(), settings["reply_format"].as_str()), (Some("sums"), Some("final_answer")), "{settings}");
    let dev = read_jsonl(&runs.join("sums/dev_eval.jsonl"));
    assert!(dev.iter().all(|l| l["questions"] == 2), "the held-out slice is the package's `test` split: {dev:?}");
}

/// A grader component that spins or allocates without bound is stopped by its `[grader]` bounds: each such
/// answer's grade is a named limit error (reward 0), and the evaluation completes.
#[test]
fn a_grader_that_loops_or_allocates_fails_those_grades_by_name_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let package = new_package(dir.path(), "unruly");
    let manifest = std::fs::read_to_string(package.join("environment.toml")).unwrap();
    // The test grader (guest-tools/test-grader) misbehaves as a task's `misbehave` asks.
    let manifest = manifest
        .replace("path = \"grader/grader.wasm\"", &format!("path = {:?}", agentrt_runtime::TEST_GRADER_WASM))
        .replace("fuel = 1000000000", "fuel = 50000000")
        .replace("memory_mib = 64", "memory_mib = 16");
    std::fs::write(package.join("environment.toml"), manifest).unwrap();
    let rows = [
        r#"{"id": "loop", "split": "test", "question": "1?", "answer": 1, "misbehave": "loop"}"#,
        r#"{"id": "alloc", "split": "test", "question": "2?", "answer": 2, "misbehave": "allocate"}"#,
        r#"{"id": "fine", "split": "test", "question": "3?", "answer": 3}"#,
    ];
    std::fs::write(package.join("tasks.jsonl"), rows.join("\n")).unwrap();
    let (model, out) = (tiny_model(dir.path()), dir.path().join("eval"));
    succeed(agentrt().args(["eval", "--env", package.to_str().unwrap(), "--model", model.to_str().unwrap(), "--num-samples", "0"]).args([
        "--max-new-tokens",
        "4",
        "--output-dir",
        out.to_str().unwrap(),
    ]));
    let by_id: std::collections::HashMap<String, serde_json::Value> =
        read_jsonl(&out.join("transcripts.jsonl")).into_iter().map(|t| (t["question"]["id"].as_str().unwrap().to_string(), t)).collect();
    let error = |id: &str| by_id[id]["grader_error"].as_str().map(str::to_string);
    assert!(error("loop").is_some_and(|e| e.contains("test_grader.wasm ran past its fuel")), "{:?}", by_id["loop"]);
    assert!(error("alloc").is_some_and(|e| e.contains("memory")), "{:?}", by_id["alloc"]);
    assert_eq!(error("fine"), None, "{:?}", by_id["fine"]);
    assert!(by_id.values().all(|t| t["reward"] == 0.0), "a grade that failed pays nothing (and the tiny model's answer is wrong)");
}

/// A folder that is not a package, or a manifest with a bad key, is refused naming the file and the key.
#[test]
fn a_bad_package_is_refused_naming_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let missing = agentrt().args(["eval", "--env", dir.path().join("nowhere").to_str().unwrap(), "--baseline", "zero-shot"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && stderr.contains("neither a built-in one (wiki, code) nor a folder"), "{stderr}");
    let package = new_package(dir.path(), "typo");
    let manifest = std::fs::read_to_string(package.join("environment.toml")).unwrap().replace("kind = \"component\"", "kind = \"componnet\"");
    std::fs::write(package.join("environment.toml"), manifest).unwrap();
    let bad = agentrt().args(["train", "--env", package.to_str().unwrap(), "--print-config"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && stderr.contains("environment.toml") && stderr.contains("grader.kind: `componnet`"), "{stderr}");
}

/// docs/environments.md, run as written ([`crate::walk_through`]): from `env new` to an evaluated adapter.
#[test]
fn the_walk_through_for_an_environment_of_your_own_runs_as_written() {
    let (dir, ran) = crate::walk_through::run_page("docs/environments.md");
    let work = dir.path();
    assert_eq!(ran, 4, "the page's command blocks");
    let zero_shot = read_json(&work.join("capitals/eval/zero-shot/results.json"));
    assert_eq!(zero_shot["num_questions"], 3, "the three `test` tasks: {zero_shot}");
    assert!(zero_shot["info"]["system_prompt"].as_str().unwrap().starts_with("You answer geography questions"), "{zero_shot}");
    let lines = metrics(&work.join("capitals/runs/rl"));
    assert!(lines.len() == 2 && lines.iter().all(|l| l["reward_correct"].is_number() && l["reward_named"].is_number()), "{lines:?}");
    let trained = read_json(&work.join("capitals/eval/trained/results.json"));
    assert_eq!(trained["num_questions"], 3, "{trained}");
}

/// The example package that is neither wiki nor code (examples/environments/arithmetic): its two Python
/// components built by its build.sh, the base model evaluated zero-shot on a few `test` problems, the
/// calculator called as a model's program calls it, then two training steps.
#[test]
fn the_arithmetic_example_builds_evaluates_and_trains() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    // A copy, so the build writes nothing into the checkout.
    let package = dir.path().join("arithmetic");
    let copied = std::process::Command::new("cp").arg("-r").arg(root.join("examples/environments/arithmetic")).arg(&package).status().unwrap();
    assert!(copied.success());
    // Its build.sh lays each component out with this build's `agentrt tool new` / `env new`.
    let bin = Path::new(env!("CARGO_BIN_EXE_agentrt")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let built = std::process::Command::new("bash").arg(package.join("build.sh")).env("PATH", path).output().unwrap();
    assert!(built.status.success(), "build.sh failed:\n{}", String::from_utf8_lossy(&built.stderr));

    let env = package.to_str().unwrap();
    let out = dir.path().join("eval");
    succeed(agentrt().args(["eval", "--env", env, "--num-samples", "6", "--output-dir", out.to_str().unwrap()]));
    let results = read_json(&out.join("results.json"));
    assert_eq!(results["num_questions"], 6, "{results}");
    assert!(results["info"]["system_prompt"].as_str().unwrap().contains("- calculate(expression) -> float"), "the prompt lists the plug-in: {results}");
    let transcripts = read_jsonl(&out.join("transcripts.jsonl"));
    assert!(transcripts.iter().all(|t| t["reward_components"].as_array().unwrap().len() == 2), "the grader's two parts: {transcripts:?}");
    // The calculator, as a model's program calls it; what is not arithmetic is an error the program catches.
    let program = dir.path().join("calc.py");
    std::fs::write(
        &program,
        "print(calculate(\"14 * 12 - 95\"))\ntry:\n    calculate(\"__import__('os')\")\nexcept Exception as e:\n    print('refused:', e)\n",
    )
    .unwrap();
    let calculator = package.join("calculator/calculator.wasm");
    let printed = succeed(agentrt().args(["exec", program.to_str().unwrap(), "--fixture", "--tool", calculator.to_str().unwrap()]));
    assert!(printed.contains("73.0") && printed.contains("refused:") && printed.contains("not arithmetic"), "{printed}");

    let (model, runs) = (tiny_model(dir.path()), dir.path().join("runs"));
    succeed(
        agentrt()
            .args(["train", "--env", env, "--no-progress", "--model", model.to_str().unwrap(), "--max-steps", "2", "--num-rollouts", "2", "--batch-size", "2"])
            .args(["--advantage", "reinforce", "--set", "rollout.max_new_tokens=8", "--output-dir", runs.to_str().unwrap(), "--run-name", "arith"]),
    );
    let lines = metrics(&runs.join("arith"));
    assert!(lines.len() == 2 && lines.iter().all(|l| l["reward_correct"].is_number() && l["reward_tagged"].is_number()), "{lines:?}");
}
