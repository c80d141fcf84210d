//! What a user bringing their own corpus, questions and settings meets: a run refused by a check leaves
//! nothing that blocks its corrected retry, errors name the key that chose what failed, questions and
//! index that do not match are said, bad question files are refused with what to do, and a warm start
//! plays the adapter as it was trained.

use std::path::Path;

use crate::common::{agentrt, read_json, run_ok, tiny_model, train_args};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Questions about pages the fixture index does not hold, with no `split`.
fn foreign_questions(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("mine.jsonl");
    std::fs::write(
        &p,
        "{\"id\": \"t1\", \"question\": \"How deep are tomato seeds sown?\", \"answer\": \"6 mm\", \"page\": \"tomato\"}\n\
         {\"id\": \"b1\", \"question\": \"When is basil planted out?\", \"answer\": \"May\", \"page\": \"basil\"}\n",
    )
    .unwrap();
    p
}

#[test]
fn a_run_refused_by_a_check_leaves_nothing_that_blocks_its_retry() {
    let dir = tempfile::tempdir().unwrap();
    let (model, out) = (tiny_model(dir.path()), dir.path().join("runs"));
    let qs = foreign_questions(dir.path());
    // Questions without a split, trained on `all`, with the held-out slice on: the slice's split (run.eval_split,
    // empty: the wiki's `dev`) is in none of them.
    let mut args = train_args(&model, &qs, &out, "mine", 1);
    args.extend(["--set", "env.wiki.split=all", "--set", "run.eval_steps=1", "--set", "run.eval_skip=0"].map(String::from));
    let refused = agentrt().args(&args).output().unwrap();
    let said = stderr(&refused);
    assert!(!refused.status.success());
    assert!(said.contains("run.eval_split") && said.contains("`all`"), "the error names the key that chose the split: {said}");
    assert!(!out.join("mine").join("config.toml").exists(), "a refused run left its folder behind");

    // The corrected command runs, without --resume.
    args.extend(["--set", "run.eval_split=all"].map(String::from));
    run_ok(&args);
    assert!(out.join("mine/checkpoint-1").is_dir());

    // A folder whose run never finished a step (a kill before the first step ended) does not block either,
    // and `--resume` of it may change any key.
    let stale = out.join("stale");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::copy(out.join("mine/config.toml"), stale.join("config.toml")).unwrap();
    let mut resume = train_args(&model, &qs, &out, "stale", 1);
    resume.extend(["--set", "env.wiki.split=all", "--set", "algorithm.beta=0.05", "--resume", stale.to_str().unwrap()].map(String::from));
    run_ok(&resume);
    assert!(std::fs::read_to_string(stale.join("config.toml")).unwrap().contains("beta = 0.05"));
}

