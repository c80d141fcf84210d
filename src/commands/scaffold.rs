//! A new project folder written from templates: what `agentrt tool new` and `agentrt env new` share. The
//! folder must not exist (nothing is ever overwritten), and a write that fails leaves nothing behind.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};

/// One file of a new project: its path inside the folder, its text, and whether it is a script.
pub struct ProjectFile {
    pub path: String,
    pub text: String,
    pub executable: bool,
}

/// Writes `files` into a new folder `name` under `dir` and returns it. `dir` itself is made when its
/// parent exists (a missing parent is more often a typo than a wish); an existing `dir/name` is refused.
pub fn create(dir: &Path, name: &str, files: &[ProjectFile]) -> anyhow::Result<PathBuf> {
    let root = dir.join(name);
    if !dir.is_dir() {
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !parent.is_dir() {
            bail!(
                "--dir {}: its parent {} does not exist (nothing was written); create it first, or give a --dir whose parent exists",
                dir.display(),
                parent.display()
            );
        }
        std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // create_dir, not create_dir_all: it fails on anything already there, so nothing is ever overwritten.
    if let Err(error) = std::fs::create_dir(&root) {
        if error.kind() == std::io::ErrorKind::AlreadyExists {
            bail!("{} already exists; choose another NAME or --dir (nothing was written)", root.display());
        }
        return Err(error).with_context(|| format!("creating {}", root.display()));
    }
    if let Err(error) = write_files(&root, files) {
        // The folder is ours: leave nothing half-made behind.
        let _ = std::fs::remove_dir_all(&root);
        return Err(error);
    }
    Ok(root)
}

fn write_files(root: &Path, files: &[ProjectFile]) -> anyhow::Result<()> {
    for file in files {
        let path = root.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &file.text).with_context(|| format!("writing {}", path.display()))?;
        if file.executable {
            make_executable(&path)?;
        }
    }
    Ok(())
}

/// Whether `name` is kebab-case: lowercase letters and digits in words joined by `-`, each word starting
/// with a letter (`weather`, `unit-convert`, `geo2-lookup`).
pub fn is_kebab_case(name: &str) -> bool {
    !name.is_empty()
        && name.split('-').all(|word| word.starts_with(|c: char| c.is_ascii_lowercase()) && word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()))
}

#[cfg(unix)]
fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).with_context(|| format!("making {} executable", path.display()))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> anyhow::Result<()> {
    Ok(())
}
