//! How the config of a command that makes a run directory is built, resumed, read and saved: embedded
//! defaults, a user file and `--set section.key=value` overrides, laid over each other as TOML tables and
//! each checked where it was written (unknown keys are errors naming their file and line, with the key they
//! resemble). Sections nest (`[env.wiki]` is `env.wiki.KEY`). A config may have moved keys since a file was
//! written ([`RunConfig::MOVED_KEYS`]): a layer that names a key where it used to be is read as if it named
//! it where it is now, with a warning, so saved runs resume and old files keep working.

use crate::error::TrainError;
use serde::Serialize;
use std::path::Path;

/// The config of a command that makes a run directory (`agentrt train`'s [`crate::TrainConfig`],
/// `agentrt sft`'s [`crate::SftConfig`]): built from its embedded defaults, a file and `--set` overrides,
/// saved as the run's `config.toml`, read back exactly, and layered again to resume. Each config brings
/// its defaults, what a resume may change, the keys it moved, and its own checks.
pub trait RunConfig: Sized + Serialize + serde::de::DeserializeOwned + PartialEq {
    /// The embedded defaults (TOML with every key).
    const DEFAULTS: &'static str;
    /// What errors call the defaults.
    const DEFAULTS_NAME: &'static str;
    /// What errors call a directory holding a run of this config (`a run directory`).
    const RUN_DIRECTORY: &'static str;
    /// The keys a resumed run may change: its length and how often it logs, evaluates and saves.
    const CHANGEABLE_ON_RESUME: &'static [&'static str];
    /// Keys that moved, `(where it was, where it is)`, both as dotted paths: files and `--set`s that use the
    /// old place are read as the new one (a warning says so).
    const MOVED_KEYS: &'static [(&'static str, &'static str)] = &[];
    /// Keys the defaults leave out because unset is their default (an `Option` the config skips when
    /// saving), as dotted paths: files and `--set`s may still give them.
    const OPTIONAL_KEYS: &'static [&'static str] = &[];

    /// `run.output_dir` (where run directories go) and `run.run_name` (empty: derived).
    fn run_section(&self) -> (&str, &str);

    /// The run's name when `run.run_name` is empty: the model's and the hyperparameters that tell runs apart.
    fn derived_name(&self) -> String;

    /// The run's name: `run.run_name`, or [`RunConfig::derived_name`].
    fn run_name(&self) -> String {
        match self.run_section().1 {
            "" => self.derived_name(),
            given => given.to_string(),
        }
    }

    /// The run directory this config names: `output_dir/run_name`.
    fn run_dir(&self) -> std::path::PathBuf {
        Path::new(self.run_section().0).join(self.run_name())
    }

    /// Checks ranges and combinations; the message names the key.
    fn validate(&self) -> Result<(), TrainError>;

    /// Resolves the names that stand for something found when the config is built (`model.init_adapter =
    /// "shipped"`); by default there are none.
    fn resolve(&mut self) -> Result<(), TrainError> {
        Ok(())
    }

    /// What a warm start brings once the config is known: the settings its adapter was trained to play
    /// with, as a layer laid between the defaults and the user's file and flags (so what the user sets
    /// wins, and what they do not set is the adapter's); `None` by default.
    fn warm_start_layer(&self) -> Result<Option<toml::Table>, TrainError> {
        Ok(None)
    }

    /// The defaults, then the file (a partial file is fine: its keys replace the defaults'), then each
    /// `section.key=value` override (the value parsed as TOML, else taken as a string); names resolved
    /// ([`RunConfig::resolve`]); when that config warm-starts from an adapter with settings of its own, the
    /// same again with them laid over the defaults ([`RunConfig::warm_start_layer`]); then checked.
    fn from_layers(file: Option<&Path>, overrides: &[String]) -> Result<Self, TrainError> {
        let defaults = parse_table(Self::DEFAULTS, Self::DEFAULTS_NAME)?;
        let mut config: Self = layered(defaults.clone(), Self::DEFAULTS_NAME, file, overrides, Self::MOVED_KEYS, Self::OPTIONAL_KEYS)?;
        config.resolve()?;
        if let Some(layer) = config.warm_start_layer()? {
            let mut base = defaults;
            let mut keys = Vec::new();
            leaves(&layer, "", &mut keys);
            for (path, value) in keys {
                if get(&base, &path).is_none() {
                    return Err(TrainError::Config(format!("the warm start's settings name `{path}`, which {} does not have", Self::DEFAULTS_NAME)));
                }
                put(&mut base, &path, value);
            }
            config = layered(base, Self::DEFAULTS_NAME, file, overrides, Self::MOVED_KEYS, Self::OPTIONAL_KEYS)?;
            config.resolve()?;
        }
        config.validate().map_err(|e| located(e, file, overrides))?;
        Ok(config)
    }

    /// The config a resumed run goes on with: its saved `config.toml` (`saved`) with `file` and
    /// `overrides` layered over it (not over the defaults, so a key not given keeps its saved value); an
    /// error names every key that differs from the saved one outside [`RunConfig::CHANGEABLE_ON_RESUME`],
    /// unless the run never finished a step (`started` false, as `run_dir::has_progress` tells: then
    /// nothing was done under the old values and any key may change).
    fn resumed(saved: &Path, started: bool, file: Option<&Path>, overrides: &[String]) -> Result<Self, TrainError> {
        let table = saved_table::<Self>(saved)?;
        let old: Self = typed(&table).map_err(|e| TrainError::Config(format!("{}: {e}", saved.display())))?;
        let mut new: Self = layered(table, &saved.display().to_string(), file, overrides, Self::MOVED_KEYS, Self::OPTIONAL_KEYS)?;
        new.resolve()?;
        if started {
            check_resumable(&old, &new, Self::CHANGEABLE_ON_RESUME)?;
        }
        new.validate().map_err(|e| located(e, file, overrides))?;
        Ok(new)
    }

    /// Reads a saved run's `config.toml` exactly (no defaults layered under it; keys that moved since it
    /// was written read where they are now), then checks it.
    fn read(path: &Path) -> Result<Self, TrainError> {
        let config: Self = typed(&saved_table::<Self>(path)?).map_err(|e| TrainError::Config(format!("{}: {e}", path.display())))?;
        config.validate()?;
        Ok(config)
    }

    /// The config as TOML, as saved in the run's config.toml.
    fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a config always serialises")
    }
}

