//! The OpenAI chat-completions protocol as this server speaks it: the request, checked field by field into
//! what the engine samples, and the pieces of replies, chunks and errors, in the wire types the clients read
//! them with (`agentrt_openai::wire`).
//!
//! Accepted beyond OpenAI's own fields, as vLLM accepts them: `top_k`, `return_tokens_as_token_ids` (each
//! log-prob entry's `token` is `token_id:N`, so a client gets the exact ids) and
//! `include_stop_str_in_output`. A choice that ended on a stop string says which in `stop_reason`, as vLLM
//! does. `frequency_penalty` and `presence_penalty` are honoured as OpenAI, vLLM and llama.cpp apply them.
//! Fields that would change the answer and are not implemented (`tools`, `response_format`,
//! `top_logprobs` above 0, `logit_bias`) are refused, never ignored; a field the server does not know is
//! refused as OpenAI's API refuses it.

use agentrt_openai::wire::{ErrorCode, ErrorDetail, ErrorResponse, StopReason, TokenLogprob};
use agentrt_policy::{FinishReason, Message, SamplingParams};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// An error as OpenAI shapes it: an HTTP status and `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status: 400, 401, 403, 404, 405, 413 or 500.
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

    /// `405`: the route exists and takes other methods.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError { status: 405, message: message.into(), param: None }
    }

    /// `413`: the request body is larger than the server reads.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError { status: 413, message: message.into(), param: None }
    }

    /// `500`: the server failed (the message says how), not the request.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError { status: 500, message: message.into(), param: None }
    }

    /// `401`: the request lacks the server's API key.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError { status: 401, message: message.into(), param: None }
    }

    /// `403`: the server does not allow this (a runtime adapter load it was not started to allow, a path
    /// outside its adapter root), naming the field at fault when there is one.
    pub fn forbidden(message: impl Into<String>, param: Option<&str>) -> ApiError {
        ApiError { status: 403, message: message.into(), param: param.map(str::to_string) }
    }

    /// The error's body.
    pub fn body(&self) -> ErrorResponse {
        let kind = match self.status {
            400 => "BadRequestError",
            401 => "AuthenticationError",
            403 => "PermissionDeniedError",
            404 => "NotFoundError",
            405 => "MethodNotAllowedError",
            413 => "RequestTooLargeError",
            s if s < 500 => "BadRequestError",
            _ => "InternalServerError",
        };
        ErrorResponse {
            error: ErrorDetail { message: self.message.clone(), kind: kind.into(), param: self.param.clone(), code: Some(ErrorCode::Status(self.status)) },
        }
    }
}

/// What `v` is, in an error message: `a string ("hot")`, `the number -1`, `a list`...
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(t) if t.chars().count() > 40 => format!("a string ({:?}...)", t.chars().take(40).collect::<String>()),
        Value::String(t) => format!("a string ({t:?})"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// `400`: field `param` holds `v`, where `expected` (`a number`, `true or false`...) was expected.
pub fn type_error(param: &str, v: &Value, expected: &str) -> ApiError {
    ApiError::bad_request(format!("`{param}` is {}: expected {expected}", describe(v)), Some(param))
}

/// Field `key` of `object` as a `T`, `None` when absent or null; a value of another type is a
/// [`type_error`] naming `param` (the field's path in the request) and `expected`.
pub fn read_field<T: DeserializeOwned>(object: &Map<String, Value>, key: &str, param: &str, expected: &str) -> Result<Option<T>, ApiError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => T::deserialize(v).map(Some).map_err(|_| type_error(param, v, expected)),
    }
}

/// A top-level field of the request: [`read_field`] with the key as its `param`.
fn top<T: DeserializeOwned>(request: &Map<String, Value>, key: &str, expected: &str) -> Result<Option<T>, ApiError> {
    read_field(request, key, key, expected)
}

const NUMBER: &str = "a number";
const INTEGER: &str = "an integer";
const BOOL: &str = "true or false";

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

/// The request fields this server reads (each checked for its type and range).
const READ_FIELDS: &[&str] = &[
    "model",
    "messages",
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "stop",
    "stream",
    "stream_options",
    "seed",
    "logprobs",
    "top_logprobs",
    "return_tokens_as_token_ids",
    "include_stop_str_in_output",
    "frequency_penalty",
    "presence_penalty",
    // Refused when they would change the reply (see the module's page), accepted when they would not.
    "tools",
    "tool_choice",
    "response_format",
    "logit_bias",
];

