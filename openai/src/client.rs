//! The one HTTP client for OpenAI-compatible servers: every request the judge and the `openai:` policy send
//! goes through [`Client::post`] (or, for the models list, [`Client::models`]), with the same retries.
//!
//! Each attempt is one POST under a timeout that covers the whole exchange (connecting, sending, reading the
//! body). A non-2xx status is an error carrying the status and the start of the body, so the retry policy
//! sees exactly what happened: timeouts, transport errors and 5xx are retried with jittered exponential
//! backoff, 4xx never (a bad key or a rate limit does not get better by asking again at once), and neither is
//! a reply that is not the JSON asked for.

use crate::wire::{
    ChatCompletion, ChatCompletionRequest, LoadLoraAdapter, ModelList, UnloadLoraAdapter, CHAT_COMPLETIONS_PATH, LOAD_LORA_ADAPTER_PATH, MODELS_PATH,
    UNLOAD_LORA_ADAPTER_PATH,
};
use serde::Serialize;
use std::time::Duration;

/// Where [`api_key_from_env`] looks, first to last.
pub const API_KEY_VARIABLES: [&str; 2] = ["AGENTRT_JUDGE_API_KEY", "OPENAI_API_KEY"];

/// The cap on one backoff delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The longest opening a connection may take (the request's timeout when that is shorter): a server that is
/// down is reported in seconds, not after a slow model's whole timeout.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most characters of a reply's body an error message quotes.
pub const BODY_SNIPPET_CHARS: usize = 400;

/// The first of [`API_KEY_VARIABLES`] that is set and not blank, trimmed; none is fine for local servers.
pub fn api_key_from_env() -> Option<String> {
    API_KEY_VARIABLES.into_iter().filter_map(|name| std::env::var(name).ok()).map(|key| key.trim().to_string()).find(|key| !key.is_empty())
}

/// Installs rustls's ring provider as the process's default unless one is there: reqwest is built without a
/// provider of its own (`rustls-no-provider`) and cannot build a client until one is installed.
pub fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // An error here means another thread installed a provider in between: that one serves as well.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

/// True when `base_url`'s host is loopback (`localhost`, `127.x.x.x`, `[::1]`): requests there skip any
/// `HTTP_PROXY`-style proxy, which could not reach this machine's loopback anyway.
pub fn is_loopback(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else { return false };
    let Some(host) = url.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The start of a reply's body as error messages quote it: trimmed, at most [`BODY_SNIPPET_CHARS`]
/// characters, `…` where it was cut.
pub fn body_snippet(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(BODY_SNIPPET_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// The full chain of an error's causes, `a: b: c` (reqwest keeps the useful part, e.g. "Connection
/// refused", in its sources).
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

/// How often a failed request is sent again, and how long to wait in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts after the first, for timeouts, connection errors and 5xx only.
    pub max_retries: u32,
    /// The first delay; doubled per retry, capped at [`MAX_BACKOFF`], jittered.
    pub backoff_base: Duration,
}

impl Retry {
    /// One attempt, no retries.
    pub const NEVER: Retry = Retry { max_retries: 0, backoff_base: Duration::ZERO };

    /// The delay after `failed_attempts` failures: exponential from `backoff_base`, capped at
    /// [`MAX_BACKOFF`], drawn uniformly from its upper half so that parallel clients do not retry in step.
    pub fn backoff(&self, failed_attempts: u32) -> Duration {
        let exp = 2u32.saturating_pow(failed_attempts.saturating_sub(1));
        let full = self.backoff_base.saturating_mul(exp).min(MAX_BACKOFF);
        full.mul_f64(0.5 + 0.5 * fastrand::f64())
    }
}

/// Which server to ask and how.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The API base, usually ending in `/v1` (e.g. `http://localhost:11434/v1`); a trailing `/` is dropped.
    pub base_url: String,
    /// Sent as `Authorization: Bearer KEY` when present and not empty; local servers need none.
    pub api_key: Option<String>,
    /// How long one attempt may take, from connecting to the end of the reply's body.
    pub timeout: Duration,
    /// What is retried, and when.
    pub retry: Retry,
}

/// Why a request got no usable reply. Every variant names the URL it was sent to (the API base, for a base
/// that is not a URL).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The API base is not an http(s) URL with a host.
    #[error("{base_url:?} is not an http(s) URL with a host")]
    InvalidBaseUrl {
        /// The API base as given.
        base_url: String,
    },
    /// The request could not be made: the HTTP client or the request could not be built.
    #[error("{endpoint} could not be asked: {message}")]
    Client {
        /// The URL the request was for.
        endpoint: String,
        /// What failed.
        message: String,
    },
    /// Every attempt ran past the timeout.
    #[error("{endpoint} did not answer within {timeout:?} ({attempts} attempt(s))")]
    Timeout {
        /// The URL asked.
        endpoint: String,
        /// The per-attempt timeout.
        timeout: Duration,
        /// How many requests were sent.
        attempts: u32,
    },
    /// The server could not be reached (refused, DNS, TLS, reset) on the last attempt.
    #[error("{endpoint} could not be reached ({attempts} attempt(s)): {message}")]
    Connection {
        /// The URL asked.
        endpoint: String,
        /// The transport error, with its causes.
        message: String,
        /// How many requests were sent.
        attempts: u32,
    },
    /// The server answered with an HTTP error status (4xx at once, 5xx after the last retry).
    #[error("{endpoint} answered HTTP {status} ({attempts} attempt(s)): {body}")]
    Http {
        /// The URL asked.
        endpoint: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the body ([`body_snippet`]): servers put the reason there.
        body: String,
        /// How many requests were sent.
        attempts: u32,
    },
    /// The server answered 2xx with something that is not what was asked for.
    #[error("{endpoint} sent a reply that is not {expected}: {message}")]
    BadResponse {
        /// The URL asked.
        endpoint: String,
        /// What was asked for: `a chat completion`, `a models list`.
        expected: &'static str,
        /// What is wrong, with the start of the body.
        message: String,
    },
}