fn parse_table(text: &str, what: &str) -> Result<toml::Table, TrainError> {
    text.parse().map_err(|e| TrainError::Config(format!("{what}: {e}")))
}

fn typed<T: serde::de::DeserializeOwned>(table: &toml::Table) -> Result<T, toml::de::Error> {
    toml::Value::Table(table.clone()).try_into::<T>()
}

/// A saved `config.toml` as a table, its moved keys put where they are now.
fn saved_table<C: RunConfig>(path: &Path) -> Result<toml::Table, TrainError> {
    let text = std::fs::read_to_string(path).map_err(|e| TrainError::Config(format!("{}: {e}", path.display())))?;
    let mut table = parse_table(&text, &path.display().to_string())?;
    relocate(&mut table, C::MOVED_KEYS, &path.display().to_string())?;
    Ok(table)
}

/// A config from layers: `base` (the embedded defaults, or a saved run's config; `what` names it in
/// errors), then the file (a partial file is fine: its keys replace the base's), then each
/// `section.key=value` override (the value parsed as TOML, else taken as a string). Unknown keys are
/// errors, by the config type's `deny_unknown_fields`.
fn layered<T: serde::de::DeserializeOwned>(
    mut value: toml::Table,
    what: &str,
    file: Option<&Path>,
    overrides: &[String],
    moved: &[(&str, &str)],
    optional: &[&str],
) -> Result<T, TrainError> {
    if let Err(e) = typed::<T>(&value) {
        return Err(TrainError::Config(format!("{what}: {}", type_error(&e))));
    }
    // Each key is type-checked as it lands, so a wrong type is reported where it was written: the file and
    // line, or the --set that gave it (the layers below it are known to be well typed).
    if let Some(path) = file {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::Config(format!("{origin}: {e}")))?;
        let mut user = parse_table(&text, &origin)?;
        relocate(&mut user, moved, &origin)?;
        merge(&mut value, user, &origin, &text, optional, |section, key, value| {
            typed::<T>(value).map(drop).map_err(|e| {
                let line = key_line(&text, section, key).map(|l| format!(":{l}")).unwrap_or_default();
                TrainError::Config(format!("{origin}{line}: {section}.{key}: {}", type_error(&e)))
            })
        })?;
    }
    for o in overrides {
        set(&mut value, &moved_assignment(o, moved), optional)?;
        typed::<T>(&value).map_err(|e| TrainError::Config(format!("--set {o}: {}", type_error(&e))))?;
    }
    typed(&value).map_err(|e| TrainError::Config(format!("{e}")))
}

