//! docs/your-data.md, run: the walk-through of a corpus of one's own is a script as well as a page. Each
//! fenced block whose info string names a file (```jsonl file=garden/pages.jsonl) is written there, and
//! each ```sh block runs with `bash` in that order, in a fresh folder, with this build's `agentrt` first on
//! the PATH. A command that fails fails the test with its output; then what the page says the commands
//! give is checked in the files they wrote.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::read_json;

/// A block of the page: a file to write, or commands to run.
enum Block {
    File { path: String, text: String },
    Commands { text: String, line: usize },
}

/// The page's blocks that the walk-through does something with, in order.
fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = page.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let Some(info) = line.strip_prefix("```") else { continue };
        let body: Vec<&str> = lines.by_ref().map(|(_, l)| l).take_while(|l| !l.starts_with("```")).collect();
        let text = body.join("\n") + "\n";
        let file = info.split_whitespace().find_map(|w| w.strip_prefix("file="));
        match (info.split_whitespace().next(), file) {
            (_, Some(path)) => out.push(Block::File { path: path.to_string(), text }),
            (Some("sh"), None) => out.push(Block::Commands { text, line: i + 1 }),
            _ => {}
        }
    }
    out
}

#[test]
fn the_walk_through_for_your_own_data_runs_as_written() {
    let page_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/your-data.md");
    let page = std::fs::read_to_string(&page_path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_agentrt"));
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut ran = 0;
    for block in blocks(&page) {
        match block {
            Block::File { path, text } => {
                let target = work.join(&path);
                std::fs::create_dir_all(target.parent().unwrap()).unwrap();
                std::fs::write(&target, text).unwrap();
            }
            Block::Commands { text, line } => {
                let output = Command::new("bash")
                    .args(["-euo", "pipefail", "-c", &text])
                    .current_dir(work)
                    .env("PATH", &path)
                    // The page names every index it uses; none leaks in from the environment.
                    .env_remove("AGENTRT_INDEX_DIR")
                    .env_remove("AGENTRT_TOOLS_DIR")
                    .env("CARGO_TARGET_DIR", work.join("target"))
                    .output()
                    .unwrap();
                assert!(
                    output.status.success(),
                    "docs/your-data.md line {line}:\n{text}\nfailed:\n{}\n{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                std::fs::write(work.join(format!("block-{line}.out")), &output.stdout).unwrap();
                ran += 1;
            }
        }
    }
    assert!(ran >= 9, "the page's command blocks were not all found ({ran})");
    let printed = |needle: &str| {
        std::fs::read_dir(work)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".out"))
            .any(|e| std::fs::read_to_string(e.path()).unwrap().contains(needle))
    };
    // Search finds the page that answers; a program reads its section.
    assert!(printed("lavender:pruning") && printed("Prune lavender in late August"), "search and exec");
    // Each evaluation recorded the prompt it sent: the corpus's own, with the plug-in listed where {plugins} was.
    let base = read_json(&work.join("garden/eval/base/results.json"));
    assert!(base["info"]["system_prompt"].as_str().unwrap().starts_with("You answer gardening questions"), "{base}");
    assert_eq!(base["info"]["demonstration"][3][1], "<answer>45 cm</answer>");
    assert_eq!(base["info"]["gold_pages_missing"], 0);
    let with_tool = read_json(&work.join("garden/eval/with-tool/results.json"));
    let prompt = with_tool["info"]["system_prompt"].as_str().unwrap();
    assert!(prompt.contains("- last_frost(region) -> str") && prompt.find("last_frost") < prompt.find("Then reply"), "{prompt}");
    // The trajectories, SFT and RL runs wrote what the page says.
    assert!(std::fs::read_to_string(work.join("garden/synth.jsonl")).unwrap().lines().count() >= 4);
    for f in ["sft/checkpoint-4/agent.json", "rl/checkpoint-2/agent.json", "rl/environment.json", "rl/dev_eval.jsonl", "rl/curves.png"] {
        assert!(work.join("garden/runs").join(f).is_file(), "missing garden/runs/{f}");
    }
    let served = read_json(&work.join("garden/eval/served/results.json"));
    assert_eq!(served["num_questions"], 3);
    // The plug-in answered and its error reached the program.
    assert!(printed("mid May") && printed("caught: last_frost: unknown region"), "the plug-in's calls");
}
