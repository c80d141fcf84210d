//! The HTTP side: routes, the server's shared state, and how engine events become responses (one JSON
//! body, or server-sent events).

use crate::engine::{self, EngineStats, Event, Job, ServeConfig};
use crate::protocol::{finish_fields, logprob_entry, parse_chat_request, parse_lora_load, parse_lora_unload, ApiError, ChatRequest, LoraLoad};
use crate::text_stream::{final_text, TextStream};
use crate::write_timeout::WriteTimeoutListener;
use crate::ServeError;
use agentrt_openai::wire::{
    ChatCompletion, ChatCompletionChunk, Choice, ChoiceLogprobs, ChunkChoice, Delta, ModelCard, ModelList, ReplyMessage, Usage, CHAT_COMPLETION_CHUNK_OBJECT,
    CHAT_COMPLETION_OBJECT,
};
use agentrt_policy::rand::rngs::StdRng;
use agentrt_policy::rand::{Rng, SeedableRng};
use agentrt_policy::{AdapterSet, Completion, Policy};
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// The file beside a trained adapter that says how it was trained to play (`agentrt_environments::AGENT_FILE`,
/// which this crate does not depend on; `agentrt serve`'s tests check that the two agree).
pub const AGENT_FILE: &str = "agent.json";

/// An adapter being served.
struct ServedAdapter {
    set: Arc<AdapterSet>,
    /// Its [`AGENT_FILE`], as read, when it has one: listed in `/v1/models` for clients to play it by.
    agent_settings: Option<Value>,
}

/// Everything the routes share: the base model, the adapters by name, the engine's queue.
pub struct ServerState {
    policy: Arc<Policy>,
    base_name: String,
    adapters: RwLock<BTreeMap<String, ServedAdapter>>,
    engine: mpsc::Sender<Job>,
    stats: Arc<Mutex<EngineStats>>,
    /// Prompt plus completion tokens a request may ask for.
    max_model_len: usize,
    max_num_seqs: usize,
    api_key: Option<String>,
    /// Whether the LoRA endpoints may load and unload adapters (`--allow-runtime-lora`).
    allow_runtime_lora: bool,
    /// The directory loaded adapters must lie under (`--lora-root`), canonical.
    lora_root: Option<PathBuf>,
    /// How long a reply may wait for its client to read (`--timeout-s`).
    write_timeout: Option<std::time::Duration>,
    /// Connections closed because their reply could not be written within `write_timeout`.
    write_timeouts: Arc<AtomicU64>,
    /// When the server started: the `created` of the models it lists.
    started: u64,
}

