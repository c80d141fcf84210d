//! Any OpenAI-compatible chat-completions server (vLLM, `agentrt serve`, Ollama, llama.cpp, OpenAI) as the
//! policy, driving the same sandboxed tools: the road to comparing a trained small model with a 7B on
//! identical tools, and to sampling on other machines (several servers share the conversations).

use crate::conversation::Conversation;
use crate::error::RolloutError;
use crate::turn_policy::{Finish, Reply, TurnPolicy};
use agentrt_openai::wire::{ChatCompletionRequest, ChatMessage, Choice, LoadLoraAdapter, StopReason, UnloadLoraAdapter, CHAT_COMPLETIONS_PATH};
use agentrt_openai::{body_snippet, Client, ClientConfig, ClientError, Retry};
use async_trait::async_trait;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// Sent as a bearer token when present (`parse` takes it from `AGENTRT_JUDGE_API_KEY` or `OPENAI_API_KEY`:
    /// [`agentrt_openai::api_key_from_env`]).
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
    /// How long one HTTP request may take (a request is sent once: a failed one fails the batch).
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
            api_key: agentrt_openai::api_key_from_env(),
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

/// The policy's error for a request that got no usable reply: the endpoint, and what happened there.
fn endpoint_error(error: ClientError) -> RolloutError {
    RolloutError::Endpoint { endpoint: error.endpoint().to_string(), message: error.reason() }
}

/// Replies from chat-completions endpoints.
pub struct OpenAiPolicy {
    config: OpenAiPolicyConfig,
    /// One client per server of `config.base_urls`, in that order.
    clients: Vec<Client>,
    /// The next server to ask, so that consecutive calls spread over the servers too.
    next: AtomicUsize,
    /// Whether a reply without token counts has been warned of (once per policy, not once per reply).
    warned_no_usage: AtomicBool,
}

