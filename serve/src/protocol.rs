//! The OpenAI chat-completions protocol as this server speaks it: the request, checked field by field into
//! what the engine samples, and the JSON of replies, chunks and errors.
//!
//! Accepted beyond OpenAI's own fields, as vLLM accepts them: `top_k`, `return_tokens_as_token_ids` (each
//! log-prob entry's `token` is `token_id:N`, so a client gets the exact ids) and
//! `include_stop_str_in_output`. A choice that ended on a stop string says which in `stop_reason`, as vLLM
//! does. Fields that would change the answer and are not implemented (`tools`, `response_format`,
//! `top_logprobs` above 0, `logit_bias`) are refused, never ignored.

use agentrt_policy::{FinishReason, Message, SamplingParams};
use serde::Deserialize;
use serde_json::{json, Value};

/// An error as OpenAI shapes it: an HTTP status and `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status: 400, 404 or 500.
    pub status: u16,
    /// What is wrong, for the client to read.
    pub message: String,
    /// The request field at fault (`messages[2]`, `top_p`...), when there is one.
    pub param: Option<String>,
}

impl ApiError {
    /// `400 Bad Request`, naming the field at fault when there is one.
    pub fn bad_request(message: impl Into<String>, param: Option<&str>) -> ApiError {
        ApiError { status: 400, message: message.into(), param: param.map(str::to_string) }
    }

    /// `404 Not Found`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError { status: 404, message: message.into(), param: None }
    }

    /// `500`: the server failed (the message says how), not the request.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError { status: 500, message: message.into(), param: None }
    }

    /// The error's JSON body.
    pub fn body(&self) -> Value {
        let kind = match self.status {
            400 => "BadRequestError",
            404 => "NotFoundError",
            _ => "InternalServerError",
        };
        json!({"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}})
    }
}

/// A message's content: a string or a list of text parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Value>),
}

#[derive(Debug, Deserialize)]
struct RawMessage {
    role: Option<String>,
    content: Option<Content>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

/// The fields of a chat-completions request this server reads (others are ignored, as OpenAI ignores
/// `user` and the like).
#[derive(Debug, Deserialize)]
struct RawRequest {
    model: Option<String>,
    messages: Option<Vec<RawMessage>>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    n: Option<i64>,
    stream: Option<bool>,
    stream_options: Option<Value>,
    stop: Option<Stop>,
    seed: Option<u64>,
    logprobs: Option<bool>,
    top_logprobs: Option<i64>,
    return_tokens_as_token_ids: Option<bool>,
    include_stop_str_in_output: Option<bool>,
    tools: Option<Vec<Value>>,
    response_format: Option<Value>,
    logit_bias: Option<Value>,
}

/// A checked request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The base model's name or an adapter's.
    pub model: String,
    /// The conversation, to be rendered with the model's chat template.
    pub messages: Vec<Message>,
    /// `n` is the number of choices; `max_batch` is unused.
    pub params: SamplingParams,
    /// Reply as server-sent events, a chunk per piece of text.
    pub stream: bool,
    /// A final chunk with `usage` (`stream_options.include_usage`).
    pub stream_usage: bool,
    /// Seeds choice `c`'s random stream with `seed + c`; `None`: a random seed.
    pub seed: Option<u64>,
    /// Return each sampled token's log-prob.
    pub logprobs: bool,
    /// Name log-prob tokens `token_id:N` (`return_tokens_as_token_ids`).
    pub tokens_as_ids: bool,
    /// Keep the stop string that ended a choice in its text (`include_stop_str_in_output`).
    pub include_stop: bool,
}

/// The most choices one request may ask for.
pub const MAX_CHOICES: usize = 16;

/// Tokens a reply may have when the request does not say (vLLM's default is the rest of the context; a
/// bound keeps a forgotten `max_tokens` from occupying a slot for minutes on a CPU).
pub const DEFAULT_MAX_TOKENS: usize = 512;

