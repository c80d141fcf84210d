//! Any OpenAI-compatible chat-completions server (vLLM, `agentrt serve`, Ollama, llama.cpp, OpenAI) as the
//! policy, driving the same sandboxed tools: the road to comparing a trained small model with a 7B on
//! identical tools, and to sampling on other machines (several servers share the conversations).

use crate::conversation::Conversation;
use crate::error::RolloutError;
use crate::turn_policy::{Finish, Reply, TurnPolicy};
use async_trait::async_trait;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How a tool turn is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolTurns {
    /// As a `tool` message, rendered by the server with the model's own chat template: what the model sees
    /// in training and in local evaluation (vLLM, `agentrt serve`, Ollama and llama.cpp accept it).
    ToolRole,
    /// As a `user` message starting `Tool output:`, for APIs that allow `tool` messages only after their
    /// own tool calls (OpenAI's).
    UserRole,
}

impl ToolTurns {
    /// `tool` or `user`.
    pub fn parse(s: &str) -> Result<ToolTurns, RolloutError> {
        match s {
            "tool" => Ok(ToolTurns::ToolRole),
            "user" => Ok(ToolTurns::UserRole),
            other => Err(RolloutError::Invalid(format!("tool turns `{other}`: expected tool or user"))),
        }
    }
}

/// Where and how to ask.
#[derive(Debug, Clone)]
pub struct OpenAiPolicyConfig {
    /// The model name sent in every request (a served model or a loaded LoRA adapter's name).
    pub model: String,
    /// One server or several (conversations are spread over them in turn), e.g. `http://localhost:8000/v1`.
    pub base_urls: Vec<String>,
    /// Sent as a bearer token when present (`parse` takes it from `AGENTRT_JUDGE_API_KEY` or `OPENAI_API_KEY`).
    pub api_key: Option<String>,
    /// Sampling temperature (0: greedy).
    pub temperature: f64,
    /// Nucleus mass kept (1: all; sent only below 1).
    pub top_p: f64,
    /// Only the k most likely tokens (0: all). Sent only when sampling (temperature above 0) and above 0,
    /// as vLLM's `top_k` (which `agentrt serve` reads too; OpenAI's API has no such field).
    pub top_k: usize,
    /// Tokens per reply at most; a reply cut here finishes as `length`.
    pub max_tokens: usize,
    /// Stop strings (e.g. `</tool>`), kept at the end of the reply's text; sent only when not empty.
    pub stop: Vec<String>,
    /// How long one HTTP request may take.
    pub timeout: Duration,
    /// How tool output is sent back to the server.
    pub tool_turns: ToolTurns,
    /// Ask for the sampled token ids and their log-probs (`logprobs` with vLLM's
    /// `return_tokens_as_token_ids`, which `agentrt serve` speaks too), so that training extends its traces
    /// with exactly what was sampled; a reply without them is then an error.
    pub exact_tokens: bool,
}

impl OpenAiPolicyConfig {
    /// Parses `MODEL@BASE_URL` or `MODEL@URL1,URL2,...` (the part after `openai:` in
    /// `--policy openai:MODEL@BASE_URL`).
    pub fn parse(spec: &str) -> Result<OpenAiPolicyConfig, RolloutError> {
        let spec = spec.strip_prefix("openai:").unwrap_or(spec);
        let (model, urls) = spec.split_once('@').ok_or_else(|| RolloutError::Invalid(format!("policy `{spec}`: expected openai:MODEL@BASE_URL")))?;
        let base_urls: Vec<String> = urls.split(',').map(|u| u.trim().trim_end_matches('/').to_string()).collect();
        if model.trim().is_empty() || base_urls.iter().any(|u| !(u.starts_with("http://") || u.starts_with("https://"))) {
            return Err(RolloutError::Invalid(format!("policy `{spec}`: expected openai:MODEL@http(s)://HOST/v1[,http(s)://HOST2/v1...]")));
        }
        Ok(OpenAiPolicyConfig {
            model: model.trim().into(),
            base_urls,
            api_key: agentrt_judge::api_key_from_env(),
            temperature: 0.7,
            top_p: 1.0,
            top_k: 0,
            max_tokens: 256,
            stop: vec![],
            timeout: Duration::from_secs(120),
            tool_turns: ToolTurns::ToolRole,
            exact_tokens: false,
        })
    }
}

