//! The conversations `agentrt sft` learns from: read from JSON Lines (chat form or agentrt transcripts),
//! checked line by line (every error names the file and line), and rendered into token traces by the
//! rollout crate's [`TraceBuilder`], the same code that builds a rollout's trace.

use crate::error::TrainError;
use crate::routing::Detector;
use agentrt_assets::FileError;
use agentrt_environments::wiki::{system_prompt, system_prompt_template, Demonstration};
use agentrt_policy::{Message, Policy};
use agentrt_rollout::TraceBuilder;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The roles a conversation may hold.
pub const ROLES: &[&str] = &["system", "user", "assistant", "tool"];

/// One conversation read from a file.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// The turns in order, as the chat template renders them.
    pub messages: Vec<Message>,
    /// An explicit `"routed": true/false` on the line (wins over the detector).
    pub routed: Option<bool>,
    /// Tools a transcript's episode called (for `tool:NAME` detectors).
    pub tools_called: Vec<String>,
    /// The file it was read from, for error messages.
    pub path: PathBuf,
    /// Its line in that file (1-based).
    pub line: usize,
}

/// How transcripts become conversations.
#[derive(Debug, Clone)]
pub struct TranscriptOptions {
    /// `short`, `full` or the prompt's text (no plug-in tools are listed).
    pub system_prompt: String,
    /// The worked episode transcripts get before their question (`true`: the built-in one).
    pub demonstration: Demonstration,
    /// Keep only transcripts whose episode was judged correct.
    pub only_correct: bool,
}

/// What reading skipped (not errors: reported).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadStats {
    /// Chat-form lines read.
    pub conversations: usize,
    /// Transcript lines read (kept or not).
    pub transcripts: usize,
    /// Transcripts left out by `only_correct`.
    pub not_correct: usize,
    /// Transcripts left out because a reply was empty (a model may write nothing; a chat file may not).
    pub empty_reply: usize,
}

fn line_err(path: &Path, line: usize, reason: impl std::fmt::Display) -> TrainError {
    FileError::malformed(path, format!("line {line}: {reason}")).into()
}

/// Reads one JSON Lines file: `{"messages": [...]}` lines, `agentrt eval` transcript lines (an episode:
/// `question`, `turns`, ...) and `agentrt train` transcript lines (`{"step", "episode"}`), mixed freely.
pub fn read_conversations(path: &Path, opts: &TranscriptOptions) -> Result<(Vec<Conversation>, ReadStats), TrainError> {
    let text = std::fs::read_to_string(path).map_err(crate::error::io_err(path))?;
    let mut out = Vec::new();
    let mut stats = ReadStats::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(raw).map_err(|e| line_err(path, line, format!("not a JSON object (truncated or malformed line?): {e}")))?;
        let Value::Object(obj) = &v else {
            return Err(line_err(path, line, "expected a JSON object"));
        };
        let routed = match obj.get("routed") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => return Err(line_err(path, line, format!("\"routed\" must be true or false, not {other}"))),
        };
        if let Some(messages) = obj.get("messages") {
            let messages = chat_messages(messages).map_err(|e| line_err(path, line, e))?;
            stats.conversations += 1;
            out.push(Conversation { messages, routed, tools_called: vec![], path: path.to_path_buf(), line });
            continue;
        }
        let episode = match obj.get("episode") {
            Some(e) => e,
            None if obj.contains_key("turns") && obj.contains_key("question") => &v,
            None => {
                return Err(line_err(
                    path,
                    line,
                    "neither a chat conversation ({\"messages\": [...]}) nor an agentrt transcript (an episode with \"question\" and \"turns\")",
                ))
            }
        };
        stats.transcripts += 1;
        match transcript_messages(episode, opts).map_err(|e| line_err(path, line, e))? {
            Transcript::Kept(messages, tools_called) => out.push(Conversation { messages, routed, tools_called, path: path.to_path_buf(), line }),
            Transcript::NotCorrect => stats.not_correct += 1,
            Transcript::EmptyReply => stats.empty_reply += 1,
        }
    }
    Ok((out, stats))
}

/// The text of a message's content: a string, or OpenAI's list of parts (`{"type": "text", "text"}`).
fn content_text(v: Option<&Value>) -> Result<String, String> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| p.get("text").and_then(Value::as_str).map(str::to_string).ok_or_else(|| format!("a content part without \"text\": {p}")))
            .collect::<Result<Vec<_>, _>>()
            .map(|t| t.concat()),
        None | Some(Value::Null) => Err("no \"content\"".into()),
        Some(other) => Err(format!("\"content\" must be a string, not {other}")),
    }
}