impl OpenAiPolicy {
    /// A policy asking the servers of `config`; fails when it names none, or one is not an http(s) URL, or
    /// the HTTP client cannot be built.
    pub fn new(config: OpenAiPolicyConfig) -> Result<OpenAiPolicy, RolloutError> {
        if config.base_urls.is_empty() {
            return Err(RolloutError::Invalid("an OpenAI-compatible policy needs at least one server".into()));
        }
        let clients = config
            .base_urls
            .iter()
            .map(|base_url| {
                // No retries: a policy's requests were always sent once, and a failure fails the batch.
                Client::new(ClientConfig { base_url: base_url.clone(), api_key: config.api_key.clone(), timeout: config.timeout, retry: Retry::NEVER })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(endpoint_error)?;
        Ok(OpenAiPolicy { config, clients, next: AtomicUsize::new(0), warned_no_usage: AtomicBool::new(false) })
    }

    /// The agent settings the first server lists for this policy's model in `GET /v1/models` (`agentrt
    /// serve`'s `agent_settings`: the served adapter's `agent.json`), as JSON; none when the model is not
    /// listed or its card has none (vLLM's, OpenAI's). The error is the request's: a server that could not
    /// be asked, or whose list is not one.
    pub async fn served_agent_settings(&self) -> Result<Option<serde_json::Value>, RolloutError> {
        let models = self.clients[0].models().await.map_err(endpoint_error)?;
        Ok(models.data.into_iter().find(|m| m.id == self.config.model).and_then(|m| m.agent_settings))
    }

    /// The servers asked.
    pub fn base_urls(&self) -> &[String] {
        &self.config.base_urls
    }

    /// Loads the PEFT adapter at `dir` as `name` on every server, with vLLM's dynamic LoRA API
    /// (`POST /v1/load_lora_adapter`; vLLM runs with `--enable-lora`, `agentrt serve` with `--allow-runtime-lora`). The
    /// servers read `dir` themselves: it must be a path they can see. With `replace`, an adapter a server
    /// already has under `name` is replaced (vLLM's `load_inplace`); without, that is the server's error.
    /// Stops at the first server that fails: the ones before it have the adapter.
    pub async fn load_lora_adapter(&self, name: &str, dir: &Path, replace: bool) -> Result<(), RolloutError> {
        let request = LoadLoraAdapter { lora_name: name.to_string(), lora_path: dir.to_path_buf(), load_inplace: replace };
        for client in &self.clients {
            client.load_lora_adapter(&request).await.map_err(endpoint_error)?;
        }
        Ok(())
    }

    /// Unloads adapter `name` from every server (`POST /v1/unload_lora_adapter`). Every server is asked,
    /// even after one fails, so that one server restarted or gone does not leave the adapter on the others;
    /// the error names each that failed.
    pub async fn unload_lora_adapter(&self, name: &str) -> Result<(), RolloutError> {
        let request = UnloadLoraAdapter { lora_name: name.to_string() };
        let asked = self.clients.iter().map(|client| client.unload_lora_adapter(&request));
        let mut failures: Vec<RolloutError> = futures::future::join_all(asked).await.into_iter().filter_map(|r| r.err().map(endpoint_error)).collect();
        if failures.len() <= 1 {
            return failures.pop().map_or(Ok(()), Err);
        }
        let each: Vec<String> = failures.iter().map(ToString::to_string).collect();
        Err(RolloutError::Invalid(format!("unloading adapter `{name}` failed on {} servers: {}", failures.len(), each.join("; "))))
    }

    /// The request for `c`'s next reply.
    fn request(&self, c: &Conversation) -> ChatCompletionRequest {
        let messages = c
            .messages
            .iter()
            .map(|m| match (m.role.as_str(), self.config.tool_turns) {
                ("tool", ToolTurns::UserRole) => ChatMessage::user(format!("Tool output:\n{}", m.content)),
                (role, _) => ChatMessage::new(role, m.content.clone()),
            })
            .collect();
        let exact = self.config.exact_tokens.then_some(true);
        ChatCompletionRequest {
            model: self.config.model.clone(),
            messages,
            temperature: Some(self.config.temperature),
            top_p: (self.config.top_p < 1.0).then_some(self.config.top_p),
            top_k: (self.config.temperature > 0.0 && self.config.top_k > 0).then_some(self.config.top_k),
            max_tokens: Some(self.config.max_tokens),
            stop: self.config.stop.clone(),
            logprobs: exact,
            return_tokens_as_token_ids: exact,
            stream: None,
        }
    }

    async fn one(&self, client: &Client, c: &Conversation) -> Result<Reply, RolloutError> {
        let completion = client.chat_completion(&self.request(c)).await.map_err(endpoint_error)?;
        let err = |message: String| RolloutError::Endpoint { endpoint: client.endpoint(CHAT_COMPLETIONS_PATH), message };
        let no_content = || err(format!("no choices[0].message.content in {}", body_snippet(&serde_json::to_string(&completion).unwrap_or_default())));
        let choice = completion.choices.first().ok_or_else(no_content)?;
        let mut content = choice.message.content.clone().ok_or_else(no_content)?;
        // vLLM (and `agentrt serve`) cut the stop string from the text and name it in `stop_reason`; the
        // reply keeps it, as a local policy's does, so that `</tool>` still closes the program.
        let stop_reason = match &choice.stop_reason {
            Some(StopReason::Text(s)) if self.config.stop.contains(s) => Some(s),
            _ => None,
        };
        if let Some(s) = stop_reason {
            if !content.ends_with(s.as_str()) {
                content.push_str(s);
            }
        }
        let finish = match choice.finish_reason.as_deref() {
            Some("length") => Finish::Length,
            Some("stop") if self.config.stop.iter().any(|s| content.ends_with(s.as_str())) => Finish::Stop,
            _ => Finish::EndOfTurn,
        };
        let (token_ids, logprobs) = if self.config.exact_tokens { sampled_tokens(choice).map_err(err)? } else { (vec![], vec![]) };
        // The ids are the count when they came; otherwise the server's. A `usage` of 0 beside text is a
        // server that fills the field without counting (a reply ends on at least its end-of-turn token).
        let counted = completion.usage.map(|u| u.completion_tokens).filter(|&n| n > 0 || content.is_empty());
        let counted_tokens = if self.config.exact_tokens { None } else { counted };
        if !self.config.exact_tokens && counted.is_none() && !self.warned_no_usage.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "{} sent a reply without token counts (`usage.completion_tokens`): this policy's replies count 0 model tokens \
                 (`reply_tokens`, avg model tokens) rather than a guess; vLLM, agentrt serve, OpenAI, Ollama and llama.cpp send them",
                client.endpoint(CHAT_COMPLETIONS_PATH)
            );
        }
        Ok(Reply { text: content, token_ids, logprobs, finish, counted_tokens })
    }

