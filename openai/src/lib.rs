//! The OpenAI chat-completions protocol, in one place: its JSON and the one client that speaks it.
//!
//! The design in two parts:
//! - **what crosses the wire** ([`wire`]): the request, the whole and streamed replies, the error body and
//!   vLLM's LoRA endpoints' bodies, as serde types. `agentrt serve` writes its replies with them and the
//!   client reads replies with them, so server and clients agree by construction.
//! - **who asks** ([`Client`], the `client` feature, on by default): one API base, a bearer key (by default
//!   from `AGENTRT_JUDGE_API_KEY`, else `OPENAI_API_KEY`: [`api_key_from_env`]), rustls with the ring
//!   provider installed once per process, a per-attempt timeout, retries with jittered exponential backoff
//!   for what another attempt may fix (timeouts, connection errors, 5xx; never 4xx or an unreadable
//!   reply), and a [`ClientError`] that names the endpoint. The LLM judge (`agentrt_judge`) and the
//!   `openai:` policy (`agentrt_rollout`) both send their requests through it.
//!
//! The server takes this crate without the `client` feature: it needs the types, not an HTTP client.

pub mod wire;

#[cfg(feature = "client")]
mod client;

#[cfg(feature = "loopback-server")]
pub mod loopback_server;

#[cfg(feature = "client")]
pub use client::{
    api_key_from_env, body_snippet, install_crypto_provider, is_loopback, Client, ClientConfig, ClientError, Retry, API_KEY_VARIABLES, BODY_SNIPPET_CHARS,
    MAX_BACKOFF, MAX_CONNECT_TIMEOUT,
};
