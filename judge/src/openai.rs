//! The LLM judge: one chat-completions request per item to any OpenAI-compatible server, read strictly.
//!
//! async-openai builds and sends the request; its built-in retry layer (which also retries 429) is
//! replaced by a plain transport service that turns every non-2xx status into an error carrying the
//! status and body, so the retry policy here sees exactly what happened: 5xx, timeouts and
//! transport errors are retried with jittered exponential backoff, 4xx never.

use crate::cache::{CacheKey, VerdictCache};
use crate::error::http_hint;
use crate::spec::JudgeOptions;
use crate::{extract_answer, Judge, JudgeError, JudgeInput, Verdict, VerdictLabel};
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::types::chat::{ChatCompletionRequestUserMessage, CreateChatCompletionRequest};
use async_openai::Client;
use async_trait::async_trait;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Goes into every cache key; bump it whenever [`JUDGE_PROMPT`] or [`parse_verdict`] changes meaning.
pub const PROMPT_VERSION: &str = "v1";

/// The judge prompt, sent as the single user message. `{question}`, `{answers}` (aliases joined by
/// ` | `) and `{response}` are filled in one pass by [`build_prompt`].
pub const JUDGE_PROMPT: &str = "You are grading a response to a question against the gold answer(s).\n\
\n\
Question: {question}\n\
Gold answer(s): {answers}\n\
Response: {response}\n\
\n\
Is the response correct and coherent? Answer yes or no.";

/// The longest stretch of an error body kept in an error message.
const BODY_SNIPPET: usize = 400;

/// Fills [`JUDGE_PROMPT`]; placeholders inside the filled-in text are left alone.
pub fn build_prompt(question: &str, answers: &[String], response: &str) -> String {
    let answers = answers.join(" | ");
    let mut out = String::with_capacity(JUDGE_PROMPT.len() + question.len() + answers.len() + response.len());
    let mut rest = JUDGE_PROMPT;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let tail = &rest[open..];
        let filled = [("{question}", question), ("{answers}", answers.as_str()), ("{response}", response)].into_iter().find(|(name, _)| tail.starts_with(name));
        match filled {
            Some((name, value)) => {
                out.push_str(value);
                rest = &tail[name.len()..];
            }
            None => {
                out.push('{');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Reads a judge reply strictly: the first word decides.
///
/// Leading whitespace and markup (`*`, `"`, `#`, …) are skipped, and so is one leading
/// `<think>…</think>` block (reasoning models); then the first run of letters, lowercased, must be
/// `yes` (reward 1, `correct`) or `no` (reward 0, `incorrect`). Anything else ("The answer is yes",
/// "Yesterday", an empty reply) is `unparsable` with reward 0.
pub fn parse_verdict(reply: &str) -> (f32, VerdictLabel) {
    let mut text = reply.trim_start();
    if let Some(after_open) = text.strip_prefix("<think>") {
        match after_open.find("</think>") {
            Some(close) => text = &after_open[close + "</think>".len()..],
            None => return (0.0, VerdictLabel::Unparsable),
        }
    }
    let start = text.trim_start_matches(|c: char| !c.is_alphanumeric());
    let word: String = start.chars().take_while(|c| c.is_alphabetic()).flat_map(char::to_lowercase).collect();
    match word.as_str() {
        "yes" => (1.0, VerdictLabel::Correct),
        "no" => (0.0, VerdictLabel::Incorrect),
        _ => (0.0, VerdictLabel::Unparsable),
    }
}

/// Where and what to ask: the model, the server, the key, and the shared [`JudgeOptions`].
#[derive(Debug, Clone)]
pub struct OpenAiJudgeConfig {
    /// The model name as the server knows it (e.g. `qwen2.5:7b` for Ollama, `gpt-4o-mini`).
    pub model: String,
    /// The API base, usually ending in `/v1` (e.g. `http://localhost:11434/v1`).
    pub base_url: String,
    /// Bearer token; `None` sends an empty one, which local servers accept.
    pub api_key: Option<String>,
    /// Timeout, retries, concurrency, max tokens and the cache directory.
    pub options: JudgeOptions,
}

impl OpenAiJudgeConfig {
    /// A config with the key from the environment (see [`api_key_from_env`]) and default options.
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        OpenAiJudgeConfig { model: model.into(), base_url: base_url.into(), api_key: api_key_from_env(), options: JudgeOptions::default() }
    }
}

/// `AGENTRT_JUDGE_API_KEY`, else `OPENAI_API_KEY`, else none (fine for local servers).
pub fn api_key_from_env() -> Option<String> {
    ["AGENTRT_JUDGE_API_KEY", "OPENAI_API_KEY"]
        .into_iter()
        .filter_map(|name| std::env::var(name).ok())
        .map(|key| key.trim().to_string())
        .find(|key| !key.is_empty())
}

/// A status error raised by [`StatusService`] for every non-2xx reply.
#[derive(Debug)]
struct HttpStatusError {
    status: u16,
    body: String,
}

impl std::fmt::Display for HttpStatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.body)
    }
}