    /// Whether a reply came without token counts (and so counted 0), which was warned of.
    pub fn missed_token_counts(&self) -> bool {
        self.warned_no_usage.load(Ordering::Relaxed)
    }
}

/// The ids and log-probs of `choices[i].logprobs.content` whose tokens are written `token_id:N`.
fn sampled_tokens(choice: &Choice) -> Result<(Vec<u32>, Vec<f32>), String> {
    let entries = choice.logprobs.as_ref().and_then(|l| l.content.as_ref()).ok_or_else(|| {
        "asked for the sampled tokens (logprobs with return_tokens_as_token_ids) and the reply has no logprobs.content: \
         use a server that returns them (vLLM, agentrt serve), or set rollout.sampler_exact_tokens = false to re-tokenise the text"
            .to_string()
    })?;
    let mut ids = Vec::with_capacity(entries.len());
    let mut logprobs = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let id = e
            .token
            .strip_prefix("token_id:")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("logprobs.content[{i}].token is {:?}, not token_id:N (the server ignored return_tokens_as_token_ids)", e.token))?;
        let lp = e.logprob.ok_or_else(|| format!("logprobs.content[{i}] has no logprob"))?;
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
        let clients = &self.clients;
        futures::future::try_join_all(conversations.iter().enumerate().map(|(i, c)| self.one(&clients[(first + i) % clients.len()], c))).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_policy::Message;

    fn conversation() -> Conversation {
        Conversation::new(
            "q",
            vec![Message::system("sys"), Message::user("question"), Message::assistant("```python\nprint(1)\n```"), Message::new("tool", "1")],
        )
    }

    fn policy(config: OpenAiPolicyConfig) -> OpenAiPolicy {
        OpenAiPolicy::new(config).unwrap()
    }

    #[test]
    fn the_request_body_sends_only_what_the_settings_ask() {
        let plain = OpenAiPolicyConfig::parse("openai:m@http://127.0.0.1:1/v1").unwrap();
        let body = serde_json::to_value(policy(plain.clone()).request(&conversation())).unwrap();
        let messages = serde_json::json!([
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "question"},
            {"role": "assistant", "content": "```python\nprint(1)\n```"},
            {"role": "tool", "content": "1"},
        ]);
        assert_eq!(body, serde_json::json!({"model": "m", "messages": messages, "temperature": 0.7, "max_tokens": 256}));

        let every =
            OpenAiPolicyConfig { top_p: 0.9, top_k: 20, stop: vec!["</tool>".into()], exact_tokens: true, tool_turns: ToolTurns::UserRole, ..plain.clone() };
        let body = serde_json::to_value(policy(every.clone()).request(&conversation())).unwrap();
        let mut user_turns = messages.clone();
        user_turns[3] = serde_json::json!({"role": "user", "content": "Tool output:\n1"});
        assert_eq!(
            body,
            serde_json::json!({
                "model": "m", "messages": user_turns, "temperature": 0.7, "max_tokens": 256, "stop": ["</tool>"], "top_p": 0.9, "top_k": 20,
                "logprobs": true, "return_tokens_as_token_ids": true,
            })
        );
        // Greedy: no top_k, which only matters when sampling.
        let body = serde_json::to_value(policy(OpenAiPolicyConfig { temperature: 0.0, ..every }).request(&conversation())).unwrap();
        assert!(body.get("top_k").is_none(), "{body}");
    }

    #[test]
    fn a_server_that_is_not_a_url_is_refused_when_the_policy_is_built() {
        let config = OpenAiPolicyConfig {
            base_urls: vec!["http://127.0.0.1:1/v1".into(), "http://".into()],
            ..OpenAiPolicyConfig::parse("openai:m@http://x/v1").unwrap()
        };
        match OpenAiPolicy::new(config) {
            Err(RolloutError::Endpoint { endpoint, message }) => {
                assert!(endpoint == "http://" && message.contains("not an http(s) URL"), "{endpoint}: {message}")
            }
            other => panic!("expected an endpoint error, got {:?}", other.map(|p| p.name())),
        }
    }
}