#[test]
fn questions_the_index_does_not_hold_are_said_and_bad_files_refused() {
    let dir = tempfile::tempdir().unwrap();
    let qs = foreign_questions(dir.path());
    let out = dir.path().join("eval");
    let eval = |questions: &Path, out: &Path| {
        agentrt()
            .args(["eval", "--fixture", "--baseline", "random", "--split", "all", "--num-samples", "0", "--max-turns", "1", "--force"])
            .args(["--questions", questions.to_str().unwrap(), "--output-dir", out.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let played = eval(&qs, &out);
    let said = stderr(&played);
    assert!(played.status.success(), "{said}");
    assert!(said.contains("2 of 2 questions name a gold page the search index does not hold") && said.contains("--index-dir"), "{said}");
    let results = read_json(&out.join("results.json"));
    assert_eq!(results["info"]["gold_pages_missing"], 2);
    // Their searches are not scored as misses: there is nothing to count, and the report says so.
    assert_eq!(results["metrics"]["search_hit_rate"]["total"], 0);
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("n/a (none to count)") && !md.contains("[0.0, 100.0] (0/0)"), "{md}");
    // The prompt the episodes were sent is recorded.
    assert!(results["info"]["system_prompt"].as_str().unwrap().contains("search_pages"), "{results}");

    for (name, text, expected) in [
        (
            "dup.jsonl",
            "{\"id\": \"a\", \"question\": \"q?\", \"answer\": \"x\"}\n{\"id\": \"a\", \"question\": \"r?\", \"answer\": \"y\"}\n",
            "dup.jsonl:2: duplicate question id \"a\" (first seen on line 1)",
        ),
        ("array.json", "[{\"id\": \"a\", \"question\": \"q?\", \"answer\": \"x\"}]\n", "one JSON object per line"),
        ("empty.jsonl", "\n", "no questions in it"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let refused = eval(&path, &out);
        assert!(!refused.status.success() && stderr(&refused).contains(expected), "{name}: {}", stderr(&refused));
    }
    let unnamed = dir.path().join("unnamed.jsonl");
    std::fs::write(&unnamed, "{\"question\": \"Who discovered oxygen?\", \"answer\": \"Scheele\", \"page\": \"oxygen\"}\n").unwrap();
    let played = eval(&unnamed, &out);
    assert!(played.status.success() && stderr(&played).contains("1 of 1 questions have no `id`"), "{}", stderr(&played));

    // An empty corpus is an error, not an index of nothing.
    let pages = dir.path().join("pages.jsonl");
    std::fs::write(&pages, "").unwrap();
    let index = agentrt().args(["index", "--pages", pages.to_str().unwrap(), "--index-dir", dir.path().join("idx").to_str().unwrap()]).output().unwrap();
    assert!(!index.status.success() && stderr(&index).contains("no pages in it"), "{}", stderr(&index));
}

#[test]
fn a_warm_start_plays_the_adapter_as_trained_unless_flags_say_otherwise() {
    let agent = read_json(&Path::new(env!("CARGO_MANIFEST_DIR")).join("models/smollm2-135m-wiki-read/agent.json"));
    let config = |extra: &[&str]| -> toml::Table {
        let text = run_ok([&["train", "--print-config", "--init-adapter", "models/smollm2-135m-wiki-read"][..], extra].concat());
        text.parse().unwrap()
    };
    let played = config(&[]);
    let wiki = &played["env"]["wiki"];
    assert_eq!(wiki["system_prompt"].as_str(), agent["system_prompt"].as_str(), "the adapter's own prompt");
    assert_eq!(wiki["demonstration"].as_bool(), agent["demonstration"].as_bool());
    assert_eq!(played["rollout"]["max_turns"].as_integer(), agent["max_turns"].as_i64());
    assert_eq!(played["rollout"]["max_new_tokens"].as_integer(), agent["max_new_tokens"].as_i64());
    // Flags and --set say otherwise, and win; sampling stays training's.
    let flagged = config(&["--max-turns", "5", "--set", "env.wiki.demonstration=true", "--set", "rollout.temperature=0.7"]);
    assert_eq!(flagged["rollout"]["max_turns"].as_integer(), Some(5));
    assert_eq!(flagged["env"]["wiki"]["demonstration"].as_bool(), Some(true));
    assert_eq!(flagged["rollout"]["temperature"].as_float(), Some(0.7));
    // The embedded defaults warm-start from the shipped adapter, so `agentrt train` alone plays it.
    let defaults: toml::Table = run_ok(["train", "--print-config", "--max-steps", "10"]).parse().unwrap();
    assert!(defaults["model"]["init_adapter"].as_str().unwrap().ends_with("models/smollm2-135m-wiki-read"), "{defaults:?}");
    assert_eq!(defaults["env"]["wiki"]["system_prompt"].as_str(), agent["system_prompt"].as_str());
    // A run directory is not an adapter: the error names its newest checkpoint.
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("runs/r");
    std::fs::create_dir_all(run.join("checkpoint-3/adapters")).unwrap();
    std::fs::write(run.join("config.toml"), "").unwrap();
    std::fs::write(run.join("checkpoint-3/trainer_state.json"), "{}").unwrap();
    let refused =
        agentrt().args(["eval", "--fixture", "--adapter", run.to_str().unwrap(), "--output-dir", dir.path().join("e").to_str().unwrap()]).output().unwrap();
    assert!(stderr(&refused).contains("a run directory, not an adapter") && stderr(&refused).contains("checkpoint-3"), "{}", stderr(&refused));
}

#[test]
fn config_errors_say_where_a_key_lives_and_what_a_type_is() {
    let bare = agentrt().args(["train", "--print-config", "--set", "batch_size=2"]).output().unwrap();
    assert!(stderr(&bare).contains("did you mean `rollout.batch_size=2`"), "{}", stderr(&bare));
    let typed = agentrt().args(["train", "--print-config", "--set", "rollout.batch_size=-2"]).output().unwrap();
    let said = stderr(&typed);
    assert!(said.contains("a whole number") && !said.contains("usize"), "{said}");
}
