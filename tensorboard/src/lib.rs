//! TensorBoard event files beside a run's `metrics.jsonl`, so `tensorboard --logdir runs/` shows every
//! run and `wandb sync --sync-tensorboard` uploads them, with nothing but the files.
//!
//! The design in three parts:
//! - **who reads**: a run's metrics lines (JSON objects with a `step`) and its transcripts; every numeric
//!   leaf of a line becomes a scalar tagged by its path (`seconds/generate`).
//! - **who encodes**: [`Event`] records in TensorFlow's format, written by hand: each record is its length
//!   (u64, little-endian), a masked CRC-32C of the length, the bytes of one `Event` protocol buffer, and a
//!   masked CRC-32C of those. Only the few protobuf fields TensorBoard reads are encoded (`wall_time`,
//!   `step`, `file_version`, a summary value's `tag`, `simple_value`, and text as a string tensor with the
//!   text plugin's metadata), so no protobuf dependency.
//! - **who receives**: one file per directory, `events.out.tfevents.agentrt`, opened for append on every
//!   call (a run's writers need no state, a resumed run keeps appending); the first record of a new file
//!   is the `brain.Event:2` version event TensorBoard expects.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The event file's name in a run directory (TensorBoard reads any file whose name holds `tfevents`).
pub const EVENT_FILE: &str = "events.out.tfevents.agentrt";

/// The path of the event file in `dir`.
pub fn event_file(dir: &Path) -> PathBuf {
    dir.join(EVENT_FILE)
}

/// Appends a scalar for every numeric leaf of `line` (a JSON object) at `step`, tagged by its path
/// (`reward_mean`, `seconds/step`); booleans count as 0/1; `step` itself and non-numeric leaves are
/// skipped.
pub fn append_scalars(dir: &Path, step: i64, line: &serde_json::Value) -> std::io::Result<()> {
    let mut values = Vec::new();
    flatten(line, String::new(), &mut values);
    let mut events = Vec::with_capacity(values.len());
    let now = wall_time();
    for (tag, value) in values {
        if tag == "step" {
            continue;
        }
        events.push(Event::scalar(now, step, &tag, value as f32));
    }
    append(dir, &events)
}

/// Appends `text` (shown as markdown by TensorBoard's text plugin) under `tag` at `step`.
pub fn append_text(dir: &Path, tag: &str, step: i64, text: &str) -> std::io::Result<()> {
    append_texts(dir, step, &[(tag.to_string(), text.to_string())])
}

/// Appends several `(tag, text)` at `step` in one write (an evaluation's transcripts).
pub fn append_texts(dir: &Path, step: i64, texts: &[(String, String)]) -> std::io::Result<()> {
    let now = wall_time();
    append(dir, &texts.iter().map(|(tag, text)| Event::text(now, step, tag, text)).collect::<Vec<_>>())
}

fn flatten(value: &serde_json::Value, prefix: String, out: &mut Vec<(String, f64)>) {
    let join = |key: &str| if prefix.is_empty() { key.to_string() } else { format!("{prefix}/{key}") };
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                flatten(v, join(k), out);
            }
        }
        serde_json::Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                out.push((prefix, x));
            }
        }
        serde_json::Value::Bool(b) => out.push((prefix, f64::from(u8::from(*b)))),
        _ => {}
    }
}

fn wall_time() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Appends records to `dir`'s event file, starting a new file with the version event. One write call,
/// so a kill or a full disk leaves at most a torn last record; TensorBoard's reader stops there, so a
/// resumed run first cuts it off with [`records_through`].
fn append(dir: &Path, events: &[Event]) -> std::io::Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let path = event_file(dir);
    let mut bytes = Vec::new();
    if !path.exists() {
        record(&Event::version(wall_time()).encode(), &mut bytes);
    }
    for event in events {
        record(&event.encode(), &mut bytes);
    }
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    file.write_all(&bytes)?;
    file.flush()
}

/// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
fn record(data: &[u8], out: &mut Vec<u8>) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
}

/// One whole record of an event file: the step of its event (0 for the version event) and its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The `Event.step` field.
    pub step: i64,
    /// The `Event` protocol buffer.
    pub data: Vec<u8>,
}

/// Every record of the event file at `path`, each checked (its length's CRC and its data's CRC): an
/// `InvalidData` error names the byte offset of the first torn or corrupt record.
pub fn read_records(path: &Path) -> std::io::Result<Vec<Record>> {
    let bytes = std::fs::read(path)?;
    let (records, whole) = parse_records(&bytes);
    if whole < bytes.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: a torn or corrupt record at byte {whole} of {}", path.display(), bytes.len()),
        ));
    }
    Ok(records)
}

/// What a resumed run keeps of the event file at `path`: the bytes of its records up to the first torn or
/// corrupt one whose step is at most `step` (the version record included). Steps after `step` are work the
/// resumed run redoes; the torn tail is what a kill or a full disk left mid-write, after which TensorBoard
/// would read nothing.
pub fn records_through(path: &Path, step: i64) -> std::io::Result<Vec<u8>> {
    let bytes = std::fs::read(path)?;
    let mut kept = Vec::with_capacity(bytes.len());
    for r in parse_records(&bytes).0 {
        if r.step <= step {
            record(&r.data, &mut kept);
        }
    }
    Ok(kept)
}

