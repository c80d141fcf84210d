//! `agentrt eval` and the help of every command as a new user meets them: an output directory is not
//! overwritten silently, the bundled data is found from any folder, and every `--help` has examples.

use std::path::Path;

use crate::common::{agentrt, questions, read_json, succeed, tiny_model};

/// `eval` with the random baseline (no model) on the fixture tools, from `cwd`, into `out`; `extra` flags last.
fn random_eval(cwd: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    agentrt()
        .current_dir(cwd)
        .args(["eval", "--fixture", "--baseline", "random", "--num-samples", "2", "--max-turns", "1", "--output-dir", out.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn eval_refuses_an_output_dir_that_holds_results_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (qs, out) = (questions(dir.path()), dir.path().join("eval"));
    let q = ["--questions", qs.to_str().unwrap(), "--split", "train"];
    let first = random_eval(dir.path(), &out, &q);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let results = std::fs::read(out.join("results.json")).unwrap();

    let again = random_eval(dir.path(), &out, &q);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("holds an earlier evaluation") && stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read(out.join("results.json")).unwrap(), results, "the refused run wrote over the results");

    let forced = random_eval(dir.path(), &out, &[&q[..], &["--force"]].concat());
    assert!(forced.status.success(), "{}", String::from_utf8_lossy(&forced.stderr));
    assert_eq!(read_json(&out.join("results.json"))["num_questions"], 2);
}

/// `--decode-activations int8` multiplies a GGUF's blocks: over a model kept in f32 (safetensors) it
/// would report a decoding that did not happen, so it is refused, naming the flag and the model.
#[test]
fn int8_activations_are_refused_for_a_model_without_gguf_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let (model, qs) = (tiny_model(dir.path()), questions(dir.path()));
    let refused = agentrt()
        .args(["eval", "--fixture", "--model", model.to_str().unwrap(), "--questions", qs.to_str().unwrap(), "--split", "train"])
        .args(["--num-samples", "1", "--decode-activations", "int8", "--output-dir", dir.path().join("e").to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("--decode-activations int8") && stderr.contains("no GGUF blocks") && stderr.contains("tiny-model"), "{stderr}");
    assert!(!dir.path().join("e/results.json").exists(), "a refused evaluation wrote results");
}

/// `--num-generations` on the wiki: every question played that many times, pass@k reported over the
/// questions beside the metrics over every sample; greedy repeats are refused.
#[test]
fn wiki_eval_reports_pass_at_k_over_repeated_samples() {
    let dir = tempfile::tempdir().unwrap();
    let (qs, out) = (questions(dir.path()), dir.path().join("eval"));
    let q = ["--questions", qs.to_str().unwrap(), "--split", "train", "--num-generations", "3"];
    let greedy = random_eval(dir.path(), &out, &q);
    let stderr = String::from_utf8_lossy(&greedy.stderr);
    assert!(!greedy.status.success() && stderr.contains("--temperature"), "{stderr}");

    let played = random_eval(dir.path(), &out, &[&q[..], &["--temperature", "1"]].concat());
    assert!(played.status.success(), "{}", String::from_utf8_lossy(&played.stderr));
    let results = read_json(&out.join("results.json"));
    assert_eq!(results["num_questions"], 6, "two questions, three samples each");
    let pass_at = results["metrics"]["pass_at"].as_object().unwrap();
    assert_eq!(pass_at.keys().collect::<Vec<_>>(), ["1", "2", "3"]);
    for v in pass_at.values() {
        assert_eq!(v["total"], 2, "averaged over questions");
    }
    assert!((pass_at["1"]["value"].as_f64().unwrap() - results["accuracy"].as_f64().unwrap()).abs() < 1e-12);
    let p: Vec<f64> = pass_at.values().map(|v| v["value"].as_f64().unwrap()).collect();
    assert!(p.windows(2).all(|w| w[0] <= w[1]), "pass@k grows with k: {p:?}");
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| pass@3 (over 2 questions) |"), "{md}");
}

/// Progress comes as each episode ends, not once when its batch is graded: three questions in one batch
/// (eval's default is 8) give a line at each of 1/3, 2/3 and 3/3 (off a terminal, where every 5% is shown).
#[test]
fn eval_shows_progress_as_each_episode_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (qs, out) = (questions(dir.path()), dir.path().join("eval"));
    let played = agentrt()
        .args(["eval", "--fixture", "--baseline", "random", "--questions", qs.to_str().unwrap(), "--split", "train", "--num-samples", "3"])
        .args(["--max-turns", "1", "--output-dir", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&played.stderr);
    assert!(played.status.success(), "{stderr}");
    let counted: Vec<&str> =
        stderr.lines().filter_map(|l| l.strip_prefix("eval: ")).filter_map(|l| l.split(" episodes").next().filter(|_| l.contains(" episodes"))).collect();
    assert_eq!(counted, ["1/3", "2/3", "3/3"], "{stderr}");
}

#[test]
fn the_bundled_data_is_found_from_any_folder() {
    let dir = tempfile::tempdir().unwrap();
    // No --questions: the default, data/wiki/questions.jsonl, is not in this folder but in the checkout.
    let out = dir.path().join("eval");
    let played = random_eval(dir.path(), &out, &[]);
    assert!(played.status.success(), "{}", String::from_utf8_lossy(&played.stderr));
    assert_eq!(read_json(&out.join("results.json"))["num_questions"], 2);

    // Bundled data that is nowhere: the error says where it looked and what names another file.
    let missing = agentrt().current_dir(dir.path()).args(["index", "--pages", "data/wiki/no-such-pages.jsonl"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(2), "{stderr}");
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).display().to_string();
    assert!(stderr.contains("cannot read data/wiki/no-such-pages.jsonl") && stderr.contains(&checkout) && stderr.contains("--pages FILE"), "{stderr}");
}

/// The subcommands `agentrt ARGS --help` lists (without `help`).
fn subcommands(args: &[String]) -> Vec<String> {
    let help = succeed(agentrt().args(args).arg("--help"));
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn every_command_has_examples_in_its_help() {
    let mut missing = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    let mut seen = 0;
    while let Some(args) = todo.pop() {
        seen += 1;
        let help = succeed(agentrt().args(&args).arg("--help"));
        if !help.contains("\nExamples:\n") {
            missing.push(format!("agentrt {}", args.join(" ")));
        }
        for sub in subcommands(&args) {
            todo.push([args.clone(), vec![sub]].concat());
        }
    }
    assert!(seen > 20, "only {seen} commands found");
    assert!(missing.is_empty(), "no Examples section in the --help of: {missing:?}");
}
