//! The Python side of a side-by-side benchmark: a process started with the peer's Python and script,
//! spoken to in JSON lines.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The Python that `bash bench/policy/setup_venv.sh` makes, with torch, transformers and PEFT.
pub const DEFAULT_PYTHON: &str = "bench/policy/.venv/bin/python";

/// Checks that the peer's Python and script are there, naming the fix.
pub fn check(python: &std::path::Path, script: &std::path::Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        python.exists(),
        "{}: no Python with torch and transformers there; run `bash bench/policy/setup_venv.sh` first (about 5 GB), or pass --python",
        python.display()
    );
    anyhow::ensure!(script.exists(), "{}: the peer script is not there (run from the repository root, or pass --peer)", script.display());
    Ok(())
}

/// A peer in a Python process that speaks JSON lines: its first line says it is ready (with its
/// versions), then one answer per request.
pub(super) struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub(super) versions: serde_json::Value,
}

impl Peer {
    pub(super) fn start(python: &std::path::Path, script: &std::path::Path, model: &std::path::Path, threads: usize) -> anyhow::Result<Peer> {
        eprintln!("starting the peer ({} {})", python.display(), script.display());
        let mut child = Command::new(python)
            .arg(script)
            .arg(model)
            .arg(threads.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| anyhow::anyhow!("{}: {e}", python.display()))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut peer = Peer { child, stdin, stdout, versions: serde_json::Value::Null };
        let ready = peer.read()?;
        anyhow::ensure!(ready["ready"] == true, "the peer's first line was not ready: {ready}");
        peer.versions = ready;
        Ok(peer)
    }

    fn read(&mut self) -> anyhow::Result<serde_json::Value> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line)?;
        anyhow::ensure!(n > 0, "the peer exited (its stderr is above)");
        serde_json::from_str(&line).map_err(|e| anyhow::anyhow!("the peer wrote {line:?}: {e}"))
    }

    pub(super) fn ask(&mut self, request: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
        writeln!(self.stdin, "{request}")?;
        self.stdin.flush()?;
        self.read()
    }

    pub(super) fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}