/// Replies from chat-completions endpoints.
pub struct OpenAiPolicy {
    config: OpenAiPolicyConfig,
    http: reqwest::Client,
    /// The next server to ask, so that consecutive calls spread over the servers too.
    next: AtomicUsize,
}

impl OpenAiPolicy {
    /// A policy asking the servers of `config`; fails when it names none or the HTTP client cannot be built.
    pub fn new(config: OpenAiPolicyConfig) -> Result<OpenAiPolicy, RolloutError> {
        if config.base_urls.is_empty() {
            return Err(RolloutError::Invalid("an OpenAI-compatible policy needs at least one server".into()));
        }
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .no_proxy()
            .build()
            .map_err(|e| RolloutError::Endpoint { endpoint: config.base_urls[0].clone(), message: e.to_string() })?;
        Ok(OpenAiPolicy { config, http, next: AtomicUsize::new(0) })
    }

    /// The servers asked.
    pub fn base_urls(&self) -> &[String] {
        &self.config.base_urls
    }

    async fn post(&self, endpoint: &str, body: &serde_json::Value) -> Result<String, RolloutError> {
        let err = |message: String| RolloutError::Endpoint { endpoint: endpoint.to_string(), message };
        let mut request = self.http.post(endpoint).json(body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| err(format!("request failed: {e}")))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| err(format!("reading the reply: {e}")))?;
        if !status.is_success() {
            return Err(err(format!("HTTP {status}: {}", text.chars().take(400).collect::<String>())));
        }
        Ok(text)
    }

    /// Loads the PEFT adapter at `dir` as `name` on every server, with vLLM's dynamic LoRA API
    /// (`POST /v1/load_lora_adapter`; vLLM runs with `--enable-lora`, `agentrt serve` always can). The
    /// servers read `dir` themselves: it must be a path they can see. With `replace`, an adapter a server
    /// already has under `name` is replaced (vLLM's `load_inplace`); without, that is the server's error.
    /// Stops at the first server that fails: the ones before it have the adapter.
    pub async fn load_lora_adapter(&self, name: &str, dir: &Path, replace: bool) -> Result<(), RolloutError> {
        let body = serde_json::json!({"lora_name": name, "lora_path": dir, "load_inplace": replace});
        for url in &self.config.base_urls {
            self.post(&format!("{url}/load_lora_adapter"), &body).await?;
        }
        Ok(())
    }

    /// Unloads adapter `name` from every server (`POST /v1/unload_lora_adapter`). Every server is asked,
    /// even after one fails, so that one server restarted or gone does not leave the adapter on the others;
    /// the error names each that failed.
    pub async fn unload_lora_adapter(&self, name: &str) -> Result<(), RolloutError> {
        let body = serde_json::json!({"lora_name": name});
        let asked = self.config.base_urls.iter().map(|url| {
            let endpoint = format!("{url}/unload_lora_adapter");
            let body = &body;
            async move { self.post(&endpoint, body).await }
        });
        let mut failures: Vec<RolloutError> = futures::future::join_all(asked).await.into_iter().filter_map(Result::err).collect();
        if failures.len() <= 1 {
            return failures.pop().map_or(Ok(()), Err);
        }
        let each: Vec<String> = failures.iter().map(ToString::to_string).collect();
        Err(RolloutError::Invalid(format!("unloading adapter `{name}` failed on {} servers: {}", failures.len(), each.join("; "))))
    }

    async fn one(&self, base_url: &str, c: &Conversation) -> Result<Reply, RolloutError> {
        let endpoint = format!("{base_url}/chat/completions");
        let messages: Vec<serde_json::Value> = c
            .messages
            .iter()
            .map(|m| match (m.role.as_str(), self.config.tool_turns) {
                ("tool", ToolTurns::UserRole) => serde_json::json!({"role": "user", "content": format!("Tool output:\n{}", m.content)}),
                (role, _) => serde_json::json!({"role": role, "content": m.content}),
            })
            .collect();
        let mut body = serde_json::json!({
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        });
        if !self.config.stop.is_empty() {
            body["stop"] = serde_json::json!(self.config.stop);
        }
        if self.config.top_p < 1.0 {
            body["top_p"] = serde_json::json!(self.config.top_p);
        }
        if self.config.temperature > 0.0 && self.config.top_k > 0 {
            body["top_k"] = serde_json::json!(self.config.top_k);
        }
        if self.config.exact_tokens {
            body["logprobs"] = serde_json::json!(true);
            body["return_tokens_as_token_ids"] = serde_json::json!(true);
        }
        let text = self.post(&endpoint, &body).await?;
        let err = |message: String| RolloutError::Endpoint { endpoint: endpoint.clone(), message };
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(format!("the reply is not JSON ({e})")))?;
        let choice = &v["choices"][0];
        let mut content = choice["message"]["content"]
            .as_str()
            .ok_or_else(|| err(format!("no choices[0].message.content in {}", text.chars().take(200).collect::<String>())))?
            .to_string();
        // vLLM (and `agentrt serve`) cut the stop string from the text and name it in `stop_reason`; the
        // reply keeps it, as a local policy's does, so that `</tool>` still closes the program.
        let stop_reason = choice["stop_reason"].as_str().filter(|s| self.config.stop.iter().any(|x| x == s));
        if let Some(s) = stop_reason {
            if !content.ends_with(s) {
                content.push_str(s);
            }
        }
        let finish = match choice["finish_reason"].as_str() {
            Some("length") => Finish::Length,
            Some("stop") if self.config.stop.iter().any(|s| content.ends_with(s.as_str())) => Finish::Stop,
            _ => Finish::EndOfTurn,
        };
        let (token_ids, logprobs) = if self.config.exact_tokens { sampled_tokens(choice).map_err(err)? } else { (vec![], vec![]) };
        Ok(Reply { text: content, token_ids, logprobs, finish })
    }
}