impl ClientError {
    /// The URL the request was sent to (the API base for [`ClientError::InvalidBaseUrl`]).
    pub fn endpoint(&self) -> &str {
        match self {
            ClientError::InvalidBaseUrl { base_url } => base_url,
            ClientError::Client { endpoint, .. }
            | ClientError::Timeout { endpoint, .. }
            | ClientError::Connection { endpoint, .. }
            | ClientError::Http { endpoint, .. }
            | ClientError::BadResponse { endpoint, .. } => endpoint,
        }
    }

    /// The message without the endpoint in front (`answered HTTP 503 (1 attempt(s)): overloaded`), for an
    /// error of the caller's that names the endpoint itself.
    pub fn reason(&self) -> String {
        let message = self.to_string();
        match message.strip_prefix(self.endpoint()) {
            Some(rest) => rest.trim_start().to_string(),
            None => message,
        }
    }

    /// True for what another attempt might not repeat: timeouts, connection errors, 5xx.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Timeout { .. } | ClientError::Connection { .. } => true,
            ClientError::Http { status, .. } => *status >= 500,
            ClientError::InvalidBaseUrl { .. } | ClientError::Client { .. } | ClientError::BadResponse { .. } => false,
        }
    }
}

/// What one attempt ended in, before the retry policy decides.
enum Failure {
    Timeout,
    Status { status: u16, body: String },
    Transport(String),
    Request(String),
}

impl Failure {
    fn from_reqwest(error: reqwest::Error) -> Failure {
        if error.is_timeout() {
            Failure::Timeout
        } else if error.is_builder() {
            Failure::Request(error_chain(&error))
        } else {
            Failure::Transport(error_chain(&error))
        }
    }

    fn is_transient(&self) -> bool {
        match self {
            Failure::Timeout | Failure::Transport(_) => true,
            Failure::Status { status, .. } => *status >= 500,
            Failure::Request(_) => false,
        }
    }

    fn into_error(self, endpoint: String, timeout: Duration, attempts: u32) -> ClientError {
        match self {
            Failure::Timeout => ClientError::Timeout { endpoint, timeout, attempts },
            Failure::Status { status, body } => ClientError::Http { endpoint, status, body, attempts },
            Failure::Transport(message) => ClientError::Connection { endpoint, message, attempts },
            Failure::Request(message) => ClientError::Client { endpoint, message },
        }
    }
}

