//! `agentrt exec`: run a program through exactly the sandbox the trainer uses, and show everything it
//! did: its stdout, the value of its last expression, every tool call with its arguments and time, the
//! fuel it used, its peak memory and its wall time.

use crate::sandbox_options::SandboxOptions;
use crate::ProgramFailed;
use agentrt_runtime::{RunReport, Sandbox};
use std::path::PathBuf;

/// Arguments of `agentrt exec`.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  agentrt exec prog.py                      run a Python program against the wiki index
  agentrt exec --code 'search_pages(\"Denver Broncos\")'
  agentrt exec prog.py --json               one JSON object: result, stdout, host calls, usage
  agentrt exec prog.py --fuel 1000000 --timeout-ms 200
  agentrt exec prog.py --tool word_stats_tool.wasm   with a plug-in tool
  agentrt exec guest.wasm --input prog.py   a guest component of the agentrt:tools/tool-code world

Exit status: 0 when the program completed, 1 when it failed (a typed error is printed),
2 when the sandbox could not be set up (a malformed component, a missing index).")]
#[command(group(clap::ArgGroup::new("what").required(true).args(["program", "source"])))]
pub struct Args {
    /// The program: a `.py` file (Python subset), or a `.wasm` component of the tool-code world.
    pub program: Option<PathBuf>,
    /// Run this Python source instead of a file.
    #[arg(long, id = "source", conflicts_with = "program")]
    pub code: Option<String>,
    /// For a `.wasm` guest: the file whose text is passed to its `run` (default: none).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Print one JSON object instead of the human-readable report.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sandbox: SandboxOptions,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let report = runtime.block_on(async {
        let sandbox: Sandbox = args.sandbox.build().await?;
        let limits = sandbox.limits();
        let report = match (&args.program, &args.code) {
            (_, Some(code)) => sandbox.run(code).await,
            (Some(path), None) if path.extension().is_some_and(|e| e == "wasm") => {
                let guest = sandbox.load_guest(path)?;
                let input = match &args.input {
                    Some(input) => read(input)?,
                    None => String::new(),
                };
                sandbox.run_guest(&guest, &input, limits).await
            }
            (Some(path), None) => sandbox.run(&read(path)?).await,
            (None, None) => unreachable!("clap requires a program or --code"),
        };
        // The process ends after the report: tearing down the index (13,000 sections) and the engine
        // would only cost time that the operating system spends anyway, a tenth of a one-search run.
        std::mem::forget(sandbox);
        anyhow::Ok(report)
    });
    let report = match report {
        Ok(report) => report,
        // With --json, a run that could not start is one JSON object too (and the message on stderr).
        Err(error) if args.json => {
            let mut object = serde_json::json!({"error": "setup", "message": crate::causes_once(&error)});
            if let Some(e) = error.downcast_ref::<NotUtf8>() {
                object["error"] = "not-utf8".into();
                object["path"] = e.path.display().to_string().into();
                object["byte_offset"] = e.offset.into();
            }
            println!("{}", serde_json::to_string_pretty(&object)?);
            return Err(error);
        }
        Err(error) => return Err(error),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_human(&report);
    }
    match &report.result {
        Ok(_) => Ok(()),
        Err(error) => Err(ProgramFailed(error.kind_name()).into()),
    }
}

/// A program or input file that is not UTF-8 text, with where its first invalid byte is.
#[derive(Debug, thiserror::Error)]
#[error("{}: not UTF-8 text: the byte at offset {offset} (0x{byte:02x}) is not valid UTF-8", .path.display())]
struct NotUtf8 {
    path: PathBuf,
    /// The 0-based offset of the first invalid byte.
    offset: usize,
    byte: u8,
}

fn read(path: &std::path::Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        NotUtf8 { path: path.to_path_buf(), offset, byte: e.as_bytes()[offset] }.into()
    })
}

fn print_human(report: &RunReport) {
    if !report.stdout.is_empty() {
        println!("── stdout ──");
        print!("{}", report.stdout);
        if !report.stdout.ends_with('\n') {
            println!();
        }
    }
    if let Ok(outcome) = &report.result {
        if let Some(value) = &outcome.value {
            println!("── value ──\n{value}");
        }
    }
    println!("── host calls ({}) ──", report.host_calls.len());
    for (i, call) in report.host_calls.iter().enumerate() {
        let args = match &call.args {
            serde_json::Value::Object(map) => map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "),
            other => other.to_string(),
        };
        let status = call.error.as_ref().map(|e| format!("  error: {e}")).unwrap_or_default();
        println!("{:>3}. {}({args})  {:.3} ms{status}", i + 1, call.tool, call.duration.as_secs_f64() * 1e3);
    }
    match &report.result {
        Ok(_) => println!("── ok ──"),
        Err(error) => {
            println!("── error: {} ──", error.kind_name());
            match error {
                agentrt_runtime::ProgramError::Exception { traceback, .. } => println!("{traceback}"),
                agentrt_runtime::ProgramError::UnknownTool { traceback, .. } if !traceback.is_empty() => println!("{traceback}"),
                other => println!("{other}"),
            }
        }
    }
    println!(
        "fuel {} · peak memory {:.1} MiB · wall {:.3} ms",
        report.fuel_used,
        report.peak_memory_bytes as f64 / (1 << 20) as f64,
        report.wall_time.as_secs_f64() * 1e3
    );
}