/// Seconds since the Unix epoch, as OpenAI's `created` fields count.
fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl ServerState {
    /// A server for `policy` (its own adapters, if any, are not used: serve adapters by name), answering to
    /// `base_name`; starts the sampling thread.
    /// `config.max_model_len` past the model's context is an error.
    pub fn new(mut policy: Policy, base_name: impl Into<String>, config: ServeConfig) -> Result<Arc<ServerState>, ServeError> {
        policy.adapters = None;
        let context = policy.config().max_position_embeddings;
        let max_model_len = config.max_model_len.unwrap_or(context);
        if max_model_len == 0 || max_model_len > context {
            return Err(ServeError::Config(format!("--max-model-len {max_model_len}: the model's context is {context} tokens")));
        }
        if config.max_num_seqs == 0 || config.max_num_batched_tokens == 0 {
            return Err(ServeError::Config("--max-num-seqs and --max-num-batched-tokens must be at least 1".into()));
        }
        let lora_root = match &config.lora_root {
            Some(root) => Some(
                root.canonicalize()
                    .ok()
                    .filter(|r| r.is_dir())
                    .ok_or_else(|| ServeError::Config(format!("--lora-root {}: not a directory", root.display())))?,
            ),
            None => None,
        };
        let (allow_runtime_lora, write_timeout) = (config.allow_runtime_lora, config.write_timeout);
        let policy = Arc::new(policy);
        let stats = Arc::new(Mutex::new(EngineStats::default()));
        let (max_num_seqs, api_key) = (config.max_num_seqs, config.api_key.clone());
        let engine = engine::start(policy.clone(), config, stats.clone());
        Ok(Arc::new(ServerState {
            policy,
            base_name: base_name.into(),
            adapters: RwLock::new(BTreeMap::new()),
            engine,
            stats,
            max_model_len,
            max_num_seqs,
            api_key,
            allow_runtime_lora,
            lora_root,
            write_timeout,
            write_timeouts: Arc::new(AtomicU64::new(0)),
            started: unix_now(),
        }))
    }

    /// Serves the adapter at `path` (a PEFT directory, a dual `retain/` + `forget/` one, or a checkpoint
    /// holding `adapters/`) as `name`, with its [`AGENT_FILE`] when `path` holds one (a JSON object, else an
    /// error). With `replace`, a loaded adapter of that name is swapped; otherwise a taken name is an error.
    pub fn add_adapter(&self, name: &str, path: &Path, replace: bool) -> Result<(), ServeError> {
        if name == self.base_name || (!replace && self.adapters.read().expect("adapters lock").contains_key(name)) {
            return Err(ServeError::DuplicateName(name.into()));
        }
        let agent_settings = read_agent_settings(path)?;
        let dir = agentrt_policy::adapter_io::adapters_dir(path);
        let set = AdapterSet::load_peft(&dir, self.policy.config(), self.policy.device()).map_err(|source| ServeError::Adapter {
            name: name.into(),
            path: path.to_path_buf(),
            source: Box::new(source),
        })?;
        let has_agent_settings = agent_settings.is_some();
        let served = ServedAdapter { set: Arc::new(set), agent_settings };
        let replaced = self.adapters.write().expect("adapters lock").insert(name.into(), served).is_some();
        tracing::info!(name, path = %path.display(), replaced, agent_settings = has_agent_settings, "adapter loaded");
        Ok(())
    }

    /// The served names: the base model's, then the adapters'.
    pub fn model_names(&self) -> Vec<String> {
        std::iter::once(self.base_name.clone()).chain(self.adapters.read().expect("adapters lock").keys().cloned()).collect()
    }

    /// What the engine has done so far.
    pub fn stats(&self) -> EngineStats {
        self.stats.lock().expect("stats lock").clone()
    }

    /// Connections closed so far because a reply could not be written within `--timeout-s`.
    pub fn write_timeouts(&self) -> u64 {
        self.write_timeouts.load(Ordering::Relaxed)
    }

    /// Refuses a runtime change of the served adapters unless the server was started to allow it.
    fn runtime_lora_allowed(&self) -> Result<(), ApiError> {
        if self.allow_runtime_lora {
            return Ok(());
        }
        Err(ApiError::forbidden(
            "Loading and unloading LoRA adapters at runtime is off on this server: start it with --allow-runtime-lora \
             (or AGENTRT_ALLOW_RUNTIME_LORA=1), and --lora-root DIR to allow adapters under DIR only.",
            None,
        ))
    }

    /// The path a runtime load reads `given` from: under `--lora-root` when there is one (a relative path
    /// is taken under it), once every symlink is resolved, including those of the adapter directory it
    /// names; otherwise `given` as it is. Outside the root, or not there at all, is one refusal, so that it
    /// says nothing about what exists outside.
    fn lora_path(&self, given: &Path) -> Result<PathBuf, ApiError> {
        let Some(root) = &self.lora_root else { return Ok(given.to_path_buf()) };
        let under_root = |p: &Path| p.canonicalize().ok().filter(|c| c.starts_with(root));
        let resolved = under_root(&root.join(given)).filter(|c| under_root(&agentrt_policy::adapter_io::adapters_dir(c)).is_some());
        resolved.ok_or_else(|| {
            ApiError::forbidden(
                format!("`lora_path` {} is not an existing path under the server's adapter root {} (--lora-root).", given.display(), root.display()),
                Some("lora_path"),
            )
        })
    }

    fn adapter(&self, model: &str) -> Result<Option<Arc<AdapterSet>>, ApiError> {
        if model == self.base_name {
            return Ok(None);
        }
        match self.adapters.read().expect("adapters lock").get(model) {
            Some(a) => Ok(Some(a.set.clone())),
            None => Err(ApiError::not_found(format!("The model `{model}` does not exist. Served: {}.", self.model_names().join(", ")))),
        }
    }
}

