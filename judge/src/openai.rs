//! The LLM judge: one chat-completions request per item to any OpenAI-compatible server, read strictly.
//!
//! The request goes through `agentrt_openai::Client`, the one client of such servers: 5xx, timeouts and
//! transport errors are retried with jittered exponential backoff, 4xx never (429 included: a rate limit is
//! reported with a hint rather than hammered). Its errors become [`JudgeError`]s here, with hints for the
//! statuses users hit most.

use crate::cache::{default_cache_dir, CacheKey, VerdictCache};
use crate::error::http_hint;
use crate::{extract_answer, Judge, JudgeError, JudgeInput, Verdict, VerdictLabel};
use agentrt_openai::wire::{ChatCompletionRequest, ChatMessage, CHAT_COMPLETIONS_PATH};
use agentrt_openai::{api_key_from_env, body_snippet, Client, ClientConfig, ClientError, Retry};
use async_trait::async_trait;
use std::path::PathBuf;
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

/// Settings for judges that call a server; the defaults suit a local model on a busy machine.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeOptions {
    /// Where verdicts are cached; `None` turns the cache off. Default `$AGENTRT_CACHE/judge`.
    pub cache_dir: Option<PathBuf>,
    /// Per-attempt timeout (default 60 s).
    pub timeout: Duration,
    /// Retries after the first attempt, on 5xx, timeouts and connection errors only (default 3).
    pub max_retries: u32,
    /// First backoff delay; doubled per retry, capped at 30 s, jittered (default 500 ms).
    pub backoff_base: Duration,
    /// `max_tokens` in the request: the verdict is one word (default 16).
    pub max_tokens: u32,
    /// Most requests one judge has in flight, however many callers share it; 0 = no limit (default 8).
    pub max_concurrency: usize,
}

impl Default for JudgeOptions {
    fn default() -> Self {
        JudgeOptions {
            cache_dir: Some(default_cache_dir()),
            timeout: Duration::from_secs(60),
            max_retries: 3,
            backoff_base: Duration::from_millis(500),
            max_tokens: 16,
            max_concurrency: 8,
        }
    }
}

/// Where and what to ask: the model, the server, the key, and the shared [`JudgeOptions`].
#[derive(Debug, Clone)]
pub struct OpenAiJudgeConfig {
    /// The model name as the server knows it (e.g. `qwen2.5:7b` for Ollama, `gpt-4o-mini`).
    pub model: String,
    /// The API base, usually ending in `/v1` (e.g. `http://localhost:11434/v1`).
    pub base_url: String,
    /// Bearer token; `None` sends no `Authorization` header, which local servers accept.
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

/// The judge's error for a request that got no usable reply.
fn judge_error(error: ClientError) -> JudgeError {
    match error {
        ClientError::Timeout { endpoint, timeout, attempts } => JudgeError::Timeout { endpoint, timeout, attempts },
        ClientError::Connection { endpoint, message, attempts } => JudgeError::Connection { endpoint, message, attempts },
        ClientError::Http { endpoint, status, body, attempts } => JudgeError::Http { endpoint, status, body, attempts, hint: http_hint(status) },
        ClientError::BadResponse { endpoint, message, .. } => JudgeError::BadResponse { endpoint, message },
        ClientError::Client { endpoint, message } => JudgeError::Client { endpoint, message },
        ClientError::InvalidBaseUrl { base_url } => JudgeError::Client { endpoint: base_url, message: "the API base is not an http(s) URL".into() },
    }
}

/// The LLM judge over an OpenAI-compatible chat-completions endpoint.
pub struct OpenAiJudge {
    client: Client,
    model: String,
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
    /// Builds the judge: checks the URL and the key, opens the cache, sets up the HTTP client. Sends nothing.
    pub fn new(config: OpenAiJudgeConfig) -> Result<Self, JudgeError> {
        let OpenAiJudgeConfig { model, base_url, api_key, options } = config;
        let trimmed = base_url.trim().trim_end_matches('/');
        let spec = format!("openai:{model}@{trimmed}");
        if model.trim().is_empty() {
            return Err(JudgeError::InvalidSpec { spec, reason: "the model name is empty".into() });
        }
        let retry = Retry { max_retries: options.max_retries, backoff_base: options.backoff_base };
        let client = match Client::new(ClientConfig { base_url: base_url.clone(), api_key, timeout: options.timeout, retry }) {
            Ok(client) => client,
            Err(ClientError::InvalidBaseUrl { base_url }) => {
                return Err(JudgeError::InvalidSpec { spec, reason: format!("{base_url:?} is not an http(s) URL") })
            }
            Err(other) => return Err(judge_error(other)),
        };
        let cache = match &options.cache_dir {
            Some(dir) => Some(VerdictCache::open(dir)?),
            None => None,
        };
        let permits = (options.max_concurrency > 0).then(|| Arc::new(Semaphore::new(options.max_concurrency)));
        Ok(OpenAiJudge { endpoint: client.endpoint(CHAT_COMPLETIONS_PATH), client, model, options, cache, permits })
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

    /// The request for one prompt: greedy, `max_tokens` from the options, not streamed.
    fn request(&self, prompt: String) -> ChatCompletionRequest {
        ChatCompletionRequest {
            model: self.model.clone(),
            messages: vec![ChatMessage::user(prompt)],
            temperature: Some(0.0),
            max_tokens: Some(self.options.max_tokens as usize),
            stream: Some(false),
            ..ChatCompletionRequest::default()
        }
    }

    /// The text of the reply's first choice (none is read as empty, hence unparsable).
    async fn ask(&self, prompt: String) -> Result<String, JudgeError> {
        let reply = self.client.chat_completion(&self.request(prompt)).await.map_err(judge_error)?;
        match reply.choices.first() {
            Some(choice) => Ok(choice.message.content.clone().unwrap_or_default()),
            None => Err(JudgeError::BadResponse {
                endpoint: self.endpoint.clone(),
                message: format!("no choices[0].message in {}", body_snippet(&serde_json::to_string(&reply).unwrap_or_default())),
            }),
        }
    }
}

#[async_trait]
impl Judge for OpenAiJudge {
    fn name(&self) -> String {
        format!("openai:{}@{}", self.model, self.client.base_url())
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
}
