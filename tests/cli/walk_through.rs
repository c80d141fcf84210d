//! A documentation page run as a script: each fenced block whose info string names a file
//! (```jsonl file=garden/pages.jsonl) is written there, and each ```sh block runs with `bash` in that
//! order, in a fresh folder, with this build's `agentrt` first on the PATH. A command that fails fails the
//! test with its output; each block's stdout is kept as `block-LINE.out` for the checks that follow.

use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Runs the page at `page` (relative to the repository) in a fresh folder: the folder, and how many
/// command blocks ran.
pub fn run_page(page: &str) -> (tempfile::TempDir, usize) {
    let page_path = Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
    let text = std::fs::read_to_string(&page_path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_agentrt"));
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut ran = 0;
    for block in blocks(&text) {
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
                    "{page} line {line}:\n{text}\nfailed:\n{}\n{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                std::fs::write(work.join(format!("block-{line}.out")), &output.stdout).unwrap();
                ran += 1;
            }
        }
    }
    (dir, ran)
}