/// The routes: `/v1/chat/completions`, `/v1/models`, `/v1/load_lora_adapter`, `/v1/unload_lora_adapter`,
/// `/health`.
pub fn router(state: Arc<ServerState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/v1/load_lora_adapter", post(load_adapter))
        .route("/v1/unload_lora_adapter", post(unload_adapter))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), require_api_key))
        .route("/health", get(health))
        .method_not_allowed_fallback(wrong_method)
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::map_response(json_errors))
        .layer(axum::middleware::from_fn(log_rejections))
        .with_state(state)
}

/// The largest request body read, in bytes (axum's default, named so that the 413 can say it).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// What [`router`] serves, method and path: named in the 404 and 405 errors.
pub const ROUTES: [(&str, &str); 5] =
    [("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("POST", "/v1/load_lora_adapter"), ("POST", "/v1/unload_lora_adapter"), ("GET", "/health")];

fn routes_served() -> String {
    ROUTES.iter().map(|(m, p)| format!("{m} {p}")).collect::<Vec<_>>().join(", ")
}

async fn no_route(method: Method, uri: Uri) -> Response {
    error_response(ApiError::not_found(format!("There is no route `{method} {}`. This server serves {}.", uri.path(), routes_served())))
}

async fn wrong_method(method: Method, uri: Uri) -> Response {
    let path = uri.path();
    let takes: Vec<&str> = ROUTES.iter().filter(|(_, p)| *p == path).map(|(m, _)| *m).collect();
    error_response(ApiError::method_not_allowed(format!("`{path}` does not take {method}: send {}.", takes.join(" or "))))
}

/// Why a request was refused: the error message, carried to [`log_rejections`] by the response.
#[derive(Clone)]
struct Refusal(Arc<str>);

/// Logs every request answered with an error status (its method, path, status and the error's message),
/// as the engine logs every request it answers: a 4xx at `warn`, a 5xx at `error`.
async fn log_rejections(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let response = next.run(request).await;
    let status = response.status();
    let reason = response.extensions().get::<Refusal>().map_or("", |r| &*r.0);
    if status.is_client_error() {
        tracing::warn!(%method, %path, status = status.as_u16(), reason, "request rejected");
    } else if status.is_server_error() {
        tracing::error!(%method, %path, status = status.as_u16(), reason, "request failed");
    }
    response
}

/// Rewrites an error response that is not JSON (axum's own: a body over [`MAX_BODY_BYTES`] is a plain-text
/// 413) into an OpenAI-shaped one with the same status and headers.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024).await.map(|b| String::from_utf8_lossy(&b).trim().to_string()).unwrap_or_default();
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!("The request body is over the server's limit of {MAX_BODY_BYTES} bytes."),
        _ if text.is_empty() => status.canonical_reason().unwrap_or("error").to_string(),
        _ => text,
    };
    let error = ApiError { status: status.as_u16(), message, param: None };
    parts.extensions.insert(Refusal(error.message.as_str().into()));
    parts.headers.remove(CONTENT_LENGTH);
    parts.headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(json_text(&error.body())))
}