/// OpenAI's fields that do not change the reply, which OpenAI's API accepts and this server, as OpenAI's own
/// does for a request without tools or storage, does nothing with.
const NO_EFFECT_FIELDS: &[&str] = &["user", "metadata", "store", "service_tier", "parallel_tool_calls", "safety_identifier", "prompt_cache_key"];

/// Parses and checks a request body. A field this server does not know is refused as OpenAI's API refuses
/// it (`Unrecognized request argument supplied: NAME`); OpenAI's fields that do not change the reply
/// (`user`, `metadata`, ...) are accepted; a field it reads that holds the wrong type is an error naming it
/// and the type expected.
pub fn parse_chat_request(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("the request body is not a valid chat request: it is not JSON ({e})"), None))?;
    let Value::Object(raw) = &value else {
        return Err(ApiError::bad_request(format!("the request body is not a valid chat request: it is {}, expected a JSON object", describe(&value)), None));
    };
    if let Some(unknown) = raw.keys().find(|k| !READ_FIELDS.contains(&k.as_str()) && !NO_EFFECT_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!("Unrecognized request argument supplied: {unknown}"), Some(unknown)));
    }
    let model =
        top::<String>(raw, "model", "a string")?.filter(|m| !m.trim().is_empty()).ok_or_else(|| ApiError::bad_request("`model` is required", Some("model")))?;
    let raw_messages =
        top::<Vec<Value>>(raw, "messages", "a list of messages")?.ok_or_else(|| ApiError::bad_request("`messages` is required", Some("messages")))?;
    if raw_messages.is_empty() {
        return Err(ApiError::bad_request("`messages` is empty", Some("messages")));
    }
    let mut messages = Vec::with_capacity(raw_messages.len());
    for (i, m) in raw_messages.iter().enumerate() {
        let param = format!("messages[{i}]");
        let Value::Object(m) = m else {
            return Err(type_error(&param, m, "a message (an object with `role` and `content`)"));
        };
        let role: String = read_field(m, "role", &format!("{param}.role"), "a string")?
            .ok_or_else(|| ApiError::bad_request(format!("{param} has no `role`"), Some(&param)))?;
        if !["system", "user", "assistant", "tool"].contains(&role.as_str()) {
            return Err(ApiError::bad_request(format!("{param}.role `{role}`: expected system, user, assistant or tool"), Some(&param)));
        }
        let content = match m.get("content") {
            None | Some(Value::Null) if role == "assistant" => String::new(),
            None | Some(Value::Null) => return Err(ApiError::bad_request(format!("{param} ({role}) has no `content`"), Some(&param))),
            Some(Value::String(t)) => t.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (p["type"].as_str(), p["text"].as_str()) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        _ => return Err(ApiError::bad_request(format!("{param}.content[{j}]: only text parts are supported"), Some(&param))),
                    }
                }
                text
            }
            Some(other) => return Err(type_error(&format!("{param}.content"), other, "a string or a list of text parts")),
        };
        messages.push(Message::new(role, content));
    }
    // Present and not null: the fields whose mere presence matters.
    let given = |key: &str| raw.get(key).filter(|v| !v.is_null());
    let refuse = |field: &str, why: &str| Err(ApiError::bad_request(format!("`{field}` is not supported by agentrt serve ({why})"), Some(field)));
    if top::<Vec<Value>>(raw, "tools", "a list of tools")?.is_some_and(|t| !t.is_empty()) {
        return refuse("tools", "tool programs are written as text; send tool output as `tool` messages");
    }
    if given("tool_choice").is_some_and(|c| c.as_str() != Some("none") && c.as_str() != Some("auto")) {
        return refuse("tool_choice", "no tools are served: only \"none\" or \"auto\"");
    }
    if given("response_format").is_some_and(|f| f["type"].as_str() != Some("text")) {
        return refuse("response_format", "only text");
    }
    if given("logit_bias").is_some_and(|b| b.as_object().is_some_and(|o| !o.is_empty())) {
        return refuse("logit_bias", "not implemented");
    }
    if top::<i64>(raw, "top_logprobs", INTEGER)?.unwrap_or(0) != 0 {
        return refuse("top_logprobs", "only the sampled token's log-prob is returned");
    }
    let temperature = top::<f64>(raw, "temperature", NUMBER)?.unwrap_or(1.0);
    if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
        return Err(ApiError::bad_request(format!("`temperature` {temperature}: expected 0 to 2"), Some("temperature")));
    }
    let top_p = top::<f64>(raw, "top_p", NUMBER)?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad_request(format!("`top_p` {top_p}: expected more than 0, at most 1"), Some("top_p")));
    }
    let top_k = match top::<i64>(raw, "top_k", INTEGER)?.unwrap_or(0) {
        -1 | 0 => 0,
        k if k > 0 => k as usize,
        k => return Err(ApiError::bad_request(format!("`top_k` {k}: expected -1 or 0 (all) or a positive count"), Some("top_k"))),
    };
    let max_completion_tokens = top::<i64>(raw, "max_completion_tokens", INTEGER)?;
    let max_tokens = match max_completion_tokens.or(top::<i64>(raw, "max_tokens", INTEGER)?) {
        None => DEFAULT_MAX_TOKENS,
        Some(m) if m >= 1 => m as usize,
        Some(m) => return Err(ApiError::bad_request(format!("`max_tokens` {m}: expected at least 1"), Some("max_tokens"))),
    };
    let n = match top::<i64>(raw, "n", INTEGER)?.unwrap_or(1) {
        n if (1..=MAX_CHOICES as i64).contains(&n) => n as usize,
        n => return Err(ApiError::bad_request(format!("`n` {n}: expected 1 to {MAX_CHOICES}"), Some("n"))),
    };
    const STOP: &str = "a string or a list of strings";
    let stop = match given("stop") {
        None => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            let mut stop = Vec::with_capacity(items.len());
            for (j, item) in items.iter().enumerate() {
                let s = item
                    .as_str()
                    .ok_or_else(|| ApiError::bad_request(format!("`stop` is a list holding {} at [{j}]: expected {STOP}", describe(item)), Some("stop")))?;
                stop.push(s.to_string());
            }
            stop
        }
        Some(other) => return Err(type_error("stop", other, STOP)),
    };
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::bad_request("`stop` holds an empty string", Some("stop")));
    }
    let penalty = |key: &str| -> Result<f32, ApiError> {
        let v = top::<f64>(raw, key, NUMBER)?.unwrap_or(0.0);
        if !(v.is_finite() && (-2.0..=2.0).contains(&v)) {
            return Err(ApiError::bad_request(format!("`{key}` {v}: expected -2 to 2"), Some(key)));
        }
        Ok(v as f32)
    };
    let (frequency_penalty, presence_penalty) = (penalty("frequency_penalty")?, penalty("presence_penalty")?);
    let stream_usage = match given("stream_options") {
        None => false,
        Some(Value::Object(o)) => read_field::<bool>(o, "include_usage", "stream_options.include_usage", BOOL)?.unwrap_or(false),
        Some(other) => return Err(type_error("stream_options", other, "an object")),
    };
    Ok(ChatRequest {
        model,
        messages,
        params: SamplingParams { n, temperature, top_p, top_k, max_tokens, stop, frequency_penalty, presence_penalty, ..SamplingParams::default() },
        stream: top(raw, "stream", BOOL)?.unwrap_or(false),
        stream_usage,
        seed: top(raw, "seed", "an integer from 0 to 18446744073709551615")?,
        logprobs: top(raw, "logprobs", BOOL)?.unwrap_or(false),
        tokens_as_ids: top(raw, "return_tokens_as_token_ids", BOOL)?.unwrap_or(false),
        include_stop: top(raw, "include_stop_str_in_output", BOOL)?.unwrap_or(false),
    })
}