/// A client of one OpenAI-compatible server. Cheap to share: requests may run concurrently.
pub struct Client {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    timeout: Duration,
    retry: Retry,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself: clients end up in logs.
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

impl Client {
    /// Checks the base URL and the key and sets up the HTTP client; sends nothing. A loopback server is
    /// asked directly whatever `HTTP_PROXY` and the like say; any other goes through them.
    pub fn new(config: ClientConfig) -> Result<Client, ClientError> {
        let ClientConfig { base_url, api_key, timeout, retry } = config;
        let given = base_url;
        let base_url = given.trim().trim_end_matches('/').to_string();
        match reqwest::Url::parse(&base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
            _ => return Err(ClientError::InvalidBaseUrl { base_url: given }),
        }
        let api_key = api_key.filter(|key| !key.is_empty());
        if api_key.as_deref().is_some_and(|key| key.chars().any(|c| !(' '..='~').contains(&c))) {
            return Err(ClientError::Client { endpoint: base_url, message: "the API key holds characters that cannot go in an HTTP header".into() });
        }
        install_crypto_provider();
        let mut builder = reqwest::Client::builder().connect_timeout(timeout.min(MAX_CONNECT_TIMEOUT));
        if is_loopback(&base_url) {
            builder = builder.no_proxy();
        }
        let http = builder.build().map_err(|e| ClientError::Client { endpoint: base_url.clone(), message: error_chain(&e) })?;
        Ok(Client { http, base_url, api_key, timeout, retry })
    }

    /// The API base, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The URL of `path` (e.g. [`CHAT_COMPLETIONS_PATH`]) under the API base.
    pub fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// Asks for a chat completion and reads it ([`ChatCompletion`]).
    pub async fn chat_completion(&self, request: &ChatCompletionRequest) -> Result<ChatCompletion, ClientError> {
        let text = self.post(CHAT_COMPLETIONS_PATH, request).await?;
        serde_json::from_str(&text).map_err(|e| ClientError::BadResponse {
            endpoint: self.endpoint(CHAT_COMPLETIONS_PATH),
            expected: "a chat completion",
            message: format!("{e}; body: {}", body_snippet(&text)),
        })
    }

    /// The models the server lists (`GET /v1/models`), with their cards' fields; retried as a POST is.
    pub async fn models(&self) -> Result<ModelList, ClientError> {
        let endpoint = self.endpoint(MODELS_PATH);
        let text = self.send(&endpoint, None).await?;
        serde_json::from_str(&text).map_err(|e| ClientError::BadResponse {
            endpoint,
            expected: "a models list",
            message: format!("{e}; body: {}", body_snippet(&text)),
        })
    }

    /// Loads a LoRA adapter on the server (vLLM's `POST /v1/load_lora_adapter`); returns the server's
    /// reply, a line of text.
    pub async fn load_lora_adapter(&self, request: &LoadLoraAdapter) -> Result<String, ClientError> {
        self.post(LOAD_LORA_ADAPTER_PATH, request).await
    }

    /// Unloads a LoRA adapter from the server (`POST /v1/unload_lora_adapter`); returns the server's reply.
    pub async fn unload_lora_adapter(&self, request: &UnloadLoraAdapter) -> Result<String, ClientError> {
        self.post(UNLOAD_LORA_ADAPTER_PATH, request).await
    }

    /// POSTs `body` as JSON to `path` under the API base, retrying as [`Retry`] says; returns the body of
    /// the 2xx reply.
    pub async fn post(&self, path: &str, body: &impl Serialize) -> Result<String, ClientError> {
        let endpoint = self.endpoint(path);
        let body = serde_json::to_vec(body)
            .map_err(|e| ClientError::Client { endpoint: endpoint.clone(), message: format!("the request could not be written as JSON: {e}") })?;
        self.send(&endpoint, Some(body.as_slice())).await
    }