/// With `--api-key`, every `/v1` route wants `Authorization: Bearer KEY` (vLLM's check; `/health` stays
/// open for probes).
async fn require_api_key(State(s): State<Arc<ServerState>>, request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let Some(key) = &s.api_key else { return next.run(request).await };
    let given = request.headers().get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), key.as_bytes())) {
        return next.run(request).await;
    }
    error_response(ApiError::unauthorized(
        "Incorrect or missing API key: send `Authorization: Bearer <key>` with the key the server was started with (--api-key).",
    ))
}

/// Compares without stopping at the first differing byte, so the time taken does not tell how much of a
/// guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Serves `state` on `listener` until the process ends, closing a connection whose reply cannot be written
/// within the state's write timeout (see [`crate::write_timeout`]).
pub async fn serve(listener: tokio::net::TcpListener, state: Arc<ServerState>) -> Result<(), ServeError> {
    let listener = WriteTimeoutListener { inner: listener, timeout: state.write_timeout, timeouts: state.write_timeouts.clone() };
    axum::serve(listener, router(state)).await.map_err(ServeError::Serve)
}

/// The JSON of a wire type, for the bodies axum's `Json` does not write (server-sent events, a rewritten
/// error).
fn json_text(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("the wire types serialise: they hold no maps with non-string keys")
}

fn error_response(e: ApiError) -> Response {
    let mut response = (StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), Json(e.body())).into_response();
    response.extensions_mut().insert(Refusal(e.message.into()));
    response
}

async fn health(State(s): State<Arc<ServerState>>) -> Json<Value> {
    Json(json!({"status": "ok", "engine": s.stats(), "write_timeouts": s.write_timeouts()}))
}

async fn models(State(s): State<Arc<ServerState>>) -> Json<ModelList> {
    let card = |id: &str, parent: Option<String>, agent_settings: Option<Value>| ModelCard {
        id: id.into(),
        object: "model".into(),
        created: s.started,
        owned_by: "agentrt".into(),
        root: Some(s.base_name.clone()),
        parent,
        agent_settings,
    };
    let mut data = vec![card(&s.base_name, None, None)];
    data.extend(s.adapters.read().expect("adapters lock").iter().map(|(name, a)| card(name, Some(s.base_name.clone()), a.agent_settings.clone())));
    Json(ModelList { object: "list".into(), data })
}

/// `path`'s [`AGENT_FILE`] when it has one. The server does not interpret it (that is the client's
/// `AgentSettings`), but a file a client could not read at all is refused here, where it is named.
fn read_agent_settings(path: &Path) -> Result<Option<Value>, ServeError> {
    let file = path.join(AGENT_FILE);
    if !file.is_file() {
        return Ok(None);
    }
    let refused = |reason: String| ServeError::AgentFile { path: file.clone(), reason };
    let text = std::fs::read_to_string(&file).map_err(|e| refused(e.to_string()))?;
    match serde_json::from_str::<Value>(&text) {
        Ok(v) if v.is_object() => Ok(Some(v)),
        Ok(_) => Err(refused("not a JSON object".into())),
        Err(e) => Err(refused(format!("not JSON: {e}"))),
    }
}

/// A response id no other reply has, on this server or any other start of it (OpenAI's and vLLM's are
/// unique too): 96 random bits from the thread's OS-seeded generator. A counter restarted at 0 each start
/// and made a client's logs or caches keyed by id mix up replies of different runs.
fn response_id() -> String {
    let bits: u128 = agentrt_policy::rand::rng().random::<u128>() >> 32;
    format!("chatcmpl-{bits:024x}")
}

async fn load_adapter(State(s): State<Arc<ServerState>>, body: Bytes) -> Response {
    let run = async {
        s.runtime_lora_allowed()?;
        let LoraLoad { name, path, replace } = parse_lora_load(&body)?;
        let path = s.lora_path(Path::new(&path))?;
        let state = s.clone();
        let n = name.clone();
        tokio::task::spawn_blocking(move || state.add_adapter(&n, &path, replace))
            .await
            .map_err(|e| ApiError::internal(format!("loading the adapter panicked: {e}")))?
            .map_err(|e| match e {
                ServeError::DuplicateName(n) => ApiError::bad_request(
                    format!("The lora adapter '{n}' has already been loaded (pass \"load_inplace\": true to replace it)."),
                    Some("lora_name"),
                ),
                other => ApiError::bad_request(error_chain(&other), Some("lora_path")),
            })?;
        Ok::<_, ApiError>(name)
    };
    match run.await {
        Ok(name) => (StatusCode::OK, format!("Success: LoRA adapter '{name}' added successfully.")).into_response(),
        Err(e) => error_response(e),
    }
}

