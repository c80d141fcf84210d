//! `agentrt serve`: a model and any number of adapters behind an OpenAI-compatible API (see the
//! `agentrt-serve` crate).

use crate::inference_options::{InferenceOptions, LoadedModel};
use agentrt_serve::{ServeConfig, ServerState};
use anyhow::Context;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `agentrt serve`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    agentrt serve --adapter models/smollm2-135m-wiki-read\n  \
    agentrt serve --adapter wiki=models/smollm2-135m-wiki-read --adapter step4=runs/x/checkpoint-4 --port 8001\n\n\
    then, from any OpenAI client:\n  \
    curl http://127.0.0.1:8000/v1/chat/completions -H 'content-type: application/json' \\\n    \
    -d '{\"model\": \"smollm2-135m-wiki-read\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"temperature\": 0}'\n  \
    agentrt eval --policy openai:smollm2-135m-wiki-read@http://127.0.0.1:8000/v1\n\n\
    A request's `model` picks the base model (--served-model-name) or an adapter by name, as vLLM names LoRA\n\
    modules. Routes: /v1/chat/completions (stream, logprobs, n, seed, stop, top_k), /v1/models,\n\
    /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's dynamic LoRA API: {\"lora_name\", \"lora_path\"};\n\
    only with --allow-runtime-lora, which `agentrt train` on servers needs),\n\
    /health (with the engine's counters). A request joins the running batch at the next decoding step and\n\
    leaves it when it ends; requests for different adapters decode together. Each request is logged when it\n\
    ends (id, model, tokens, time to first token, total). An adapter's agent.json is listed with it in\n\
    /v1/models, and `agentrt eval --policy openai:NAME@URL` plays it by that unless --agent-settings says\n\
    otherwise. The server binds loopback unless --host says otherwise; give it an --api-key before it\n\
    listens beyond.")]
pub struct Args {
    /// An adapter to serve, `NAME=PATH` or `PATH` (named after its directory): a checkpoint of `agentrt
    /// train` / `sft`, a copy of one (`models/...`), or a PEFT adapter directory. Repeat for several.
    #[arg(long)]
    pub adapter: Vec<String>,
    /// The name the base model answers to. Default: the --model value.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind (0: any free port; the address is printed).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Sequences (request choices) decoding together at most, as vLLM's flag; later requests wait for a
    /// slot.
    #[arg(long, default_value_t = ServeConfig::default().max_num_seqs)]
    pub max_num_seqs: usize,
    /// Tokens one decoding step reads at most, as vLLM's flag: every decoding sequence's next token, then
    /// prompts in chunks of what is left (the shortest first), so a long prompt delays the others by about a
    /// step, not by its whole reading.
    #[arg(long, default_value_t = ServeConfig::default().max_num_batched_tokens)]
    pub max_num_batched_tokens: usize,
    /// Prompt plus `max_tokens` a request may ask for, as vLLM's flag; longer requests get a 400. Default:
    /// the model's context.
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// Clients must send `Authorization: Bearer KEY` on every /v1 route (vLLM's flag; `/health` stays
    /// open). Also read from $AGENTRT_API_KEY. Set one before listening beyond loopback.
    #[arg(long, env = "AGENTRT_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// MiB of keys and values kept from ended requests of the base model, so a later prompt that starts
    /// alike (a shared system prompt, a conversation's next turn) is read only past them; the least recently
    /// used go first. 0 turns the cache off. (Requests for an adapter do not use it.)
    #[arg(long, default_value_t = ServeConfig::default().prefix_cache_bytes >> 20)]
    pub prefix_cache_mib: usize,
    /// `invariant`: a request's arithmetic is its own, so its tokens and log-probs at temperature 0 (or with
    /// a seed) do not depend on the other requests it is batched with, on how its prompt is cut into steps
    /// or on the prefix cache. `fastest`: long prompts by the general matrix product, and requests that share
    /// a cached prefix read it once between them; replies then change with the batch by float rounding.
    /// bench/serve_results.md measures the difference.
    #[arg(long, default_value = "invariant")]
    pub batching: agentrt_policy::Batching,
    /// Let clients load and unload adapters by path (/v1/load_lora_adapter, /v1/unload_lora_adapter, vLLM's
    /// dynamic LoRA API, which `agentrt train --set rollout.sampler=openai:...` uses), as vLLM's
    /// VLLM_ALLOW_RUNTIME_LORA_UPDATING does. Off by default: those routes answer 403, since a client that
    /// may load a path learns what exists on the server's filesystem. Also read from
    /// $AGENTRT_ALLOW_RUNTIME_LORA (1 or true).
    #[arg(long, env = "AGENTRT_ALLOW_RUNTIME_LORA", value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_runtime_lora: bool,
    /// With --allow-runtime-lora: a loaded `lora_path` must lie under DIR once symlinks are resolved (a
    /// relative one is read under DIR); others get a 403.
    #[arg(long, value_name = "DIR", requires = "allow_runtime_lora")]
    pub lora_root: Option<PathBuf>,
    /// Seconds a reply may wait for its client to take its bytes, as llama-server's --timeout: a connection
    /// whose writes make no progress for this long (a client that does not read) is closed, which cancels its
    /// request and frees what it held. 0: no limit.
    #[arg(long, default_value_t = agentrt_serve::DEFAULT_WRITE_TIMEOUT_S)]
    pub timeout_s: u64,
    #[command(flatten)]
    pub inference: InferenceOptions,
}