/// The whole, CRC-checked records at the start of `bytes`, and how many bytes they take.
fn parse_records(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while let Some(header) = bytes.get(at..at + 12) {
        let (len, len_crc) = (&header[..8], u32::from_le_bytes(header[8..12].try_into().expect("4 bytes")));
        let n = u64::from_le_bytes(len.try_into().expect("8 bytes"));
        if masked_crc(len) != len_crc {
            break;
        }
        let Some(end) = usize::try_from(n).ok().and_then(|n| (at + 12).checked_add(n)).filter(|end| end + 4 <= bytes.len()) else { break };
        let data = &bytes[at + 12..end];
        if masked_crc(data) != u32::from_le_bytes(bytes[end..end + 4].try_into().expect("4 bytes")) {
            break;
        }
        records.push(Record { step: event_step(data), data: data.to_vec() });
        at = end + 4;
    }
    (records, at)
}

/// The `step` (field 2, a varint) of an `Event`, 0 when absent or unreadable.
fn event_step(data: &[u8]) -> i64 {
    let mut at = 0;
    let read_varint = |at: &mut usize| -> Option<u64> {
        let mut x = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *data.get(*at)?;
            *at += 1;
            x |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(x);
            }
        }
        None
    };
    while let Some(key) = read_varint(&mut at) {
        let skip = match (key >> 3, key & 7) {
            (2, 0) => return read_varint(&mut at).map_or(0, |s| s as i64),
            (_, 0) => read_varint(&mut at).map(|_| 0),
            (_, 1) => Some(8),
            (_, 2) => read_varint(&mut at).and_then(|n| usize::try_from(n).ok()),
            (_, 5) => Some(4),
            _ => None,
        };
        let Some(skip) = skip else { return 0 };
        at = at.saturating_add(skip);
    }
    0
}

/// TFRecord's masked CRC-32C (Castagnoli).
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bit by bit through a table.
pub fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { (c >> 1) ^ 0x82f6_3b78 } else { c >> 1 };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The part of TensorFlow's `Event` message that agentrt writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `file_version: "brain.Event:2"`, the first record of a file.
    Version {
        /// When the file was started, in seconds since the Unix epoch.
        wall_time: f64,
    },
    /// A `Summary` with one `simple_value`.
    Scalar {
        /// When it was written, in seconds since the Unix epoch.
        wall_time: f64,
        /// The run's step, TensorBoard's x axis.
        step: i64,
        /// The metric's path in the metrics line, e.g. `seconds/generate`.
        tag: String,
        /// The metric's value.
        value: f32,
    },
    /// A `Summary` with one string tensor, for the text plugin.
    Text {
        /// When it was written, in seconds since the Unix epoch.
        wall_time: f64,
        /// The run's step it belongs to.
        step: i64,
        /// The name TensorBoard groups it under.
        tag: String,
        /// The text, shown as markdown.
        text: String,
    },
}

impl Event {
    fn version(wall_time: f64) -> Event {
        Event::Version { wall_time }
    }

    fn scalar(wall_time: f64, step: i64, tag: &str, value: f32) -> Event {
        Event::Scalar { wall_time, step, tag: tag.to_string(), value }
    }

    fn text(wall_time: f64, step: i64, tag: &str, text: &str) -> Event {
        Event::Text { wall_time, step, tag: tag.to_string(), text: text.to_string() }
    }

    /// The protobuf bytes (field numbers from tensorflow/core/util/event.proto and summary.proto).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Event::Version { wall_time } => {
                double(1, *wall_time, &mut out);
                bytes(3, b"brain.Event:2", &mut out);
            }
            Event::Scalar { wall_time, step, tag, value } => {
                double(1, *wall_time, &mut out);
                varint_field(2, *step as u64, &mut out);
                let mut v = Vec::new();
                bytes(1, tag.as_bytes(), &mut v); // Summary.Value.tag
                float(2, *value, &mut v); // Summary.Value.simple_value
                let mut summary = Vec::new();
                bytes(1, &v, &mut summary); // Summary.value
                bytes(5, &summary, &mut out); // Event.summary
            }
            Event::Text { wall_time, step, tag, text } => {
                double(1, *wall_time, &mut out);
                varint_field(2, *step as u64, &mut out);
                let mut plugin = Vec::new();
                bytes(1, b"text", &mut plugin); // PluginData.plugin_name
                let mut metadata = Vec::new();
                bytes(1, &plugin, &mut metadata); // SummaryMetadata.plugin_data
                let mut tensor = Vec::new();
                varint_field(1, 7, &mut tensor); // TensorProto.dtype = DT_STRING
                bytes(2, &[], &mut tensor); // TensorProto.tensor_shape: a scalar
                bytes(8, text.as_bytes(), &mut tensor); // TensorProto.string_val
                let mut v = Vec::new();
                bytes(1, tag.as_bytes(), &mut v); // Summary.Value.tag
                bytes(8, &tensor, &mut v); // Summary.Value.tensor
                bytes(9, &metadata, &mut v); // Summary.Value.metadata
                let mut summary = Vec::new();
                bytes(1, &v, &mut summary);
                bytes(5, &summary, &mut out);
            }
        }
        out
    }
}