impl std::error::Error for HttpStatusError {}

/// The transport under async-openai: sends one request, no retries, non-2xx becomes an error.
#[derive(Clone)]
struct StatusService {
    client: reqwest::Client,
}

type ServiceFuture = Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send + 'static>>;

impl tower::Service<async_openai::middleware::HttpRequestFactory> for StatusService {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = ServiceFuture;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: async_openai::middleware::HttpRequestFactory) -> Self::Future {
        let client = self.client.clone();
        Box::pin(async move {
            let request = request.build().await?;
            let response = client.execute(request).await.map_err(OpenAIError::Reqwest)?;
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            let body = response.text().await.unwrap_or_default();
            Err(OpenAIError::Boxed(Box::new(HttpStatusError { status: status.as_u16(), body: snippet(&body) })))
        })
    }
}

fn snippet(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(BODY_SNIPPET) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// The full chain of an error's causes, `a: b: c` (reqwest hides the useful part in its sources).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// What one attempt ended in, before the retry policy decides.
enum AttemptError {
    Timeout,
    Status { status: u16, body: String },
    Transport(String),
    BadResponse(String),
    Client(String),
}

impl AttemptError {
    fn from_openai(error: OpenAIError) -> Self {
        match error {
            OpenAIError::Boxed(boxed) => match boxed.downcast::<HttpStatusError>() {
                Ok(status) => AttemptError::Status { status: status.status, body: status.body },
                Err(other) => AttemptError::Transport(error_chain(other.as_ref())),
            },
            OpenAIError::Reqwest(e) if e.is_timeout() => AttemptError::Timeout,
            OpenAIError::Reqwest(e) if e.is_builder() => AttemptError::Client(error_chain(&e)),
            OpenAIError::Reqwest(e) => AttemptError::Transport(error_chain(&e)),
            OpenAIError::ApiError(api) => AttemptError::Status { status: api.status_code.as_u16(), body: snippet(&api.api_error.to_string()) },
            OpenAIError::JSONDeserialize(e, body) => AttemptError::BadResponse(format!("{e}; body: {}", snippet(&body))),
            OpenAIError::InvalidArgument(message) => AttemptError::Client(message),
            other => AttemptError::BadResponse(error_chain(&other)),
        }
    }

    fn is_transient(&self) -> bool {
        match self {
            AttemptError::Timeout | AttemptError::Transport(_) => true,
            AttemptError::Status { status, .. } => *status >= 500,
            AttemptError::BadResponse(_) | AttemptError::Client(_) => false,
        }
    }

    fn into_judge_error(self, endpoint: &str, timeout: Duration, attempts: u32) -> JudgeError {
        let endpoint = endpoint.to_string();
        match self {
            AttemptError::Timeout => JudgeError::Timeout { endpoint, timeout, attempts },
            AttemptError::Status { status, body } => JudgeError::Http { endpoint, status, body, attempts, hint: http_hint(status) },
            AttemptError::Transport(message) => JudgeError::Connection { endpoint, message, attempts },
            AttemptError::BadResponse(message) => JudgeError::BadResponse { endpoint, message },
            AttemptError::Client(message) => JudgeError::Client { endpoint, message },
        }
    }
}

/// True when `base_url`'s host is loopback (`localhost`, `127.x.x.x`, `[::1]`): such requests skip
/// any `HTTP_PROXY`-style proxy.
fn is_loopback(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else { return false };
    let Some(host) = url.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The LLM judge over an OpenAI-compatible chat-completions endpoint.
pub struct OpenAiJudge {
    client: Client<OpenAIConfig>,
    model: String,
    base_url: String,
    endpoint: String,
    options: JudgeOptions,
    cache: Option<VerdictCache>,
    permits: Option<Arc<Semaphore>>,
}

impl std::fmt::Debug for OpenAiJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiJudge").field("model", &self.model).field("endpoint", &self.endpoint).field("options", &self.options).finish_non_exhaustive()
    }
}

