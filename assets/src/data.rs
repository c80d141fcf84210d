//! Where the bundled data is: a default such as `data/wiki/questions.jsonl` (or a shipped adapter under
//! `models/`) is relative to the checkout, and a command run from another folder finds it there.

use std::path::{Path, PathBuf};

/// The variable naming a folder that holds the bundled `data/` (a checkout), tried before the checkout this
/// binary was built from.
pub const DATA_ROOT_ENV: &str = "AGENTRT_DATA_ROOT";

/// The checkout this binary was built from (this crate's parent folder), where `data/` is.
pub fn checkout_dir() -> PathBuf {
    let assets = Path::new(env!("CARGO_MANIFEST_DIR"));
    assets.parent().unwrap_or(assets).to_path_buf()
}

/// The roots a relative `data/...` path is looked up in after the current folder: `$AGENTRT_DATA_ROOT`
/// when set, then the checkout.
fn roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = std::env::var_os(DATA_ROOT_ENV).filter(|v| !v.is_empty()).map(PathBuf::from).into_iter().collect();
    roots.push(checkout_dir());
    roots
}

/// The file `path` names: itself when it exists, is absolute or is not under `data/` or `models/` (the
/// user's own file, read as given); otherwise, for the bundled data and the shipped models, the first of
/// `$AGENTRT_DATA_ROOT/path` and CHECKOUT/path that exists. When none does, a not-found error that says where it looked and what names
/// another file (`names_another`, e.g. "--questions FILE or the config's env.wiki.questions").
pub fn data_file(path: &Path, names_another: &str) -> std::io::Result<PathBuf> {
    if path.is_absolute() || path.exists() || !(path.starts_with("data") || path.starts_with("models")) {
        return Ok(path.to_path_buf());
    }
    let roots = roots();
    if let Some(found) = roots.iter().map(|r| r.join(path)).find(|p| p.exists()) {
        return Ok(found);
    }
    let cwd = std::env::current_dir().map_or_else(|_| "the current folder".to_string(), |d| d.display().to_string());
    let looked: Vec<String> = std::iter::once(cwd).chain(roots.iter().map(|r| r.display().to_string())).collect();
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "no such file in {} (the bundled data lives in the checkout's data/; ${DATA_ROOT_ENV} names a folder that holds it, \
             and {names_another} names another file)",
            looked.join(" nor in ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_data_is_found_from_any_folder() {
        // The tests run in this crate's folder, where data/ is not: the checkout's is found.
        let found = data_file(Path::new("data/wiki/questions.jsonl"), "--questions").unwrap();
        assert_eq!(found, checkout_dir().join("data/wiki/questions.jsonl"));
        assert!(found.is_file());
        // So are the shipped models.
        assert_eq!(data_file(Path::new("models/smollm2-135m-wiki-read"), "--adapter").unwrap(), checkout_dir().join("models/smollm2-135m-wiki-read"));
        // A file of the user's, or an absolute path, is read as given (and fails as given).
        assert_eq!(data_file(Path::new("mine.jsonl"), "--questions").unwrap(), Path::new("mine.jsonl"));
        assert_eq!(data_file(Path::new("/no/such.jsonl"), "--questions").unwrap(), Path::new("/no/such.jsonl"));
        // Bundled data that is nowhere: where it looked, and what names another file.
        let e = data_file(Path::new("data/wiki/nothing.jsonl"), "--questions FILE").unwrap_err().to_string();
        assert!(e.contains(&checkout_dir().display().to_string()) && e.contains("--questions FILE") && e.contains(DATA_ROOT_ENV), "{e}");
    }
}