async fn unload_adapter(State(s): State<Arc<ServerState>>, body: Bytes) -> Response {
    let run = || {
        s.runtime_lora_allowed()?;
        let name = parse_lora_unload(&body)?;
        match s.adapters.write().expect("adapters lock").remove(&name) {
            Some(_) => Ok(name),
            None => Err(ApiError::not_found(format!("The lora adapter '{name}' cannot be found."))),
        }
    };
    match run() {
        Ok(name) => (StatusCode::OK, format!("Success: LoRA adapter '{name}' removed successfully.")).into_response(),
        Err(e) => error_response(e),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// A request checked, rendered and queued.
struct Queued {
    request: ChatRequest,
    id: String,
    /// When the request was accepted: every chunk of its reply carries it, as OpenAI's do.
    created: u64,
    prompt_tokens: usize,
    events: UnboundedReceiver<Event>,
}

fn enqueue(s: &ServerState, body: &[u8]) -> Result<Queued, ApiError> {
    let request = parse_chat_request(body)?;
    let adapter = s.adapter(&request.model)?;
    let prompt =
        s.policy.chat_prompt(&request.messages).map_err(|e| ApiError::bad_request(format!("the chat template refused the messages: {e}"), Some("messages")))?;
    let context = s.max_model_len;
    if request.params.n > s.max_num_seqs {
        return Err(ApiError::bad_request(
            format!("`n` is {}, more than the server decodes at once (--max-num-seqs {})", request.params.n, s.max_num_seqs),
            Some("n"),
        ));
    }
    if prompt.len() + request.params.max_tokens > context {
        return Err(ApiError::bad_request(
            format!(
                "This model's maximum context length is {context} tokens. However, you requested {} tokens ({} in the messages, {} in the completion).",
                prompt.len() + request.params.max_tokens,
                prompt.len(),
                request.params.max_tokens
            ),
            // The messages alone fill the context, or they fit and `max_tokens` asks for more than is left.
            Some(if prompt.len() >= context { "messages" } else { "max_tokens" }),
        ));
    }
    let seed = request.seed.unwrap_or_else(|| agentrt_policy::rand::rng().random());
    let rngs = (0..request.params.n).map(|c| StdRng::seed_from_u64(seed.wrapping_add(c as u64))).collect();
    let (tx, events) = unbounded_channel();
    let prompt_tokens = prompt.len();
    let id = response_id();
    let job = Job {
        id: id.clone(),
        model: request.model.clone(),
        adapter,
        prompt,
        params: request.params.clone(),
        rngs,
        events: tx,
        received: std::time::Instant::now(),
    };
    s.engine.send(job).map_err(|_| ApiError::internal("the sampling thread has stopped"))?;
    Ok(Queued { request, id, created: unix_now(), prompt_tokens, events })
}

async fn chat(State(s): State<Arc<ServerState>>, body: Bytes) -> Response {
    let queued = match enqueue(&s, &body) {
        Ok(q) => q,
        Err(e) => return error_response(e),
    };
    if queued.request.stream {
        stream_reply(s, queued).into_response()
    } else {
        match whole_reply(&s, queued).await {
            Ok(v) => Json(v).into_response(),
            Err(e) => error_response(e),
        }
    }
}

fn logprobs_of(s: &ServerState, c: &Completion, tokens_as_ids: bool) -> ChoiceLogprobs {
    let content = c
        .token_ids
        .iter()
        .zip(&c.logprobs)
        .map(|(&id, &lp)| logprob_entry(&s.policy.tokenizer.decode(&[id]).unwrap_or_default(), id, lp, tokens_as_ids))
        .collect();
    ChoiceLogprobs { content: Some(content) }
}

async fn whole_reply(s: &ServerState, mut q: Queued) -> Result<ChatCompletion, ApiError> {
    let n = q.request.params.n;
    let mut done: Vec<Option<Completion>> = vec![None; n];
    while done.iter().any(Option::is_none) {
        match q.events.recv().await {
            Some(Event::Token { .. }) => {}
            Some(Event::Done { choice, completion }) => done[choice] = Some(*completion),
            Some(Event::Failed(message)) => return Err(ApiError::internal(message)),
            None => return Err(ApiError::internal("the sampling thread dropped the request")),
        }
    }
    let done: Vec<Completion> = done.into_iter().map(|c| c.expect("every choice is done")).collect();
    let completion_tokens = done.iter().map(|c| c.token_ids.len()).sum();
    let choices = done
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (finish, stop_reason) = finish_fields(&c.finish_reason);
            Choice {
                index: i,
                message: ReplyMessage { role: "assistant".into(), content: Some(final_text(&c.text, &c.finish_reason, q.request.include_stop)) },
                logprobs: q.request.logprobs.then(|| logprobs_of(s, c, q.request.tokens_as_ids)),
                finish_reason: Some(finish.into()),
                stop_reason,
            }
        })
        .collect();
    Ok(ChatCompletion {
        id: q.id,
        object: CHAT_COMPLETION_OBJECT.into(),
        created: q.created,
        model: q.request.model,
        choices,
        usage: Some(Usage::new(q.prompt_tokens, completion_tokens)),
    })
}

