//! Any OpenAI-compatible chat-completions server (vLLM, Ollama, llama.cpp, OpenAI) as the policy, driving
//! the same sandboxed tools: the road to comparing a trained small model with a 7B on identical tools, and
//! to sampling on another machine.

use crate::conversation::Conversation;
use crate::error::RolloutError;
use crate::turn_policy::{Finish, Reply, TurnPolicy};
use async_trait::async_trait;
use std::time::Duration;

/// Where and how to ask.
#[derive(Debug, Clone)]
pub struct OpenAiPolicyConfig {
    pub model: String,
    /// e.g. `http://localhost:11434/v1` (Ollama) or `http://localhost:8000/v1` (vLLM).
    pub base_url: String,
    pub api_key: Option<String>,
    pub temperature: f64,
    pub max_tokens: usize,
    pub stop: Vec<String>,
    pub timeout: Duration,
}

impl OpenAiPolicyConfig {
    /// Parses `MODEL@BASE_URL` (the part after `openai:` in `--policy openai:MODEL@BASE_URL`).
    pub fn parse(spec: &str) -> Result<OpenAiPolicyConfig, RolloutError> {
        let spec = spec.strip_prefix("openai:").unwrap_or(spec);
        let (model, url) = spec.split_once('@').ok_or_else(|| RolloutError::Invalid(format!("policy `{spec}`: expected openai:MODEL@BASE_URL")))?;
        if model.trim().is_empty() || !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(RolloutError::Invalid(format!("policy `{spec}`: expected openai:MODEL@http(s)://HOST/v1")));
        }
        Ok(OpenAiPolicyConfig {
            model: model.trim().into(),
            base_url: url.trim().trim_end_matches('/').into(),
            api_key: agentrt_judge::api_key_from_env(),
            temperature: 0.7,
            max_tokens: 256,
            stop: vec![],
            timeout: Duration::from_secs(120),
        })
    }
}

/// Replies from a chat-completions endpoint. Tool turns are sent as user messages (`Tool output:` first),
/// since OpenAI's `tool` role needs tool-call ids that plain programs do not have.
pub struct OpenAiPolicy {
    config: OpenAiPolicyConfig,
    endpoint: String,
    http: reqwest::Client,
}

impl OpenAiPolicy {
    pub fn new(config: OpenAiPolicyConfig) -> Result<OpenAiPolicy, RolloutError> {
        let endpoint = format!("{}/chat/completions", config.base_url);
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .no_proxy()
            .build()
            .map_err(|e| RolloutError::Endpoint { endpoint: endpoint.clone(), message: e.to_string() })?;
        Ok(OpenAiPolicy { config, endpoint, http })
    }

    async fn one(&self, c: &Conversation) -> Result<Reply, RolloutError> {
        let messages: Vec<serde_json::Value> = c
            .messages
            .iter()
            .map(|m| match m.role.as_str() {
                "tool" => serde_json::json!({"role": "user", "content": format!("Tool output:\n{}", m.content)}),
                role => serde_json::json!({"role": role, "content": m.content}),
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
        let err = |message: String| RolloutError::Endpoint { endpoint: self.endpoint.clone(), message };
        let mut request = self.http.post(&self.endpoint).json(&body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| err(format!("request failed: {e}")))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| err(format!("reading the reply: {e}")))?;
        if !status.is_success() {
            return Err(err(format!("HTTP {status}: {}", text.chars().take(400).collect::<String>())));
        }
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(format!("the reply is not JSON ({e})")))?;
        let choice = &v["choices"][0];
        let content = choice["message"]["content"]
            .as_str()
            .ok_or_else(|| err(format!("no choices[0].message.content in {}", text.chars().take(200).collect::<String>())))?;
        let finish = match choice["finish_reason"].as_str() {
            Some("length") => Finish::Length,
            Some("stop") if self.config.stop.iter().any(|s| content.ends_with(s)) => Finish::Stop,
            _ => Finish::EndOfTurn,
        };
        Ok(Reply { text: content.to_string(), token_ids: vec![], logprobs: vec![], finish })
    }
}

#[async_trait]
impl TurnPolicy for OpenAiPolicy {
    fn name(&self) -> String {
        format!("openai:{}@{}", self.config.model, self.config.base_url)
    }

    async fn reply(&self, conversations: &[&Conversation]) -> Result<Vec<Reply>, RolloutError> {
        futures::future::try_join_all(conversations.iter().map(|c| self.one(c))).await
    }
}