/// `assignment` with its key where it is now, when it names a key that moved (with a warning).
fn moved_assignment(assignment: &str, moved: &[(&str, &str)]) -> String {
    let Some((path, value)) = assignment.split_once('=') else { return assignment.to_string() };
    match moved.iter().find(|(old, _)| *old == path.trim()) {
        Some((old, new)) => {
            tracing::warn!("--set {assignment}: `{old}` is `{new}` now; read as --set {new}={value}");
            format!("{new}={value}")
        }
        None => assignment.to_string(),
    }
}

/// Puts the keys of `table` that `moved` names where they are now (`origin` names the table in the warning
/// and errors); a table that sets a key both where it was and where it is is an error.
fn relocate(table: &mut toml::Table, moved: &[(&str, &str)], origin: &str) -> Result<(), TrainError> {
    let mut done = Vec::new();
    for (old, new) in moved {
        // A file whose sections are not tables where the key now lives is left as written, for the merge
        // to refuse where it stands.
        if !can_hold(table, new) {
            continue;
        }
        let Some(value) = take(table, old) else { continue };
        if get(table, new).is_some() {
            return Err(TrainError::Config(format!("{origin}: sets both `{old}` (where it was) and `{new}` (where it is now): keep `{new}`")));
        }
        put(table, new, value);
        done.push(format!("{old} -> {new}"));
    }
    // A section left empty by the moves (the old `[data]`) goes too.
    table.retain(|_, v| v.as_table().is_none_or(|t| !t.is_empty()));
    if !done.is_empty() {
        tracing::warn!("{origin}: read with the keys that moved where they are now ({}); write them there", done.join(", "));
    }
    Ok(())
}

/// Whether every section on the way to `path` is a table or absent (so `path` can be put there).
fn can_hold(table: &toml::Table, path: &str) -> bool {
    let Some((parents, _)) = path.rsplit_once('.') else { return true };
    let mut t = table;
    for part in parents.split('.') {
        match t.get(part) {
            None => return true,
            Some(toml::Value::Table(inner)) => t = inner,
            Some(_) => return false,
        }
    }
    true
}

fn get<'t>(table: &'t toml::Table, path: &str) -> Option<&'t toml::Value> {
    let (parents, key) = path.rsplit_once('.').unwrap_or(("", path));
    let mut t = table;
    for part in parents.split('.').filter(|p| !p.is_empty()) {
        t = t.get(part)?.as_table()?;
    }
    t.get(key)
}

fn take(table: &mut toml::Table, path: &str) -> Option<toml::Value> {
    let (parents, key) = path.rsplit_once('.').unwrap_or(("", path));
    let mut t = table;
    for part in parents.split('.').filter(|p| !p.is_empty()) {
        t = t.get_mut(part)?.as_table_mut()?;
    }
    t.remove(key)
}

fn put(table: &mut toml::Table, path: &str, value: toml::Value) {
    let (parents, key) = path.rsplit_once('.').unwrap_or(("", path));
    let mut t = table;
    for part in parents.split('.').filter(|p| !p.is_empty()) {
        let entry = t.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = entry.as_table_mut().expect("callers put only where every section on the way is a table (`can_hold`)");
    }
    t.insert(key.to_string(), value);
}