impl OpenAiJudge {
    /// Builds the judge: checks the URL, opens the cache, sets up the HTTP client. Sends nothing.
    pub fn new(config: OpenAiJudgeConfig) -> Result<Self, JudgeError> {
        let OpenAiJudgeConfig { model, base_url, api_key, options } = config;
        let base_url = base_url.trim().trim_end_matches('/').to_string();
        let endpoint = format!("{base_url}/chat/completions");
        let spec = format!("openai:{model}@{base_url}");
        if model.trim().is_empty() {
            return Err(JudgeError::InvalidSpec { spec, reason: "the model name is empty".into() });
        }
        match reqwest::Url::parse(&base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
            _ => return Err(JudgeError::InvalidSpec { spec, reason: format!("{base_url:?} is not an http(s) URL") }),
        }
        let api_key = api_key.unwrap_or_default();
        if api_key.chars().any(|c| !(' '..='~').contains(&c)) {
            return Err(JudgeError::Client { endpoint, message: "the API key holds characters that cannot go in an HTTP header".into() });
        }
        let cache = match &options.cache_dir {
            Some(dir) => Some(VerdictCache::open(dir)?),
            None => None,
        };

        // reqwest's rustls needs a process-wide crypto provider; install ring unless one is there.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut builder = reqwest::Client::builder().connect_timeout(options.timeout.min(Duration::from_secs(10)));
        if is_loopback(&base_url) {
            builder = builder.no_proxy();
        }
        let http = builder.build().map_err(|e| JudgeError::Client { endpoint: endpoint.clone(), message: error_chain(&e) })?;
        let openai_config = OpenAIConfig::new().with_api_base(base_url.clone()).with_api_key(api_key).with_org_id("").with_project_id("");
        let client = Client::build(http.clone(), openai_config).with_http_service(StatusService { client: http });
        let permits = (options.max_concurrency > 0).then(|| Arc::new(Semaphore::new(options.max_concurrency)));
        Ok(OpenAiJudge { client, model, base_url, endpoint, options, cache, permits })
    }

    /// The chat-completions URL this judge posts to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The cache key for `item` under this judge.
    pub fn cache_key(&self, item: &JudgeInput) -> CacheKey {
        CacheKey {
            model: self.model.clone(),
            prompt_version: PROMPT_VERSION.to_string(),
            question: item.question.clone(),
            answers: item.answers.clone(),
            response: extract_answer(&item.response).to_string(),
        }
    }

    #[allow(deprecated)] // `max_tokens`: what Ollama, vLLM and llama.cpp's server all read.
    fn request(&self, prompt: String) -> CreateChatCompletionRequest {
        CreateChatCompletionRequest {
            model: self.model.clone(),
            messages: vec![ChatCompletionRequestUserMessage::from(prompt).into()],
            temperature: Some(0.0),
            max_tokens: Some(self.options.max_tokens),
            stream: Some(false),
            ..Default::default()
        }
    }

    async fn attempt(&self, request: &CreateChatCompletionRequest) -> Result<String, AttemptError> {
        let chat = self.client.chat();
        let call = chat.create_byot::<_, serde_json::Value>(request);
        let reply = match tokio::time::timeout(self.options.timeout, call).await {
            Err(_elapsed) => return Err(AttemptError::Timeout),
            Ok(Err(e)) => return Err(AttemptError::from_openai(e)),
            Ok(Ok(reply)) => reply,
        };
        let message = reply
            .get("choices")
            .and_then(|c| c.get(0))
            .and_then(|c| c.get("message"))
            .ok_or_else(|| AttemptError::BadResponse(format!("no choices[0].message in {}", snippet(&reply.to_string()))))?;
        Ok(message.get("content").and_then(|c| c.as_str()).unwrap_or_default().to_string())
    }

