//! `agentrt serve`: the candle policy behind an OpenAI-compatible HTTP API, so that a trained agent is usable
//! from any client that speaks it, and training can sample on servers that load each step's adapter.
//!
//! Design, in three parts:
//!
//! * **Who asks** ([`http`], [`protocol`]): axum routes `/v1/chat/completions` (streamed as server-sent
//!   events or not, with `logprobs`), `/v1/models`, and vLLM's dynamic LoRA endpoints
//!   `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`. A request is checked and rendered with the
//!   model's own chat template before anything is queued; a bad one gets an OpenAI-shaped error (`400` with a
//!   message naming the field, `404` for an unknown model), never a panic, and a log line. The LoRA
//!   endpoints refuse (`403`) unless the server allows runtime loading ([`ServeConfig::allow_runtime_lora`],
//!   within [`ServeConfig::lora_root`]). A connection whose reply waits past [`ServeConfig::write_timeout`]
//!   for its client to read is closed ([`write_timeout`]).
//! * **Who samples** ([`engine`]): one thread owns the model and runs every decoding step over one
//!   [`agentrt_policy::ContinuousBatch`], as vLLM schedules: a request joins at the next step and leaves the
//!   step it ends (`max_num_seqs` at once); a step reads at most `max_num_batched_tokens`, so long prompts are
//!   read in chunks beside the others' decoding; requests for different adapters decode in the same forward.
//!   Each choice has its own settings and seeded random stream, so a request's tokens do not depend on what
//!   it ran beside (up to float rounding). A sequence whose client has gone is dropped at its next token.
//! * **Who receives** ([`text_stream`]): each choice's tokens become text as they come, holding back a
//!   partial UTF-8 character and any tail that could still become a stop string, so that a streamed reply
//!   concatenates to exactly the non-streamed one.
//!
//! Adapters are served by name, as vLLM names LoRA modules: the request's `model` is the base model's name
//! or an adapter's. An adapter's `agent.json` (how it was trained to play) is listed with it in
//! `/v1/models`, as JSON the server passes on without reading it. Nothing here knows about the sandbox,
//! episodes or training.

pub mod engine;
pub mod http;
pub mod protocol;
pub mod text_stream;
pub mod write_timeout;

pub use engine::{EngineStats, ServeConfig, DEFAULT_WRITE_TIMEOUT_S};
pub use http::{router, ServerState, AGENT_FILE};

use std::path::PathBuf;

/// What can go wrong setting a server up.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// An adapter to serve could not be loaded, or does not fit the base model.
    #[error("adapter `{name}` from {}", path.display())]
    Adapter {
        /// The name it was to be served under.
        name: String,
        /// The path given: a PEFT directory, a dual `retain/` + `forget/` one, or a checkpoint.
        path: PathBuf,
        /// Why loading failed.
        source: Box<agentrt_policy::PolicyError>,
    },
    /// An adapter's `agent.json` is there but cannot be passed on to clients.
    #[error("{}: {reason}", path.display())]
    AgentFile {
        /// The file.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// An adapter's name is already served (and not to be replaced) or is the base model's.
    #[error("adapter name `{0}` is given twice (or is the base model's name)")]
    DuplicateName(String),
    /// A setting does not fit the model (e.g. `--max-model-len` past its context).
    #[error("{0}")]
    Config(String),
    /// The HTTP server stopped with an I/O error.
    #[error("serving HTTP")]
    Serve(#[source] std::io::Error),
}
