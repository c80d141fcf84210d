//! The JSON of the chat-completions protocol: what the clients send and read, and what `agentrt serve`
//! writes, as one set of types so that the two sides cannot drift apart.
//!
//! Beside OpenAI's own fields are vLLM's, which `agentrt serve` speaks too: `top_k`,
//! `return_tokens_as_token_ids` (each log-prob entry's `token` is `token_id:N`), a choice's `stop_reason`,
//! and the dynamic LoRA endpoints' bodies. Replies are read leniently: a field a server may leave out is
//! optional or has a default, and fields nobody reads are ignored; `choices` is required, so an error object
//! sent with status 200 is not mistaken for an empty completion.
//!
//! Requests are written here and checked by hand on the server (`agentrt_serve::protocol`), whose errors name
//! the field at fault and the type it expected, which derived deserialisation cannot.

use serde::{Deserialize, Deserializer, Serialize};
use std::path::PathBuf;

/// Chat completions, under an API base such as `http://localhost:8000/v1`.
pub const CHAT_COMPLETIONS_PATH: &str = "/chat/completions";
/// vLLM's dynamic LoRA loading, under the API base.
pub const LOAD_LORA_ADAPTER_PATH: &str = "/load_lora_adapter";
/// vLLM's dynamic LoRA unloading, under the API base.
pub const UNLOAD_LORA_ADAPTER_PATH: &str = "/unload_lora_adapter";
/// The models served, under the API base (`GET`).
pub const MODELS_PATH: &str = "/models";
/// The `object` of a whole reply.
pub const CHAT_COMPLETION_OBJECT: &str = "chat.completion";
/// The `object` of a streamed reply's chunks.
pub const CHAT_COMPLETION_CHUNK_OBJECT: &str = "chat.completion.chunk";

/// One message of a request's conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The message's text.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role: role.into(), content: content.into() }
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }
}

/// A chat-completions request body. Fields left `None` (and an empty `stop`) are not sent, so the server's
/// defaults apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    /// The model name as the server knows it: a served model or a loaded LoRA adapter's name.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Sampling temperature (0: greedy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus mass kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Only the k most likely tokens (vLLM's field; OpenAI's API has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// Tokens per reply at most (`max_tokens`: what Ollama, vLLM and llama.cpp's server all read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// Stop strings, sent as a list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Return each sampled token's log-prob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    /// Write each log-prob entry's token as `token_id:N` (vLLM's field), so the client gets the exact ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_tokens_as_token_ids: Option<bool>,
    /// Reply as server-sent events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
}

/// A reply's envelope around its choices: the same fields in a whole reply ([`ChatCompletion`], choices
/// [`Choice`]) and in each server-sent event of a streamed one ([`ChatCompletionChunk`], choices
/// [`ChunkChoice`], where `id`, `created` and `model` repeat in every chunk).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionEnvelope<C> {
    /// The reply's id, `chatcmpl-…`.
    #[serde(default)]
    pub id: String,
    /// [`CHAT_COMPLETION_OBJECT`] or [`CHAT_COMPLETION_CHUNK_OBJECT`].
    #[serde(default)]
    pub object: String,
    /// When the request was accepted, in seconds since the Unix epoch.
    #[serde(default)]
    pub created: u64,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// A whole reply: one per sample asked for (`n`). A chunk: the pieces of this event (empty in the usage
    /// chunk).
    pub choices: Vec<C>,
    /// Token counts, when the server sends them (streamed: only in the last chunk, when
    /// `stream_options.include_usage` asked for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// A whole (not streamed) reply.
pub type ChatCompletion = CompletionEnvelope<Choice>;

/// One server-sent event of a streamed reply.
pub type ChatCompletionChunk = CompletionEnvelope<ChunkChoice>;

/// One sample of a whole reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// Which sample this is.
    #[serde(default)]
    pub index: usize,
    /// The reply's message.
    pub message: ReplyMessage,
    /// The sampled tokens' log-probs, when asked for.
    #[serde(default)]
    pub logprobs: Option<ChoiceLogprobs>,
    /// `stop` (an end of turn or a stop string) or `length` (cut at `max_tokens`).
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// vLLM's: the stop string (or token) that ended the choice, which the text leaves out.
    #[serde(default)]
    pub stop_reason: Option<StopReason>,
}

/// The message of a reply's choice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyMessage {
    /// `assistant`.
    #[serde(default)]
    pub role: String,
    /// The reply's text; servers may send none (e.g. a reply that is all tool calls).
    #[serde(default)]
    pub content: Option<String>,
}

