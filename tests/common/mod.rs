//! What the CLI tests share: the binary, the fixture questions and a short `agentrt train` on a tiny model.
// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn agentrt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentrt"))
}

pub fn tiny_model(dir: &Path) -> PathBuf {
    agentrt_policy::tiny::tiny_model_dir(dir).unwrap()
}

/// Three train-split questions about the fixture corpus (its pages: denver_broncos, paris, oxygen).
pub fn questions(dir: &Path) -> PathBuf {
    let p = dir.join("questions.jsonl");
    let rows = [
        r#"{"id": "q1", "question": "Who did the Broncos defeat in Super Bowl 50?", "answer": "Carolina Panthers", "page": "denver_broncos", "split": "train"}"#,
        r#"{"id": "q2", "question": "What is the capital of France?", "answer": "Paris", "page": "paris", "split": "train"}"#,
        r#"{"id": "q3", "question": "Who discovered oxygen?", "answer": "Carl Wilhelm Scheele", "page": "oxygen", "split": "train"}"#,
    ];
    std::fs::write(&p, rows.join("\n")).unwrap();
    p
}

/// `agentrt train` on the fixture tools: `steps` steps of 2 questions x 2 rollouts, short replies, a
/// checkpoint every step.
pub fn train_args(model: &Path, questions: &Path, out: &Path, name: &str, steps: usize) -> Vec<String> {
    [
        "train",
        "--fixture",
        "--no-progress",
        "--model",
        model.to_str().unwrap(),
        "--set",
        &format!("data.questions={}", questions.display()),
        "--max-steps",
        &steps.to_string(),
        "--num-rollouts",
        "2",
        "--batch-size",
        "2",
        "--advantage",
        "reinforce",
        "--lr",
        "1e-2",
        "--set",
        "run.save_steps=1",
        "--set",
        "rollout.max_new_tokens=16",
        "--set",
        "rollout.max_turns=2",
        "--output-dir",
        out.to_str().unwrap(),
        "--run-name",
        name,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// What a hand-written plug-in's `metadata.describe()` does.
pub enum Describe<'a> {
    /// Lists these tools, each with a one-line description.
    Lists(&'a [&'a str]),
    /// Traps at once: a plug-in with a bug in its start.
    Traps,
}

/// A plug-in component written by hand (in WAT) in `dir`: its `metadata.describe()` does what `describe`
/// says, and its interface `local:hand/tools@0.1.0` exports `exported`, each a `func() -> u32` that returns 7.
pub fn hand_written_plugin(dir: &Path, file: &str, describe: Describe, exported: &[&str]) -> PathBuf {
    let (described, describe_body): (&[&str], &str) = match describe {
        Describe::Lists(names) => (names, "(i32.const 16)"),
        Describe::Traps => (&[], "unreachable"),
    };
    // Linear memory: describe's return area (the list's pointer and length) at 16, the list's records
    // (name and description, each a pointer and a length) at 512, their strings from 1024.
    let (mut records, mut strings) = (Vec::<u8>::new(), Vec::<u8>::new());
    for name in described {
        for text in [name.to_string(), format!("-> int: {name}, by hand")] {
            records.extend((1024 + strings.len() as u32).to_le_bytes());
            records.extend((text.len() as u32).to_le_bytes());
            strings.extend(text.as_bytes());
        }
    }
    let list = [512u32.to_le_bytes(), (described.len() as u32).to_le_bytes()].concat();
    let data = |bytes: &[u8]| bytes.iter().map(|b| format!("\\{b:02x}")).collect::<String>();
    let core_funcs: String = exported.iter().map(|t| format!(r#"(func (export "{t}") (result i32) (i32.const 7))"#)).collect();
    let lifted: String = exported.iter().enumerate().map(|(i, t)| format!(r#"(func $tool{i} (result u32) (canon lift (core func $core "{t}")))"#)).collect();
    let exports: String = exported.iter().enumerate().map(|(i, t)| format!(r#"(export "{t}" (func $tool{i}))"#)).collect();
    let wat = format!(
        r#"(component
  (core module $m
    (memory (export "memory") 1)
    (data (i32.const 16) "{list}")
    (data (i32.const 512) "{records}")
    (data (i32.const 1024) "{strings}")
    (func (export "describe") (result i32) {describe_body})
    (func (export "stateless") (result i32) (i32.const 1))
    {core_funcs})
  (core instance $core (instantiate $m))
  (type $doc (record (field "name" string) (field "description" string)))
  (func $describe (result (list $doc)) (canon lift (core func $core "describe") (memory (core memory $core "memory"))))
  (func $stateless (result bool) (canon lift (core func $core "stateless")))
  (component $metadata
    (type $doc-def (record (field "name" string) (field "description" string)))
    (import "import-type-tool-doc" (type $doc (eq $doc-def)))
    (import "import-func-describe" (func $describe (result (list $doc))))
    (import "import-func-stateless" (func $stateless (result bool)))
    (export $doc-out "tool-doc" (type $doc))
    (type $describe-type (func (result (list $doc-out))))
    (export "describe" (func $describe) (func (type $describe-type)))
    (export "stateless" (func $stateless)))
  (instance $meta (instantiate $metadata
    (with "import-type-tool-doc" (type $doc))
    (with "import-func-describe" (func $describe))
    (with "import-func-stateless" (func $stateless))))
  (export "agentrt:tools/metadata@0.1.0" (instance $meta))
  {lifted}
  (instance $tools {exports})
  (export "local:hand/tools@0.1.0" (instance $tools)))"#,
        list = data(&list),
        records = data(&records),
        strings = data(&strings),
    );
    let path = dir.join(file);
    std::fs::write(&path, wat::parse_str(&wat).unwrap_or_else(|e| panic!("{e}\n{wat}"))).unwrap();
    path
}