/// A range or combination error of `validate` (`section.key: why`, or `section.a / b: why`), prefixed
/// with where its key was given: the last `--set` that names it, else the file and line. Unchanged when
/// the key came from the defaults.
pub(crate) fn located(e: TrainError, file: Option<&Path>, overrides: &[String]) -> TrainError {
    let TrainError::Config(message) = e else { return e };
    let Some((names, _)) = message.split_once(": ") else { return TrainError::Config(message) };
    let first = names.split(" / ").next().unwrap_or(names).trim();
    let Some((section, _)) = first.rsplit_once('.') else { return TrainError::Config(message) };
    let keys: Vec<&str> = names.split(" / ").map(|k| k.trim().strip_prefix(section).and_then(|k| k.strip_prefix('.')).unwrap_or(k.trim())).collect();
    let given = |o: &String| o.split_once('=').is_some_and(|(path, _)| keys.iter().any(|k| path.trim() == format!("{section}.{k}")));
    if let Some(o) = overrides.iter().rev().find(|o| given(o)) {
        return TrainError::Config(format!("--set {o}: {message}"));
    }
    if let Some(path) = file {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some(line) = keys.iter().find_map(|k| key_line(&text, section, k)) {
                return TrainError::Config(format!("{}:{line}: {message}", path.display()));
            }
        }
    }
    TrainError::Config(message)
}

/// ` (did you mean `x`?)` for the candidate closest to `name` by edit distance, when one is close enough
/// to be a typo (at most a third of the name's letters, and at least one, differ).
fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(name, candidates).map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default()
}

/// The candidate closest to `name` by edit distance, when one is close enough to be a typo (see
/// [`did_you_mean`]).
fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates.into_iter().map(|c| (edit_distance(name, c), c)).filter(|&(d, _)| d <= limit).min().map(|(_, c)| c)
}

/// Levenshtein distance: the fewest insertions, deletions and substitutions from `a` to `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The sections of `base` that have `key`, as `[a], [b]`.
fn sections_with(base: &toml::Table, key: &str) -> Vec<String> {
    base.iter().filter(|(_, v)| v.as_table().is_some_and(|t| t.contains_key(key))).map(|(s, _)| format!("[{s}]")).collect()
}

/// The 1-based line of a top-level `key = ...` (before any `[section]`) or of the header `[key]`.
fn top_line(text: &str, key: &str) -> Option<usize> {
    let mut in_section = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            if header.trim() == key {
                return Some(i + 1);
            }
            in_section = true;
        } else if !in_section && line.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('=') || rest.starts_with('.')) {
            return Some(i + 1);
        }
    }
    None
}

/// A deserialisation error's message without the `in `section.key`` suffix its caller already names, with
/// Rust's type names said as a config's reader knows them (`usize` is a whole number, `f64` a number).
fn type_error(e: &toml::de::Error) -> String {
    let mut text = e.message().trim().to_string();
    for (rust, said) in [
        ("usize", "a whole number, 0 or more"),
        ("u64", "a whole number, 0 or more"),
        ("u32", "a whole number, 0 or more"),
        ("i64", "a whole number"),
        ("f64", "a number"),
        ("f32", "a number"),
        ("a boolean", "true or false"),
    ] {
        text = text.replace(&format!("expected {rust}"), &format!("expected {said}"));
    }
    text
}

/// The 1-based line of `section.key` in a TOML file's text (`section` may be nested: `env.wiki`): under its
/// `[section]` header, or as a dotted `section.key = ...` at the top (a best effort for error messages;
/// `None` when not found).
fn key_line(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    let assigns = |line: &str, name: &str| line.strip_prefix(name).is_some_and(|rest| rest.trim_start().starts_with('='));
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            current = header.trim().to_string();
        } else if (current == section && assigns(line, key)) || (current.is_empty() && assigns(line, &format!("{section}.{key}"))) {
            return Some(i + 1);
        }
    }
    None
}