/// `NAME=PATH` or `PATH` (named after the directory).
fn named_adapter(spec: &str) -> anyhow::Result<(String, PathBuf)> {
    if let Some((name, path)) = spec.split_once('=') {
        anyhow::ensure!(!name.trim().is_empty() && !path.trim().is_empty(), "--adapter {spec:?}: expected NAME=PATH or PATH");
        return Ok((name.trim().to_string(), PathBuf::from(path.trim())));
    }
    let path = PathBuf::from(spec);
    let name = path
        .canonicalize()
        .with_context(|| format!("--adapter {spec:?}"))?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| anyhow::anyhow!("--adapter {spec:?}: name it, NAME=PATH"))?;
    Ok((name, path))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let adapters: Vec<(String, PathBuf)> = args.adapter.iter().map(|s| named_adapter(s)).collect::<anyhow::Result<_>>()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // The port first: a port in use is said before the model and adapters spend their seconds loading.
    let addr = format!("{}:{}", args.host, args.port);
    let listener = runtime.block_on(listen(&addr)).map_err(|e| {
        let hint =
            if e.kind() == std::io::ErrorKind::AddrInUse { ": another process listens there; choose another --port, or --port 0 for any free one" } else { "" };
        anyhow::anyhow!("binding {addr}: {e}{hint}")
    })?;
    let LoadedModel { mut policy, name: model, .. } = args.inference.load(adapters.first().map(|(_, path)| path.as_path()))?;
    policy.decoder.batching = args.batching;
    let base_name = args.served_model_name.clone().unwrap_or_else(|| model.clone());
    let config = ServeConfig {
        max_num_seqs: args.max_num_seqs,
        max_num_batched_tokens: args.max_num_batched_tokens,
        max_model_len: args.max_model_len,
        api_key: args.api_key.clone(),
        prefix_cache_bytes: args.prefix_cache_mib << 20,
        allow_runtime_lora: args.allow_runtime_lora,
        lora_root: args.lora_root.clone(),
        write_timeout: (args.timeout_s > 0).then(|| std::time::Duration::from_secs(args.timeout_s)),
    };
    let loopback = args.host == "127.0.0.1" || args.host == "localhost" || args.host == "::1";
    if !loopback && args.api_key.is_none() {
        tracing::warn!("listening on {} without --api-key: anyone who reaches the port can use the model", args.host);
    }
    // A served adapter's agent.json goes to clients as it is (`/v1/models`): one they would refuse is
    // refused here, at the start, where the file is named, rather than in every client's evaluation.
    for (_, path) in &adapters {
        agentrt_environments::AgentSettings::read(path)?;
    }
    runtime.block_on(async {
        let state = ServerState::new(policy, base_name.clone(), config)?;
        for (name, path) in &adapters {
            state.add_adapter(name, path, false)?;
        }
        let bound = listener.local_addr()?;
        tracing::info!(
            "serving {} on http://{bound}/v1 (up to {} sequences at once, {} tokens a step; Ctrl-C stops)",
            state.model_names().join(", "),
            args.max_num_seqs,
            args.max_num_batched_tokens
        );
        // The first line of stdout is the base URL, for scripts that start a server on port 0.
        println!("http://{bound}/v1");
        std::io::stdout().flush()?;
        agentrt_serve::http::serve(listener, state).await?;
        Ok(())
    })
}

/// Connections the kernel queues before the server accepts them. tokio's `TcpListener::bind` asks for 128,
/// and a burst of clients beyond that is reset before the server sees it (serve/tests/hostile_load.rs
/// sends 1,000 at once); the kernel caps this at `net.core.somaxconn`.
const ACCEPT_QUEUE: u32 = 4096;

/// A listener on `addr` (its first address that binds) with an accept queue of [`ACCEPT_QUEUE`].
async fn listen(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        // A server restarted on its port binds while the old connections are in TIME_WAIT.
        socket.set_reuseaddr(true)?;
        match socket.bind(a) {
            Ok(()) => return socket.listen(ACCEPT_QUEUE),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("{addr} resolves to no address"))))
}

#[cfg(test)]
mod tests {
    /// The server lists the file the environments write and read (it does not depend on them).
    #[test]
    fn the_server_reads_the_agent_file_the_environments_write() {
        assert_eq!(agentrt_serve::AGENT_FILE, agentrt_environments::AGENT_FILE);
    }
}