    /// Exponential backoff from `backoff_base`, capped at 30 s, with the delay drawn uniformly from
    /// its upper half so parallel clients do not retry in step.
    fn backoff(&self, failed_attempts: u32) -> Duration {
        let exp = 2u32.saturating_pow(failed_attempts.saturating_sub(1));
        let full = self.options.backoff_base.saturating_mul(exp).min(Duration::from_secs(30));
        full.mul_f64(0.5 + 0.5 * fastrand::f64())
    }

    async fn ask(&self, prompt: String) -> Result<String, JudgeError> {
        let request = self.request(prompt);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            match self.attempt(&request).await {
                Ok(reply) => return Ok(reply),
                Err(e) if e.is_transient() && attempts <= self.options.max_retries => {
                    tokio::time::sleep(self.backoff(attempts)).await;
                }
                Err(e) => return Err(e.into_judge_error(&self.endpoint, self.options.timeout, attempts)),
            }
        }
    }
}

#[async_trait]
impl Judge for OpenAiJudge {
    fn name(&self) -> String {
        format!("openai:{}@{}", self.model, self.base_url)
    }

    async fn judge(&self, item: &JudgeInput) -> Result<Verdict, JudgeError> {
        if item.answers.is_empty() {
            return Err(JudgeError::InvalidInput("no gold answers were given".into()));
        }
        let key = self.cache_key(item);
        if let Some(verdict) = self.cache.as_ref().and_then(|c| c.get(&key)) {
            return Ok(verdict);
        }
        let _permit = match &self.permits {
            Some(sem) => Some(
                sem.acquire()
                    .await
                    .map_err(|_| JudgeError::Client { endpoint: self.endpoint.clone(), message: "the judge's concurrency limiter was closed".into() })?,
            ),
            None => None,
        };
        let prompt = build_prompt(&key.question, &key.answers, &key.response);
        let raw = self.ask(prompt).await?;
        let (reward, label) = parse_verdict(&raw);
        let verdict = Verdict { reward, label, raw };
        if let Some(cache) = &self.cache {
            cache.put(&key, &verdict)?;
        }
        Ok(verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_word_decides() {
        let cases = [
            ("Yes.", VerdictLabel::Correct),
            ("yes", VerdictLabel::Correct),
            ("  YES, it matches", VerdictLabel::Correct),
            ("**Yes**", VerdictLabel::Correct),
            ("no", VerdictLabel::Incorrect),
            ("No. The response names another team.", VerdictLabel::Incorrect),
            ("<think>hmm, Denver</think>\nYes", VerdictLabel::Correct),
            ("The answer is yes", VerdictLabel::Unparsable),
            ("Yesterday", VerdictLabel::Unparsable),
            ("nope", VerdictLabel::Unparsable),
            ("", VerdictLabel::Unparsable),
            ("<think>unfinished", VerdictLabel::Unparsable),
            ("%$#@!", VerdictLabel::Unparsable),
            ("1. yes", VerdictLabel::Unparsable),
        ];
        for (reply, label) in cases {
            let (reward, got) = parse_verdict(reply);
            assert_eq!(got, label, "{reply:?}");
            assert_eq!(reward, if label == VerdictLabel::Correct { 1.0 } else { 0.0 });
        }
    }

    #[test]
    fn prompt_fills_each_placeholder_once() {
        let p = build_prompt("Who {answers}?", &["A".into(), "B".into()], "{question}");
        assert!(p.contains("Question: Who {answers}?\n"), "{p}");
        assert!(p.contains("Gold answer(s): A | B\n"), "{p}");
        assert!(p.contains("Response: {question}\n"), "{p}");
        assert!(p.ends_with("Answer yes or no."));
    }

    #[test]
    fn loopback_detection() {
        assert!(is_loopback("http://localhost:11434/v1"));
        assert!(is_loopback("http://127.0.0.1:8000/v1"));
        assert!(is_loopback("http://[::1]:8000/v1"));
        assert!(!is_loopback("https://api.openai.com/v1"));
        assert!(!is_loopback("not a url"));
    }
}