/// Every key of a config table with its dotted path (`env.wiki.judge`), nested sections walked.
fn leaves(table: &toml::Table, prefix: &str, out: &mut Vec<(String, toml::Value)>) {
    for (key, value) in table {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value.as_table() {
            Some(t) => leaves(t, &path, out),
            None => out.push((path, value.clone())),
        }
    }
}

/// A resumed run may change how long it goes on and how often it logs, evaluates and saves (the keys of
/// `changeable`); any other key that differs from the saved config is an error naming it and both
/// values, since a run changed midway would be neither the old run nor a new one.
pub(crate) fn check_resumable<T: Serialize>(saved: &T, resumed: &T, changeable: &[&str]) -> Result<(), TrainError> {
    let table = |c: &T| toml::Table::try_from(c).expect("a config always serialises");
    let (old, new) = (table(saved), table(resumed));
    let mut changed = Vec::new();
    let mut new_keys = Vec::new();
    leaves(&new, "", &mut new_keys);
    for (name, value) in new_keys {
        let before = get(&old, &name);
        if before != Some(&value) && !changeable.contains(&name.as_str()) {
            changed.push(format!("{name} = {} (saved: {})", value, before.map(|v| v.to_string()).unwrap_or_else(|| "absent".into())));
        }
    }
    if changed.is_empty() {
        Ok(())
    } else {
        Err(TrainError::Config(format!(
            "--resume continues the run as it was configured; only {} may change, but this would change {}: start a new run from its last checkpoint (--init-adapter RUN/checkpoint-N) to change them",
            changeable.join(", "),
            changed.join(", ")
        )))
    }
}

/// Lays `user`'s keys over `base` (`origin` names where they come from in errors, `text` is what was
/// parsed, for line numbers), each checked by `check(section, key, base)` once it is in place, so the
/// first bad key is the one reported. Sections nest: a table under a section that has that table is a
/// section too (`[env.wiki]`).
fn merge(
    base: &mut toml::Table,
    user: toml::Table,
    origin: &str,
    text: &str,
    optional: &[&str],
    mut check: impl FnMut(&str, &str, &toml::Table) -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    for (section, v) in user {
        let toml::Value::Table(v) = v else {
            let at = top_line(text, &section).map(|l| format!(":{l}")).unwrap_or_default();
            if base.get(&section).is_some_and(toml::Value::is_table) {
                return Err(TrainError::Config(format!("{origin}{at}: `{section}` must be a [section]")));
            }
            let home = sections_with(base, &section);
            let hint = if home.is_empty() { String::new() } else { format!(": put it under {}", home.join(" or ")) };
            return Err(TrainError::Config(format!("{origin}{at}: `{section}` is outside any [section] (top-level keys are not allowed){hint}")));
        };
        if !base.get(&section).is_some_and(toml::Value::is_table) {
            let at = top_line(text, &section).map(|l| format!(":{l}")).unwrap_or_default();
            let hint = did_you_mean(&section, base.iter().filter(|(_, v)| v.is_table()).map(|(s, _)| s.as_str()));
            return Err(TrainError::Config(format!("{origin}{at}: unknown section [{section}]{hint}")));
        }
        merge_section(base, &section, v, origin, text, optional, &mut check)?;
    }
    Ok(())
}

/// [`merge`] inside the section at dotted path `section` (which exists in `base` as a table).
fn merge_section(
    base: &mut toml::Table,
    section: &str,
    user: toml::Table,
    origin: &str,
    text: &str,
    optional: &[&str],
    check: &mut impl FnMut(&str, &str, &toml::Table) -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    for (key, value) in user {
        let path = format!("{section}.{key}");
        let existing = get(base, section).and_then(toml::Value::as_table).expect("merge_section runs on sections of base").get(&key).map(toml::Value::is_table);
        match (existing, value) {
            (Some(true), toml::Value::Table(inner)) => merge_section(base, &path, inner, origin, text, optional, check)?,
            (Some(true), _) => {
                let at = key_line(text, section, &key).map(|l| format!(":{l}")).unwrap_or_default();
                return Err(TrainError::Config(format!("{origin}{at}: `{path}` must be a [section]")));
            }
            (None, value) if !value.is_table() && optional.contains(&path.as_str()) => {
                put(base, &path, value);
                check(section, &key, base)?;
            }
            (None, value) => {
                let target = get(base, section).and_then(toml::Value::as_table).expect("merge_section runs on sections of base");
                let at = key_line(text, section, &key).or_else(|| top_line(text, &path)).map(|l| format!(":{l}")).unwrap_or_default();
                let hint = did_you_mean(&key, target.keys().map(String::as_str));
                let what = if value.is_table() { format!("unknown section [{path}]") } else { format!("unknown key {path}") };
                return Err(TrainError::Config(format!("{origin}{at}: {what}{hint}")));
            }
            (Some(false), value) => {
                put(base, &path, value);
                check(section, &key, base)?;
            }
        }
    }
    Ok(())
}