fn varint(mut x: u64, out: &mut Vec<u8>) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

fn varint_field(field: u32, x: u64, out: &mut Vec<u8>) {
    varint(u64::from(field) << 3, out);
    varint(x, out);
}

fn double(field: u32, x: f64, out: &mut Vec<u8>) {
    varint(u64::from(field) << 3 | 1, out);
    out.extend_from_slice(&x.to_le_bytes());
}

fn float(field: u32, x: f32, out: &mut Vec<u8>) {
    varint(u64::from(field) << 3 | 5, out);
    out.extend_from_slice(&x.to_le_bytes());
}

fn bytes(field: u32, data: &[u8], out: &mut Vec<u8>) {
    varint(u64::from(field) << 3 | 2, out);
    varint(data.len() as u64, out);
    out.extend_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        // The CRC-32C of "123456789" is 0xE3069283 (RFC 3720, appendix B.4).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    /// The records' bytes, every CRC checked (the encoding itself is checked by TensorBoard's own reader
    /// in trainer/tests/tensorboard_events.rs and bench/tensorboard_check.sh).
    fn records(path: &Path) -> Vec<Vec<u8>> {
        read_records(path).unwrap().into_iter().map(|r| r.data).collect()
    }

    #[test]
    fn a_metrics_line_becomes_one_scalar_per_numeric_leaf_after_the_version_record() {
        let dir = tempfile::tempdir().unwrap();
        let line = serde_json::json!({"step": 3, "reward_mean": 0.5, "degenerate": false, "seconds": {"step": 2.0}, "note": "x", "grad_norm": null});
        append_scalars(dir.path(), 3, &line).unwrap();
        append_text(dir.path(), "transcripts", 3, "a reply").unwrap();
        let recs = records(&event_file(dir.path()));
        assert_eq!(recs.len(), 1 + 3 + 1, "version, reward_mean, degenerate, seconds/step, the text");
        assert!(recs[0].windows(13).any(|w| w == b"brain.Event:2"));
        let tags: Vec<bool> =
            ["degenerate", "reward_mean", "seconds/step"].iter().map(|t| recs[1..4].iter().any(|r| r.windows(t.len()).any(|w| w == t.as_bytes()))).collect();
        assert_eq!(tags, [true, true, true]);
        assert!(recs[4].windows(7).any(|w| w == b"a reply") && recs[4].windows(4).any(|w| w == b"text"));
        // A second line appends, without a second version record.
        append_scalars(dir.path(), 4, &serde_json::json!({"step": 4, "reward_mean": 0.7})).unwrap();
        assert_eq!(records(&event_file(dir.path())).len(), 6);
    }

    #[test]
    fn a_scalar_event_has_the_fields_tensorboard_reads() {
        let e = Event::scalar(1.5, 2, "acc", 0.25).encode();
        let mut expected = vec![0x09];
        expected.extend_from_slice(&1.5f64.to_le_bytes());
        expected.extend_from_slice(&[0x10, 0x02, 0x2a, 12, 0x0a, 10, 0x0a, 3, b'a', b'c', b'c', 0x15]);
        expected.extend_from_slice(&0.25f32.to_le_bytes());
        assert_eq!(e, expected);
    }

    #[test]
    fn a_resume_keeps_the_whole_records_through_its_step_and_drops_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        for step in 1..=3 {
            append_scalars(dir.path(), step, &serde_json::json!({"step": step, "reward_mean": 0.5})).unwrap();
            append_text(dir.path(), "transcripts", step, "a reply").unwrap();
        }
        let path = event_file(dir.path());
        let steps = |p: &Path| read_records(p).unwrap().iter().map(|r| r.step).collect::<Vec<_>>();
        assert_eq!(steps(&path), [0, 1, 1, 2, 2, 3, 3]);
        // A kill (or a full disk) in the middle of step 3's text: the last record is cut short.
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..whole.len() - 5]).unwrap();
        let error = read_records(&path).unwrap_err();
        assert!(error.to_string().contains("torn or corrupt record at byte"), "{error}");
        // Resuming from step 2 keeps the version record and steps 1 and 2, whole; appending goes on from there.
        std::fs::write(&path, records_through(&path, 2).unwrap()).unwrap();
        assert_eq!(steps(&path), [0, 1, 1, 2, 2]);
        append_scalars(dir.path(), 3, &serde_json::json!({"step": 3, "reward_mean": 0.7})).unwrap();
        assert_eq!(steps(&path), [0, 1, 1, 2, 2, 3]);
        // A flipped byte inside a record ends what is read there.
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 8] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        assert!(read_records(&path).is_err());
        assert_eq!(parse_records(&bytes).0.len(), 5);
    }
}
