//! `agentrt cache`: what agentrt keeps in its cache directory, and emptying the part that is rebuilt
//! on demand (precompiled components). Models and the index are shown, not removed: they take
//! minutes to fetch or build, and have commands of their own.

use agentrt_runtime::ComponentCache;
use std::path::Path;
use std::time::SystemTime;

/// Arguments of `agentrt cache`.
#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  agentrt cache                 where the cache is, what each part holds, and every precompiled component
  agentrt cache clean           remove the precompiled components (compiled again on next use)

The component cache is bounded: past its cap (1 GiB, or $AGENTRT_COMPONENT_CACHE_MB) the least
recently used components go. The cache lives in $AGENTRT_CACHE (default ~/.cache/agentrt).")]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
}

#[derive(clap::Subcommand)]
pub enum Action {
    /// Show the cache (the default).
    #[command(after_help = "Examples:\n  agentrt cache show\n  agentrt cache            # the same")]
    Show,
    /// Remove every precompiled component.
    #[command(after_help = "Examples:\n  agentrt cache clean     # compiled again on next use; models and the index stay")]
    Clean,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let components = ComponentCache::default_location().with_env_cap()?;
    match args.action.unwrap_or(Action::Show) {
        Action::Show => show(&components),
        Action::Clean => {
            let (count, bytes) = components.clean().map_err(|e| anyhow::anyhow!("cleaning {}: {e}", components.dir().display()))?;
            println!("removed {count} precompiled components ({}) from {}", mib(bytes), components.dir().display());
            Ok(())
        }
    }
}

fn show(components: &ComponentCache) -> anyhow::Result<()> {
    let root = agentrt_assets::cache_root();
    println!("cache: {}", root.display());
    let mut parts: Vec<_> = match std::fs::read_dir(&root) {
        Ok(read) => read.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => anyhow::bail!("{}: {e}", root.display()),
    };
    parts.sort();
    for part in &parts {
        println!("  {:<40} {:>12}", part.file_name().unwrap_or_default().to_string_lossy(), mib(dir_bytes(part)));
    }
    let entries = components.entries().map_err(|e| anyhow::anyhow!("{}: {e}", components.dir().display()))?;
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    println!(
        "\nprecompiled components: {} in {} ({} of a {} cap; least recently used go first)",
        entries.len(),
        components.dir().display(),
        mib(total),
        mib(components.cap_bytes())
    );
    for entry in &entries {
        let origin = entry.origin.as_deref().unwrap_or("(origin not recorded)");
        println!("  {:>10}  {:>9}  {origin}", mib(entry.bytes), age(entry.last_used));
    }
    Ok(())
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(read) = std::fs::read_dir(dir) else { return 0 };
    read.filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// How long ago, in the largest whole unit.
fn age(time: SystemTime) -> String {
    let seconds = SystemTime::now().duration_since(time).map(|d| d.as_secs()).unwrap_or(0);
    match seconds {
        0..60 => format!("{seconds} s ago"),
        60..3600 => format!("{} min ago", seconds / 60),
        3600..86400 => format!("{} h ago", seconds / 3600),
        _ => format!("{} d ago", seconds / 86400),
    }
}