/// Applies one `--set section.key=value` (sections may nest: `env.wiki.judge=rule:0.5`) to `base`.
pub fn set(base: &mut toml::Table, assignment: &str, optional: &[&str]) -> Result<(), TrainError> {
    let (path, raw) = assignment.split_once('=').ok_or_else(|| TrainError::Config(format!("`{assignment}`: expected section.key=value")))?;
    let path = path.trim();
    let Some((section, key)) = path.rsplit_once('.') else {
        // A bare key: name the sections that have it (or a key like it).
        let mut all = Vec::new();
        leaves(base, "", &mut all);
        let last = |p: &str| p.rsplit('.').next().unwrap_or(p).to_string();
        let key = match all.iter().any(|(p, _)| last(p) == path) {
            true => Some(path.to_string()),
            false => closest(path, all.iter().map(|(p, _)| p.rsplit('.').next().unwrap_or(p))).map(str::to_string),
        };
        let homes: Vec<String> =
            key.iter().flat_map(|k| all.iter().filter(move |(p, _)| last(p) == *k)).map(|(p, _)| format!("`{p}={}`", raw.trim())).collect();
        let hint = if homes.is_empty() { String::new() } else { format!(" (did you mean {}?)", homes.join(" or ")) };
        return Err(TrainError::Config(format!("`{assignment}`: expected section.key=value{hint}")));
    };
    let mut table = &*base;
    let mut walked = String::new();
    for part in section.split('.') {
        let choices = did_you_mean(part, table.iter().filter(|(_, v)| v.is_table()).map(|(s, _)| s.as_str()));
        walked = if walked.is_empty() { part.to_string() } else { format!("{walked}.{part}") };
        table = table.get(part).and_then(|t| t.as_table()).ok_or_else(|| TrainError::Config(format!("`{assignment}`: unknown section [{walked}]{choices}")))?;
    }
    let keys = did_you_mean(key, table.iter().filter(|(_, v)| !v.is_table()).map(|(k, _)| k.as_str()));
    // An optional key that is unset yet takes the value as parsed (its type is checked as the config reads it).
    let unset = toml::Value::Table(toml::Table::new());
    let old = match table.get(key) {
        Some(toml::Value::Table(_)) => return Err(TrainError::Config(format!("`{assignment}`: [{path}] is a section: set one of its keys"))),
        Some(old) => old,
        None if optional.contains(&path) => &unset,
        None => return Err(TrainError::Config(format!("`{assignment}`: unknown key {path}{keys}"))),
    };
    let raw = raw.trim();
    let parsed: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").expect("just parsed"),
        Err(_) => toml::Value::String(raw.to_string()),
    };
    // A float key given an integer (`lr=1`) is still a float.
    let parsed = match (old, parsed) {
        (toml::Value::Float(_), toml::Value::Integer(i)) => toml::Value::Float(i as f64),
        (toml::Value::String(_), toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_)) => toml::Value::String(raw.to_string()),
        // A list key given one bare value (`data.train=a.jsonl`) is a list of one.
        (toml::Value::Array(_), v @ toml::Value::String(_)) => toml::Value::Array(vec![v]),
        (_, v) => v,
    };
    put(base, path, parsed);
    Ok(())
}