/// Streams the reply as server-sent events: a first chunk per choice with the role, then text as it
/// becomes safe to send (with each token's log-prob when asked), a last chunk per choice with its
/// `finish_reason`, the usage when asked, and `[DONE]`.
///
/// A chunk is written only when the connection pulls it: hyper polls the body only while its write buffer
/// has room (a few frames), and that empties only as fast as the socket takes bytes. The engine's events
/// wait in the job's channel meanwhile, so what a client that reads slowly, or never, leaves the server
/// holding is bounded, and compact: the engine never waits for it (the channel has no capacity to fill), its
/// sequences run to their end and free their slots as anyone's do, and the channel then holds at most
/// `n × (max_tokens + 1)` events (a token, or one choice's end), `size_of::<Event>()` bytes each, plus each
/// choice's [`Completion`] (its ids, log-probs and text), where `enqueue` has checked prompt plus
/// `max_tokens` against `--max-model-len`. Past that, a connection holds hyper's buffers and the kernel's
/// socket queues (`net.ipv4.tcp_wmem`, `tcp_rmem`), until the client reads or closes it, or the write
/// timeout passes with a write waiting ([`crate::write_timeout`]) (`serve/tests/hostile_load.rs` measures
/// both). A client that goes away drops the body, which closes the
/// job's channel, which cancels its rows in the engine at their next token.
fn stream_reply(s: Arc<ServerState>, q: Queued) -> Sse<impl futures::Stream<Item = Result<SseEvent, Infallible>>> {
    let n = q.request.params.n;
    let mut reply = StreamedReply {
        texts: (0..n).map(|_| TextStream::new(q.request.params.stop.clone(), q.request.include_stop)).collect(),
        open: n,
        completion_tokens: 0,
        ready: VecDeque::new(),
        ended: false,
        s,
        q,
    };
    for c in 0..n {
        let role = reply.chunk(piece(c, Delta { role: Some("assistant".into()), content: Some(String::new()) }, None), None);
        reply.ready.push_back(role);
    }
    let chunks = futures::stream::unfold(reply, |mut reply| async move {
        loop {
            if let Some(e) = reply.ready.pop_front() {
                return Some((Ok(e), reply));
            }
            if reply.ended {
                return None;
            }
            reply.next_event().await;
        }
    });
    Sse::new(chunks).keep_alive(KeepAlive::default())
}