/// Parses and checks a request body.
pub fn parse_chat_request(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let raw: RawRequest =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("the request body is not a valid chat request: {e}"), None))?;
    let model = raw.model.filter(|m| !m.trim().is_empty()).ok_or_else(|| ApiError::bad_request("`model` is required", Some("model")))?;
    let raw_messages = raw.messages.ok_or_else(|| ApiError::bad_request("`messages` is required", Some("messages")))?;
    if raw_messages.is_empty() {
        return Err(ApiError::bad_request("`messages` is empty", Some("messages")));
    }
    let mut messages = Vec::with_capacity(raw_messages.len());
    for (i, m) in raw_messages.into_iter().enumerate() {
        let param = format!("messages[{i}]");
        let role = m.role.ok_or_else(|| ApiError::bad_request(format!("{param} has no `role`"), Some(&param)))?;
        if !["system", "user", "assistant", "tool"].contains(&role.as_str()) {
            return Err(ApiError::bad_request(format!("{param}.role `{role}`: expected system, user, assistant or tool"), Some(&param)));
        }
        let content = match m.content {
            None if role == "assistant" => String::new(),
            None => return Err(ApiError::bad_request(format!("{param} ({role}) has no `content`"), Some(&param))),
            Some(Content::Text(t)) => t,
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (p["type"].as_str(), p["text"].as_str()) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        _ => return Err(ApiError::bad_request(format!("{param}.content[{j}]: only text parts are supported"), Some(&param))),
                    }
                }
                text
            }
        };
        messages.push(Message::new(role, content));
    }
    let refuse = |field: &str, why: &str| Err(ApiError::bad_request(format!("`{field}` is not supported by agentrt serve ({why})"), Some(field)));
    if raw.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return refuse("tools", "tool programs are written as text; send tool output as `tool` messages");
    }
    if raw.response_format.as_ref().is_some_and(|f| f["type"].as_str() != Some("text")) {
        return refuse("response_format", "only text");
    }
    if raw.logit_bias.as_ref().is_some_and(|b| b.as_object().is_some_and(|o| !o.is_empty())) {
        return refuse("logit_bias", "not implemented");
    }
    if raw.top_logprobs.unwrap_or(0) != 0 {
        return refuse("top_logprobs", "only the sampled token's log-prob is returned");
    }
    let temperature = raw.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
        return Err(ApiError::bad_request(format!("`temperature` {temperature}: expected 0 to 2"), Some("temperature")));
    }
    let top_p = raw.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad_request(format!("`top_p` {top_p}: expected more than 0, at most 1"), Some("top_p")));
    }
    let top_k = match raw.top_k.unwrap_or(0) {
        -1 | 0 => 0,
        k if k > 0 => k as usize,
        k => return Err(ApiError::bad_request(format!("`top_k` {k}: expected -1 or 0 (all) or a positive count"), Some("top_k"))),
    };
    let max_tokens = match raw.max_completion_tokens.or(raw.max_tokens) {
        None => DEFAULT_MAX_TOKENS,
        Some(m) if m >= 1 => m as usize,
        Some(m) => return Err(ApiError::bad_request(format!("`max_tokens` {m}: expected at least 1"), Some("max_tokens"))),
    };
    let n = match raw.n.unwrap_or(1) {
        n if (1..=MAX_CHOICES as i64).contains(&n) => n as usize,
        n => return Err(ApiError::bad_request(format!("`n` {n}: expected 1 to {MAX_CHOICES}"), Some("n"))),
    };
    let stop = match raw.stop {
        None => vec![],
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::bad_request("`stop` holds an empty string", Some("stop")));
    }
    Ok(ChatRequest {
        model,
        messages,
        params: SamplingParams { n, temperature, top_p, top_k, max_tokens, stop, ..SamplingParams::default() },
        stream: raw.stream.unwrap_or(false),
        stream_usage: raw.stream_options.as_ref().is_some_and(|o| o["include_usage"].as_bool() == Some(true)),
        seed: raw.seed,
        logprobs: raw.logprobs.unwrap_or(false),
        tokens_as_ids: raw.return_tokens_as_token_ids.unwrap_or(false),
        include_stop: raw.include_stop_str_in_output.unwrap_or(false),
    })
}

/// `finish_reason` and `stop_reason` of a choice, as vLLM writes them.
pub fn finish_fields(reason: &FinishReason) -> (&'static str, Value) {
    match reason {
        FinishReason::Eos => ("stop", Value::Null),
        FinishReason::Stop(s) => ("stop", json!(s)),
        FinishReason::Length | FinishReason::Cancelled => ("length", Value::Null),
    }
}

/// One `logprobs.content` entry.
pub fn logprob_entry(token: &str, id: u32, logprob: f32, tokens_as_ids: bool) -> Value {
    let token = if tokens_as_ids { format!("token_id:{id}") } else { token.to_string() };
    let bytes: Vec<u8> = token.as_bytes().to_vec();
    json!({"token": token, "logprob": logprob, "bytes": bytes, "top_logprobs": []})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_request_gets_openai_defaults() {
        let r = parse_chat_request(br#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#).unwrap();
        assert_eq!(r.messages, vec![Message::user("hi")]);
        assert_eq!((r.params.temperature, r.params.top_p, r.params.n, r.params.max_tokens), (1.0, 1.0, 1, DEFAULT_MAX_TOKENS));
        assert!(!r.stream && !r.logprobs && !r.include_stop);
    }

    #[test]
    fn text_parts_join_and_every_sampling_field_is_read() {
        let body = br#"{"model": "m", "messages": [{"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "user", "content": "q"}], "temperature": 0, "top_p": 0.5, "top_k": 7, "max_completion_tokens": 9, "n": 3, "stop": "</tool>",
            "seed": 4, "logprobs": true, "return_tokens_as_token_ids": true, "stream": true, "stream_options": {"include_usage": true}}"#;
        let r = parse_chat_request(body).unwrap();
        assert_eq!(r.messages[0].content, "ab");
        assert_eq!((r.params.temperature, r.params.top_p, r.params.top_k, r.params.max_tokens, r.params.n), (0.0, 0.5, 7, 9, 3));
        assert_eq!(r.params.stop, vec!["</tool>".to_string()]);
        assert!(r.stream && r.stream_usage && r.logprobs && r.tokens_as_ids && r.seed == Some(4));
    }

    #[test]
    fn bad_requests_name_the_field() {
        let cases: [(&[u8], &str); 9] = [
            (b"{not json", "not a valid chat request"),
            (br#"{"messages": []}"#, "`model` is required"),
            (br#"{"model": "m"}"#, "`messages` is required"),
            (br#"{"model": "m", "messages": [{"role": "robot", "content": "x"}]}"#, "messages[0].role `robot`"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3}"#, "`temperature` 3"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}"#, "`max_tokens` 0"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 99}"#, "`n` 99"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 5}"#, "`top_logprobs` is not supported"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}"#, "`tools` is not supported"),
        ];
        for (body, expected) in cases {
            let e = parse_chat_request(body).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e.message.contains(expected), "{:?} -> {}", String::from_utf8_lossy(body), e.message);
            assert_eq!(e.body()["error"]["code"], 400);
        }
    }
}