    /// Sends a POST of `body` (a GET without one) to `endpoint`, retrying as [`Retry`] says; returns the
    /// body of the 2xx reply.
    async fn send(&self, endpoint: &str, body: Option<&[u8]>) -> Result<String, ClientError> {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            match self.attempt(endpoint, body).await {
                Ok(text) => return Ok(text),
                Err(failure) if failure.is_transient() && attempts <= self.retry.max_retries => tokio::time::sleep(self.retry.backoff(attempts)).await,
                Err(failure) => return Err(failure.into_error(endpoint.to_string(), self.timeout, attempts)),
            }
        }
    }

    async fn attempt(&self, endpoint: &str, body: Option<&[u8]>) -> Result<String, Failure> {
        let mut request = match body {
            Some(body) => self.http.post(endpoint).header(reqwest::header::CONTENT_TYPE, "application/json").body(body.to_vec()),
            None => self.http.get(endpoint),
        };
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let exchange = async {
            let response = request.send().await.map_err(Failure::from_reqwest)?;
            let status = response.status();
            if !status.is_success() {
                // The status is the error; a body that cannot be read only leaves the message shorter.
                let body = response.text().await.unwrap_or_default();
                return Err(Failure::Status { status: status.as_u16(), body: body_snippet(&body) });
            }
            response.text().await.map_err(Failure::from_reqwest)
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(outcome) => outcome,
            Err(_elapsed) => Err(Failure::Timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_detection() {
        assert!(is_loopback("http://localhost:11434/v1"));
        assert!(is_loopback("http://127.0.0.1:8000/v1"));
        assert!(is_loopback("http://[::1]:8000/v1"));
        assert!(!is_loopback("https://api.openai.com/v1"));
        assert!(!is_loopback("http://10.0.0.5:8000/v1"));
        assert!(!is_loopback("not a url"));
    }

    #[test]
    fn snippets_are_trimmed_and_cut() {
        assert_eq!(body_snippet("  short \n"), "short");
        let long = "é".repeat(BODY_SNIPPET_CHARS + 5);
        let cut = body_snippet(&long);
        assert_eq!(cut.chars().count(), BODY_SNIPPET_CHARS + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn backoff_doubles_within_its_jitter_and_is_capped() {
        let retry = Retry { max_retries: 10, backoff_base: Duration::from_millis(100) };
        for (failed, full) in [(1, 100), (2, 200), (3, 400)] {
            let delay = retry.backoff(failed);
            assert!(delay >= Duration::from_millis(full / 2) && delay <= Duration::from_millis(full), "after {failed}: {delay:?}");
        }
        assert!(retry.backoff(30) <= MAX_BACKOFF);
    }

    #[test]
    fn bad_base_urls_and_keys_are_refused_before_anything_is_sent() {
        let config = |base_url: &str, api_key: Option<&str>| ClientConfig {
            base_url: base_url.into(),
            api_key: api_key.map(str::to_string),
            timeout: Duration::from_secs(1),
            retry: Retry::NEVER,
        };
        for bad in ["ftp://x/v1", "localhost:8000/v1", "http://", ""] {
            let err = Client::new(config(bad, None)).unwrap_err();
            assert!(matches!(err, ClientError::InvalidBaseUrl { .. }), "{bad:?}: {err:?}");
        }
        let err = Client::new(config("http://127.0.0.1:1/v1", Some("sk-\nbad"))).unwrap_err();
        assert!(matches!(err, ClientError::Client { .. }) && err.to_string().contains("API key"), "{err}");
        let client = Client::new(config(" http://127.0.0.1:1/v1/ ", Some("sk-secret"))).unwrap();
        assert_eq!(client.endpoint(CHAT_COMPLETIONS_PATH), "http://127.0.0.1:1/v1/chat/completions");
        assert!(!format!("{client:?}").contains("sk-secret"));
    }

    #[test]
    fn the_reason_is_the_message_without_the_endpoint() {
        let err = ClientError::Http { endpoint: "http://h/v1/chat/completions".into(), status: 503, body: "overloaded".into(), attempts: 2 };
        assert_eq!(err.to_string(), "http://h/v1/chat/completions answered HTTP 503 (2 attempt(s)): overloaded");
        assert_eq!(err.reason(), "answered HTTP 503 (2 attempt(s)): overloaded");
    }
}