fn chat_messages(v: &Value) -> Result<Vec<Message>, String> {
    let Value::Array(items) = v else {
        return Err("\"messages\" must be a list".into());
    };
    let mut out = Vec::with_capacity(items.len());
    for (k, m) in items.iter().enumerate() {
        let at = |why: String| format!("message {}: {why}", k + 1);
        let role = m.get("role").and_then(Value::as_str).ok_or_else(|| at("no \"role\"".into()))?;
        if !ROLES.contains(&role) {
            return Err(at(format!("role `{role}` is not one the chat template renders (use one of {})", ROLES.join(", "))));
        }
        let content = content_text(m.get("content")).map_err(|e| {
            if role == "assistant" && m.get("tool_calls").is_some() {
                at(format!("{e}: structured tool_calls are not supported; write the call in the content, as the model does (```python ... ```)"))
            } else {
                at(e)
            }
        })?;
        if (role == "assistant" || role == "user") && content.trim().is_empty() {
            return Err(at(format!("empty {role} content")));
        }
        out.push(Message::new(role, content));
    }
    if !out.iter().any(|m| m.role == "assistant") {
        return Err("the conversation has no assistant turn (nothing to learn)".into());
    }
    Ok(out)
}

enum Transcript {
    Kept(Vec<Message>, Vec<String>),
    NotCorrect,
    EmptyReply,
}

/// An episode as the conversation the policy saw: system prompt, demonstration, question, then each reply
/// and, before the next reply, its observation as a tool turn.
fn transcript_messages(e: &Value, opts: &TranscriptOptions) -> Result<Transcript, String> {
    let question = e.pointer("/question/question").and_then(Value::as_str).ok_or("a transcript without question.question")?;
    let turns = e.get("turns").and_then(Value::as_array).ok_or("a transcript without a \"turns\" list")?;
    if turns.is_empty() {
        return Err("a transcript with no turns (no assistant turn)".into());
    }
    if opts.only_correct && e.get("outcome").and_then(Value::as_str) != Some("correct") {
        return Ok(Transcript::NotCorrect);
    }
    let mut messages = vec![Message::system(system_prompt(system_prompt_template(&opts.system_prompt), &[]))];
    messages.extend(opts.demonstration.turns()?);
    messages.push(Message::user(question));
    let mut tools = Vec::new();
    for (k, t) in turns.iter().enumerate() {
        let reply = t.get("reply").and_then(Value::as_str).ok_or_else(|| format!("turn {}: no \"reply\"", k + 1))?;
        if reply.trim().is_empty() {
            return Ok(Transcript::EmptyReply);
        }
        messages.push(Message::assistant(reply));
        for c in t.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            if let Some(name) = c.get("tool").and_then(Value::as_str) {
                tools.push(name.to_string());
            }
        }
        if k + 1 < turns.len() {
            if let Some(obs) = t.get("observation").and_then(Value::as_str) {
                messages.push(Message::new("tool", obs));
            }
        }
    }
    Ok(Transcript::Kept(messages, tools))
}

/// A conversation as the learner takes it.
#[derive(Debug, Clone)]
pub struct Example {
    /// The rendered token ids.
    pub ids: Vec<u32>,
    /// True on each assistant reply's tokens and its end-of-turn token.
    pub model_mask: Vec<bool>,
    /// Train only the forget adapter on it (its explicit flag, else the detector's).
    pub routed: bool,
    /// The file it came from.
    pub path: PathBuf,
    /// Its line in that file (1-based).
    pub line: usize,
}

/// Renders conversations with the policy's template ([`TraceBuilder::render_conversation`]), decides
/// routing, and drops those longer than `max_seq_tokens` (returned as a count: the caller reports it).
pub fn tokenize(
    policy: &Policy,
    conversations: &[Conversation],
    detector: &Detector,
    dual: bool,
    max_seq_tokens: usize,
) -> Result<(Vec<Example>, usize), TrainError> {
    let builder = TraceBuilder::new(policy);
    let mut out = Vec::with_capacity(conversations.len());
    let mut too_long = 0;
    for c in conversations {
        let t = builder.render_conversation(&c.messages).map_err(|e| line_err(&c.path, c.line, e))?;
        if t.ids.len() > max_seq_tokens {
            too_long += 1;
            continue;
        }
        let flagged = match detector {
            Detector::Tool(name) => c.tools_called.iter().any(|t| t == name),
            d => c.messages.iter().any(|m| m.role == "assistant" && d.flags_text(&m.content)),
        };
        let routed = c.routed.unwrap_or(flagged);
        if routed && !dual {
            return Err(line_err(&c.path, c.line, "this conversation is routed to the forget adapter, but model.dual_lora = false"));
        }
        out.push(Example { ids: t.ids, model_mask: t.model_mask, routed, path: c.path.clone(), line: c.line });
    }
    Ok((out, too_long))
}