/// A checked body of vLLM's `/v1/load_lora_adapter`: `{"lora_name", "lora_path", "load_inplace"}`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraLoad {
    /// The name the adapter is served under.
    pub name: String,
    /// Where it is read from, as the client wrote it (the server resolves it under its adapter root).
    pub path: String,
    /// Replace an adapter already served under this name (`load_inplace`).
    pub replace: bool,
}

/// Parses the body of a `/v1/load_lora_adapter` request: an object with the strings `lora_name` and
/// `lora_path` (required, not blank) and `load_inplace` (true or false, false when absent).
pub fn parse_lora_load(body: &[u8]) -> Result<LoraLoad, ApiError> {
    let body = json_object(body)?;
    let name = required_string(&body, "lora_name")?;
    let path = required_string(&body, "lora_path")?;
    let replace = read_field::<bool>(&body, "load_inplace", "load_inplace", BOOL)?.unwrap_or(false);
    Ok(LoraLoad { name, path, replace })
}

/// Parses the body of a `/v1/unload_lora_adapter` request: an object with the string `lora_name`
/// (required, not blank), which it returns.
pub fn parse_lora_unload(body: &[u8]) -> Result<String, ApiError> {
    required_string(&json_object(body)?, "lora_name")
}

/// The body of a request to the LoRA endpoints: a JSON object.
fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(other) => Err(ApiError::bad_request(format!("the body is {}: expected a JSON object", describe(&other)), None)),
        Err(e) => Err(ApiError::bad_request(format!("the body is not JSON: {e}"), None)),
    }
}