/// What ended a choice, in vLLM's `stop_reason`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StopReason {
    /// A stop string of the request.
    Text(String),
    /// A stop token's id.
    TokenId(u32),
}

/// A choice's `logprobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceLogprobs {
    /// One entry per sampled token, in order.
    #[serde(default)]
    pub content: Option<Vec<TokenLogprob>>,
}

/// One sampled token and its log-prob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token's text, or `token_id:N` when the request asked for `return_tokens_as_token_ids`.
    #[serde(default)]
    pub token: String,
    /// The log-prob it was sampled with. An f64 on the wire: a log-prob computed in f32 is written widened,
    /// and a reader that narrows it back gets the f32 exactly. `null` when it is not finite.
    #[serde(default)]
    pub logprob: Option<f64>,
    /// The bytes of `token`.
    #[serde(default)]
    pub bytes: Option<Vec<u8>>,
    /// The most likely alternatives (none unless `top_logprobs` was asked for).
    #[serde(default)]
    pub top_logprobs: Vec<TopLogprob>,
}

/// An alternative to a sampled token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-prob.
    pub logprob: f64,
    /// Its bytes.
    #[serde(default)]
    pub bytes: Option<Vec<u8>>,
}

/// Token counts of a reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the rendered prompt.
    #[serde(default)]
    pub prompt_tokens: usize,
    /// Tokens sampled, over every choice.
    #[serde(default)]
    pub completion_tokens: usize,
    /// The two together.
    #[serde(default)]
    pub total_tokens: usize,
}

impl Usage {
    /// The counts of a reply with `prompt_tokens` in the prompt and `completion_tokens` sampled.
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Usage {
        Usage { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens }
    }
}

/// A piece of one choice in a chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    /// Which choice the piece belongs to.
    #[serde(default)]
    pub index: usize,
    /// What the piece adds.
    pub delta: Delta,
    /// The log-probs of the tokens this piece comes from, when asked for.
    #[serde(default)]
    pub logprobs: Option<ChoiceLogprobs>,
    /// Set in the piece that ends the choice.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Present only in the piece that ends the choice (`null` there when no stop string ended it), as
    /// [`Choice::stop_reason`].
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub stop_reason: Option<Option<StopReason>>,
}

/// What a chunk adds to a choice: the role in its first piece, then text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// `assistant`, in the choice's first piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// More of the reply's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A field that is present, `null` included: `Some(None)` for `null`, where a plain `Option<Option<T>>`
/// reads `null` as absent.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// An error reply's body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The inside of an [`ErrorResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// What is wrong, for a person to read.
    pub message: String,
    /// The kind of error (`BadRequestError`, `invalid_request_error`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, when there is one.
    #[serde(default)]
    pub param: Option<String>,
    /// The HTTP status (vLLM and `agentrt serve`) or a name (OpenAI's `invalid_api_key`).
    #[serde(default)]
    pub code: Option<ErrorCode>,
}

/// An error's `code`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ErrorCode {
    /// The HTTP status.
    Status(u16),
    /// A name for the error.
    Name(String),
}

/// `GET /v1/models`' reply: every model the server answers to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    /// `list`.
    #[serde(default)]
    pub object: String,
    /// One card per served name.
    pub data: Vec<ModelCard>,
}

/// One served model, as `GET /v1/models` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// The name requests give as their `model`.
    pub id: String,
    /// `model`.
    #[serde(default)]
    pub object: String,
    /// When it was made available, in seconds since the Unix epoch.
    #[serde(default)]
    pub created: u64,
    /// Who serves it.
    #[serde(default)]
    pub owned_by: String,
    /// The base model it runs on (vLLM's field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// For a LoRA adapter, the base model it sits on; `null` for a base model (vLLM's field).
    #[serde(default)]
    pub parent: Option<String>,
    /// `agentrt serve`'s own field: the adapter's `agent.json` (how it was trained to play: prompt,
    /// demonstration, turns, reply length, sandbox bounds), so that a client plays it as it was trained
    /// without a copy of the file. The server passes it on as it read it; other servers send none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_settings: Option<serde_json::Value>,
}

/// `POST /v1/load_lora_adapter`'s body (vLLM's dynamic LoRA API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadLoraAdapter {
    /// The name the adapter is served under: requests name it as their `model`.
    pub lora_name: String,
    /// The PEFT adapter's directory, as the server sees it.
    pub lora_path: PathBuf,
    /// Replace an adapter already served under `lora_name` instead of refusing.
    #[serde(default)]
    pub load_inplace: bool,
}