/// A chunk's `choices`: choice `choice`'s `delta`, not ended.
fn piece(choice: usize, delta: Delta, logprobs: Option<ChoiceLogprobs>) -> Vec<ChunkChoice> {
    vec![ChunkChoice { index: choice, delta, logprobs, finish_reason: None, stop_reason: None }]
}

/// A piece that adds `text` to choice `choice`.
fn text_piece(choice: usize, text: String, logprobs: Option<ChoiceLogprobs>) -> Vec<ChunkChoice> {
    piece(choice, Delta { role: None, content: Some(text) }, logprobs)
}

/// A streamed reply between the chunks its connection pulls.
struct StreamedReply {
    s: Arc<ServerState>,
    q: Queued,
    texts: Vec<TextStream>,
    /// Choices not yet ended.
    open: usize,
    completion_tokens: usize,
    /// Chunks made from the last event, not yet pulled.
    ready: VecDeque<SseEvent>,
    /// No event comes after `ready`.
    ended: bool,
}

impl StreamedReply {
    /// An event of this reply holding `choices`, and the usage in the last one when asked.
    fn chunk(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> SseEvent {
        let q = &self.q;
        let chunk = ChatCompletionChunk {
            id: q.id.clone(),
            object: CHAT_COMPLETION_CHUNK_OBJECT.into(),
            created: q.created,
            model: q.request.model.clone(),
            choices,
            usage,
        };
        SseEvent::default().data(json_text(&chunk))
    }

    /// Waits for the engine's next event and turns it into chunks (none while a token's text is held back);
    /// after the last choice's end, the usage when asked and `[DONE]`.
    async fn next_event(&mut self) {
        if self.open == 0 {
            if self.q.request.stream_usage {
                let usage = self.chunk(vec![], Some(Usage::new(self.q.prompt_tokens, self.completion_tokens)));
                self.ready.push_back(usage);
            }
            self.ready.push_back(SseEvent::default().data("[DONE]"));
            self.ended = true;
            return;
        }
        match self.q.events.recv().await {
            Some(Event::Token { choice, id, logprob }) => {
                let tokenizer = &self.s.policy.tokenizer;
                let delta = self.texts[choice].push(id, tokenizer);
                let r = &self.q.request;
                if r.logprobs {
                    let token = tokenizer.decode(&[id]).unwrap_or_default();
                    let lp = ChoiceLogprobs { content: Some(vec![logprob_entry(&token, id, logprob, r.tokens_as_ids)]) };
                    let e = self.chunk(text_piece(choice, delta, Some(lp)), None);
                    self.ready.push_back(e);
                } else if !delta.is_empty() {
                    let e = self.chunk(text_piece(choice, delta, None), None);
                    self.ready.push_back(e);
                }
            }
            Some(Event::Done { choice, completion }) => {
                self.open -= 1;
                self.completion_tokens += completion.token_ids.len();
                let r = &self.q.request;
                let rest = self.texts[choice].finish(&final_text(&completion.text, &completion.finish_reason, r.include_stop));
                if !rest.is_empty() {
                    let e = self.chunk(text_piece(choice, rest, None), None);
                    self.ready.push_back(e);
                }
                let (finish, stop_reason) = finish_fields(&completion.finish_reason);
                let end =
                    ChunkChoice { index: choice, delta: Delta::default(), logprobs: None, finish_reason: Some(finish.into()), stop_reason: Some(stop_reason) };
                let e = self.chunk(vec![end], None);
                self.ready.push_back(e);
            }
            Some(Event::Failed(message)) => {
                self.ready.push_back(SseEvent::default().data(json_text(&ApiError::internal(message).body())));
                self.ended = true;
            }
            None => self.ended = true,
        }
    }
}