/// Field `key`, a string that is required and not blank.
fn required_string(body: &Map<String, Value>, key: &str) -> Result<String, ApiError> {
    read_field::<String>(body, key, key, "a string")?
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("`{key}` is required"), Some(key)))
}

/// `finish_reason` and `stop_reason` of a choice, as vLLM writes them.
pub fn finish_fields(reason: &FinishReason) -> (&'static str, Option<StopReason>) {
    match reason {
        FinishReason::Eos => ("stop", None),
        FinishReason::Stop(s) => ("stop", Some(StopReason::Text(s.clone()))),
        FinishReason::Length | FinishReason::Cancelled => ("length", None),
    }
}

/// One `logprobs.content` entry.
pub fn logprob_entry(token: &str, id: u32, logprob: f32, tokens_as_ids: bool) -> TokenLogprob {
    let token = if tokens_as_ids { format!("token_id:{id}") } else { token.to_string() };
    let bytes = token.as_bytes().to_vec();
    // Written widened (with `null` where it is not finite), as the log-probs always were.
    TokenLogprob { token, logprob: Some(f64::from(logprob)), bytes: Some(bytes), top_logprobs: vec![] }
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
    fn every_field_a_client_sends_is_read() {
        use agentrt_openai::wire::{ChatCompletionRequest, ChatMessage};
        let sent = ChatCompletionRequest {
            model: "m".into(),
            messages: vec![ChatMessage::new("system", "s"), ChatMessage::user("q"), ChatMessage::new("assistant", "a"), ChatMessage::new("tool", "t")],
            temperature: Some(0.5),
            top_p: Some(0.9),
            top_k: Some(20),
            max_tokens: Some(64),
            stop: vec!["</tool>".into(), "</answer>".into()],
            logprobs: Some(true),
            return_tokens_as_token_ids: Some(true),
            stream: Some(true),
        };
        let r = parse_chat_request(&serde_json::to_vec(&sent).unwrap()).unwrap();
        assert_eq!(r.model, sent.model);
        let roles: Vec<(&str, &str)> = r.messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(roles, [("system", "s"), ("user", "q"), ("assistant", "a"), ("tool", "t")]);
        assert_eq!((r.params.temperature, r.params.top_p, r.params.top_k, r.params.max_tokens), (0.5, 0.9, 20, 64));
        assert_eq!(r.params.stop, sent.stop);
        assert!(r.logprobs && r.tokens_as_ids && r.stream);
    }

    #[test]
    fn penalties_are_read_and_fields_that_change_nothing_are_accepted() {
        let body = br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "frequency_penalty": 2.0, "presence_penalty": -0.5,
            "user": "u1", "metadata": {"k": "v"}, "store": false, "tool_choice": "none", "parallel_tool_calls": true}"#;
        let r = parse_chat_request(body).unwrap();
        assert_eq!((r.params.frequency_penalty, r.params.presence_penalty), (2.0, -0.5));
        let e = parse_chat_request(br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "foo": 1}"#).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("foo")));
    }

    #[test]
    fn bad_requests_name_the_field() {
        let cases: [(&[u8], &str); 13] = [
            (b"{not json", "not a valid chat request"),
            (br#"{"messages": []}"#, "`model` is required"),
            (br#"{"model": "m"}"#, "`messages` is required"),
            (br#"{"model": "m", "messages": [{"role": "robot", "content": "x"}]}"#, "messages[0].role `robot`"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3}"#, "`temperature` 3"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}"#, "`max_tokens` 0"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 99}"#, "`n` 99"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 5}"#, "`top_logprobs` is not supported"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}"#, "`tools` is not supported"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "foo": 1}"#, "Unrecognized request argument supplied: foo"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "frequency_penalty": 2.5}"#, "`frequency_penalty` 2.5: expected -2 to 2"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "presence_penalty": "high"}"#, "`presence_penalty` is a string"),
            (br#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}"#, "`tool_choice` is not supported"),
        ];
        for (body, expected) in cases {
            let e = parse_chat_request(body).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e.message.contains(expected), "{:?} -> {}", String::from_utf8_lossy(body), e.message);
            assert_eq!(e.body().error.code, Some(ErrorCode::Status(400)));
        }
    }
}