/// `POST /v1/unload_lora_adapter`'s body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnloadLoraAdapter {
    /// The name the adapter is served under.
    pub lora_name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_sends_only_what_is_set() {
        let request = ChatCompletionRequest { model: "m".into(), messages: vec![ChatMessage::user("hi")], max_tokens: Some(16), ..Default::default() };
        assert_eq!(serde_json::to_value(&request).unwrap(), json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}));
    }

    #[test]
    fn a_reply_is_read_leniently_but_needs_choices() {
        // What Ollama sends: no logprobs, no stop_reason, an extra field in the message.
        let reply: ChatCompletion = serde_json::from_value(
            json!({"id": "x", "choices": [{"message": {"role": "assistant", "content": "yes", "images": null}, "finish_reason": "stop"}]}),
        )
        .unwrap();
        assert_eq!(reply.choices[0].message.content.as_deref(), Some("yes"));
        assert_eq!(reply.choices[0].stop_reason, None);
        // vLLM names a stop token by its id.
        let reply: ChatCompletion = serde_json::from_value(json!({"choices": [{"message": {"content": null}, "stop_reason": 7}]})).unwrap();
        assert_eq!(reply.choices[0].stop_reason, Some(StopReason::TokenId(7)));
        assert_eq!(reply.choices[0].message.content, None);
        let error = serde_json::from_value::<ChatCompletion>(json!({"error": "no such model"})).unwrap_err().to_string();
        assert!(error.contains("choices"), "{error}");
    }

    #[test]
    fn a_chunk_writes_stop_reason_only_where_a_choice_ends() {
        let piece = ChunkChoice { index: 0, delta: Delta { role: None, content: Some("a".into()) }, logprobs: None, finish_reason: None, stop_reason: None };
        assert_eq!(serde_json::to_value(&piece).unwrap(), json!({"index": 0, "delta": {"content": "a"}, "logprobs": null, "finish_reason": null}));
        let end = ChunkChoice { delta: Delta::default(), finish_reason: Some("stop".into()), stop_reason: Some(None), ..piece };
        let written = serde_json::to_value(&end).unwrap();
        assert_eq!(written, json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop", "stop_reason": null}));
        assert_eq!(serde_json::from_value::<ChunkChoice>(written).unwrap(), end);
    }

    #[test]
    fn an_f32_log_prob_survives_the_wire() {
        let logprob = -0.1f32;
        let entry = TokenLogprob { token: "token_id:5".into(), logprob: Some(f64::from(logprob)), bytes: None, top_logprobs: vec![] };
        let read: TokenLogprob = serde_json::from_str(&serde_json::to_string(&entry).unwrap()).unwrap();
        assert_eq!(read.logprob.map(|l| l as f32), Some(logprob));
    }

    #[test]
    fn a_model_card_carries_agent_settings_only_when_there_are_some() {
        // vLLM's card for a LoRA module: no agent settings, read as none.
        let vllm = json!({"object": "list", "data": [{"id": "wiki", "object": "model", "created": 1, "owned_by": "vllm", "root": "/m", "parent": "base",
            "max_model_len": 2048, "permission": []}]});
        let read: ModelList = serde_json::from_value(vllm).unwrap();
        assert_eq!((read.data[0].parent.as_deref(), &read.data[0].agent_settings), (Some("base"), &None));
        let base =
            ModelCard { id: "base".into(), object: "model".into(), created: 1, owned_by: "agentrt".into(), root: None, parent: None, agent_settings: None };
        assert_eq!(serde_json::to_value(&base).unwrap(), json!({"id": "base", "object": "model", "created": 1, "owned_by": "agentrt", "parent": null}));
        let adapter = ModelCard { id: "a".into(), parent: Some("base".into()), agent_settings: Some(json!({"max_turns": 2})), ..base };
        let written = serde_json::to_value(&adapter).unwrap();
        assert_eq!(written["agent_settings"], json!({"max_turns": 2}));
        assert_eq!(serde_json::from_value::<ModelCard>(written).unwrap(), adapter);
    }

    #[test]
    fn error_codes_are_a_status_or_a_name() {
        let openai = json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
        let read: ErrorResponse = serde_json::from_value(openai).unwrap();
        assert_eq!(read.error.code, Some(ErrorCode::Name("invalid_api_key".into())));
        let ours = ErrorResponse {
            error: ErrorDetail { message: "m".into(), kind: "BadRequestError".into(), param: Some("n".into()), code: Some(ErrorCode::Status(400)) },
        };
        assert_eq!(serde_json::to_value(&ours).unwrap(), json!({"error": {"message": "m", "type": "BadRequestError", "param": "n", "code": 400}}));
    }
}