/// The ids and log-probs of `choices[i].logprobs.content` whose tokens are written `token_id:N`.
fn sampled_tokens(choice: &serde_json::Value) -> Result<(Vec<u32>, Vec<f32>), String> {
    let entries = choice["logprobs"]["content"].as_array().ok_or_else(|| {
        "asked for the sampled tokens (logprobs with return_tokens_as_token_ids) and the reply has no logprobs.content: \
         use a server that returns them (vLLM, agentrt serve), or set rollout.sampler_exact_tokens = false to re-tokenise the text"
            .to_string()
    })?;
    let mut ids = Vec::with_capacity(entries.len());
    let mut logprobs = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let token = e["token"].as_str().unwrap_or_default();
        let id = token
            .strip_prefix("token_id:")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("logprobs.content[{i}].token is {token:?}, not token_id:N (the server ignored return_tokens_as_token_ids)"))?;
        let lp = e["logprob"].as_f64().ok_or_else(|| format!("logprobs.content[{i}] has no logprob"))?;
        ids.push(id);
        logprobs.push(lp as f32);
    }
    Ok((ids, logprobs))
}

#[async_trait]
impl TurnPolicy for OpenAiPolicy {
    fn name(&self) -> String {
        format!("openai:{}@{}", self.config.model, self.config.base_urls.join(","))
    }

    async fn reply(&self, conversations: &[&Conversation]) -> Result<Vec<Reply>, RolloutError> {
        let first = self.next.fetch_add(conversations.len(), Ordering::Relaxed);
        let urls = &self.config.base_urls;
        futures::future::try_join_all(conversations.iter().enumerate().map(|(i, c)| self.one(&urls[(first + i) % urls.len()], c))).await
    }
}
