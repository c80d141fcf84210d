//! The run config reader (`agentrt train --config FILE`, `agentrt sft --config FILE`, and a run's saved
//! `config.toml` read back to resume): TOML layered over the embedded defaults, every key type-checked
//! where it lands, unknown keys refused with a did-you-mean, ranges checked, errors located at file:line.

use crate::violated;
use agentrt_trainer::{RunConfig, SftConfig, TrainConfig, TrainError};
use std::path::Path;

/// The text as a `train` config file and as an `sft` one, both as a `--config` file (layered over the
/// defaults) and as a saved run's `config.toml` (read exactly). A refusal is a config error that names the
/// file, and the line of a syntax error; a line it names is one of the file's. An accepted config writes
/// out and reads back equal (so a NaN, which equals nothing, is not accepted).
pub fn train_config(data: &[u8]) {
    let path = crate::scratch("config.toml");
    crate::write(&path, data);
    check::<TrainConfig>(&path, data);
    check::<SftConfig>(&path, data);
}

fn check<C: RunConfig + std::fmt::Debug>(path: &Path, data: &[u8]) {
    let text = std::str::from_utf8(data).ok();
    let parses = text.is_some_and(|t| t.parse::<toml::Table>().is_ok());
    let shown = path.display().to_string();
    let lines = text.map_or(0, |t| t.lines().count());
    let check_error = |e: TrainError, how: &str| {
        let TrainError::Config(message) = e else { violated(&format!("{how}: not a config error: {e}"), data) };
        if !message.starts_with(&shown) {
            // A range error of a key the file does not give (a combination with a default) names the key.
            let names_key = message.split(": ").next().is_some_and(|k| k.contains('.') && !k.contains(' '));
            if parses && names_key {
                return;
            }
            violated(&format!("{how}: the error names neither the file nor a key: {message}"), data);
        }
        let after = &message[shown.len()..];
        if let Some(line) = after.strip_prefix(':').and_then(|a| a.split(':').next()).and_then(|l| l.parse::<usize>().ok()) {
            if line == 0 || line > lines.max(1) {
                violated(&format!("{how}: the error names line {line} of a {lines}-line file: {message}"), data);
            }
        }
        if text.is_some() && !parses && !message.contains("line ") {
            violated(&format!("{how}: a syntax error that names no line: {message}"), data);
        }
    };
    let round_trip = |c: C, how: &str| {
        let saved = crate::scratch("saved.toml");
        crate::write(&saved, c.to_toml().as_bytes());
        match C::read(&saved) {
            Ok(again) if again == c => {}
            Ok(again) => violated(&format!("{how}: the accepted config reads back different:\n  {c:?}\n  {again:?}"), data),
            Err(e) => violated(&format!("{how}: the accepted config, saved, is refused: {e}"), data),
        }
    };
    match C::from_layers(Some(path), &[]) {
        Ok(c) => round_trip(c, "--config"),
        Err(e) => check_error(e, "--config"),
    }
    match C::read(path) {
        Ok(c) => round_trip(c, "a saved config.toml"),
        Err(e) => check_error(e, "a saved config.toml"),
    }
}
