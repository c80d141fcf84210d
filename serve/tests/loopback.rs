//! `agentrt serve`'s HTTP API on loopback with a real client (reqwest) over tiny random models: the reply
//! is the policy's own sample, streamed or not; requests batch; bad ones get OpenAI-shaped errors; a client
//! that leaves mid-stream frees its slot; adapters load, answer and unload by name; a request joins the
//! running batch (continuous batching), long prompts are read in chunks, adapters decode side by side.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_policy::rand::SeedableRng;
use agentrt_policy::tiny::{tiny_config, tiny_policy, tiny_policy_with};
use agentrt_policy::{Arch, LoraConfig, Message, ModelConfig, Policy, SamplingParams};
use agentrt_serve::{EngineStats, ServeConfig, ServerState};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

async fn start(policy: Policy, config: ServeConfig) -> (String, Arc<ServerState>) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let state = ServerState::new(policy, "tiny", config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(agentrt_serve::http::serve(listener, state.clone()));
    (url, state)
}

/// A server that loads and unloads adapters at runtime (`--allow-runtime-lora`), from any path.
fn runtime_lora() -> ServeConfig {
    ServeConfig { allow_runtime_lora: true, ..ServeConfig::default() }
}

/// A tiny model wide enough that thousands of tokens take seconds, with a long context.
fn wide() -> ModelConfig {
    ModelConfig { hidden_size: 256, intermediate_size: 512, head_dim: 64, max_position_embeddings: 8192, ..tiny_config(Arch::Llama) }
}

fn messages() -> Vec<Message> {
    vec![Message::system("You answer."), Message::user("What is the capital of France?")]
}

fn body(model: &str, extra: Value) -> Value {
    let mut b = json!({"model": model, "messages": messages(), "temperature": 0, "max_tokens": 12});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

async fn post(url: &str, path: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new().post(format!("{url}{path}")).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn ids_of(choice: &Value) -> Vec<u32> {
    choice["logprobs"]["content"].as_array().unwrap().iter().map(|e| e["token"].as_str().unwrap().strip_prefix("token_id:").unwrap().parse().unwrap()).collect()
}

fn greedy(policy: &Policy, max_tokens: usize) -> agentrt_policy::Completion {
    let prompt = policy.chat_prompt(&messages()).unwrap();
    let params = SamplingParams { temperature: 0.0, max_tokens, ..SamplingParams::default() };
    policy.sample(&[prompt], &params, &mut agentrt_policy::rand::rngs::StdRng::seed_from_u64(0)).unwrap().remove(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_greedy_reply_is_the_policys_own_sample_with_exact_ids_and_logprobs() {
    let expected = greedy(&tiny_policy(Arch::Llama, 3).unwrap(), 12);
    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), ServeConfig::default()).await;
    let (status, v) = post(&url, "/chat/completions", &body("tiny", json!({"logprobs": true, "return_tokens_as_token_ids": true}))).await;
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["message"]["content"].as_str().unwrap(), expected.text);
    assert_eq!(ids_of(choice), expected.token_ids);
    for (e, lp) in choice["logprobs"]["content"].as_array().unwrap().iter().zip(&expected.logprobs) {
        assert!((e["logprob"].as_f64().unwrap() as f32 - lp).abs() < 1e-5);
    }
    assert_eq!(v["usage"]["completion_tokens"], expected.token_ids.len());
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(choice["finish_reason"], if expected.finish_reason == agentrt_policy::FinishReason::Length { "length" } else { "stop" });
}

/// Reads a server-sent-events body into its `data:` payloads.
async fn events(r: reqwest::Response) -> Vec<String> {
    let text = r.text().await.unwrap();
    text.lines().filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:"))).map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_reply_adds_up_to_the_whole_one() {
    let (url, _) = start(tiny_policy(Arch::Qwen2, 5).unwrap(), ServeConfig::default()).await;
    let extra = json!({"max_tokens": 24, "stop": ["a"], "logprobs": true});
    let (_, whole) = post(&url, "/chat/completions", &body("tiny", extra.clone())).await;
    let mut streamed = body("tiny", extra);
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let r = reqwest::Client::new().post(format!("{url}/chat/completions")).json(&streamed).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let data = events(r).await;
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, whole["choices"][0]["message"]["content"].as_str().unwrap());
    let finish = chunks.iter().find(|c| !c["choices"][0]["finish_reason"].is_null()).expect("a chunk with finish_reason");
    assert_eq!(finish["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"]);
    let logprobs: usize = chunks.iter().filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array()).map(Vec::len).sum();
    assert_eq!(logprobs, whole["usage"]["completion_tokens"].as_u64().unwrap() as usize);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage, &whole["usage"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_requests_are_sampled_in_one_batch_and_each_keeps_its_seeded_tokens() {
    // Wide enough that 200 tokens take a while, so four requests sent together overlap.
    let (url, state) = start(tiny_policy_with(wide(), 7).unwrap(), ServeConfig::default()).await;
    let ask = |seed: u64| {
        let url = url.clone();
        async move {
            let extra = json!({"temperature": 1.0, "seed": seed, "max_tokens": 200, "logprobs": true, "return_tokens_as_token_ids": true});
            post(&url, "/chat/completions", &body("tiny", extra)).await
        }
    };
    let together = futures::future::join_all((0..4).map(ask)).await;
    assert!(state.stats().largest_step >= 2, "{:?}", state.stats());
    for (seed, (status, v)) in together.into_iter().enumerate() {
        assert_eq!(status, 200, "{v}");
        let (_, alone) = ask(seed as u64).await;
        assert_eq!(ids_of(&v["choices"][0]), ids_of(&alone["choices"][0]), "seed {seed}: batched and alone differ");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_openai_shaped_errors_and_the_server_goes_on() {
    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), ServeConfig::default()).await;
    let raw = reqwest::Client::new().post(format!("{url}/chat/completions")).body("{oops").header("content-type", "application/json").send().await.unwrap();
    assert_eq!(raw.status(), 400);
    let v: Value = raw.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("not a valid chat request"), "{v}");
    let (status, v) = post(&url, "/chat/completions", &body("nope", json!({}))).await;
    assert_eq!(status, 404);
    assert!(v["error"]["message"].as_str().unwrap().contains("`nope` does not exist"), "{v}");
    let mut long = body("tiny", json!({"max_tokens": 200}));
    long["messages"][1]["content"] = json!("x".repeat(300));
    let (status, v) = post(&url, "/chat/completions", &long).await;
    assert_eq!(status, 400);
    assert!(v["error"]["message"].as_str().unwrap().contains("maximum context length is 256 tokens"), "{v}");
    // The messages alone are too long: theirs is the param; they fit but `max_tokens` is too large: its.
    assert_eq!(v["error"]["param"], "messages", "{v}");
    let (status, v) = post(&url, "/chat/completions", &body("tiny", json!({"max_tokens": 1000}))).await;
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("max_tokens")), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("maximum context length is 256 tokens"), "{v}");
    let (status, v) = post(&url, "/chat/completions", &body("tiny", json!({"messages": [{"role": "user"}]}))).await;
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("messages[0]")), "{v}");
    let (status, _) = post(&url, "/chat/completions", &body("tiny", json!({}))).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_leaves_mid_stream_frees_its_slot() {
    // Wide enough that 8,000 tokens take many seconds: the request can only end early by being cancelled.
    let (url, state) = start(tiny_policy_with(wide(), 1).unwrap(), ServeConfig { max_num_seqs: 1, ..ServeConfig::default() }).await;
    let mut long = body("tiny", json!({"max_tokens": 8000}));
    long["messages"] = json!([{"role": "user", "content": "go"}]);
    // Gone after its first token (the role's chunk comes before the request is admitted: a client gone then
    // is `abandoned`, never admitted).
    let r = streaming(&url, &long).await;
    drop(r);
    wait_for(&state, "the row was cancelled", |stats| stats.cancelled > 0).await;
    short_request(&url).await;
    assert_eq!(state.stats().cancelled, 1);
}

/// Waits until the server's statistics show `what` (`happened`), for a minute at most.
async fn wait_for(state: &ServerState, what: &str, happened: impl Fn(&EngineStats) -> bool) {
    let started = std::time::Instant::now();
    while !happened(&state.stats()) {
        assert!(started.elapsed() < Duration::from_secs(60), "a minute passed before {what}: {:?}", state.stats());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A request for four tokens, which must be answered.
async fn short_request(url: &str) {
    let (status, v) = post(url, "/chat/completions", &body("tiny", json!({"max_tokens": 4}))).await;
    assert_eq!(status, 200, "{v}");
}

/// Opens a streamed request (with log-probs, so each token is a chunk) and reads until its first token.
async fn streaming(url: &str, body: &Value) -> reqwest::Response {
    let mut body = body.clone();
    body["stream"] = json!(true);
    body["logprobs"] = json!(true);
    let mut r = reqwest::Client::new().post(format!("{url}/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut seen = String::new();
    while !seen.contains("\"token\"") {
        let chunk = r.chunk().await.unwrap().expect("the stream ended before its first token");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    r
}

fn long_reply(model: &str, max_tokens: usize) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "go"}], "temperature": 0, "max_tokens": max_tokens})
}

/// A short request sent while four long ones decode joins them at the next step and ends while all four
/// still run: it does not wait for their batch to end.
#[tokio::test(flavor = "multi_thread")]
async fn a_short_request_finishes_while_four_long_ones_still_run() {
    let (url, state) = start(tiny_policy_with(wide(), 2).unwrap(), ServeConfig::default()).await;
    let mut longs = Vec::new();
    for _ in 0..4 {
        longs.push(streaming(&url, &long_reply("tiny", 6000)).await);
    }
    short_request(&url).await;
    for (i, r) in longs.iter_mut().enumerate() {
        let more = r.chunk().await.unwrap();
        assert!(more.is_some_and(|c| !String::from_utf8_lossy(&c).contains("[DONE]")), "long request {i} ended before the short one");
    }
    let stats = state.stats();
    assert!(stats.largest_step >= 5 && stats.cancelled == 0, "{stats:?}");
}

/// A prompt of 7,000 tokens is read 64 tokens a step; a short request sent meanwhile is read beside it and
/// answered before the long prompt's reply.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_prompt_is_read_in_chunks_and_does_not_stall_a_short_request() {
    let config = ServeConfig { max_num_batched_tokens: 64, ..ServeConfig::default() };
    let (url, state) = start(tiny_policy_with(wide(), 2).unwrap(), config).await;
    let mut long = long_reply("tiny", 1);
    long["messages"][0]["content"] = json!("x".repeat(7000));
    let long = tokio::spawn({
        let url = url.clone();
        async move { post(&url, "/chat/completions", &long).await }
    });
    wait_for(&state, "the long prompt was read", |stats| stats.prompt_tokens > 0).await;
    short_request(&url).await;
    assert!(!long.is_finished(), "the long prompt was read before the short request ended: {:?}", state.stats());
    let (status, v) = long.await.unwrap();
    assert_eq!(status, 200, "{v}");
    let stats = state.stats();
    assert!(stats.chunked_prompt_steps >= 7000 / 64 - 1 && stats.prompt_tokens > 7000, "{stats:?}");
}

/// Requests for two adapters (and the base model) decode in the same steps, each with its own adapter's
/// tokens.
#[tokio::test(flavor = "multi_thread")]
async fn requests_for_different_adapters_decode_in_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    for (name, seed) in [("a", 4u64), ("b", 5)] {
        let mut trained = tiny_policy_with(wide(), 2).unwrap();
        trained.init_adapters(LoraConfig { rank: 4, alpha: 8.0, ..LoraConfig::default() }, seed).unwrap();
        trained.adapters.as_ref().unwrap().randomize_b(0.5, 1).unwrap();
        trained.save_adapters(&dir.path().join(name)).unwrap();
        expected.push(greedy(&trained, 12));
    }
    assert_ne!(expected[0].token_ids, expected[1].token_ids, "the adapters must differ for this test to mean anything");
    let (url, state) = start(tiny_policy_with(wide(), 2).unwrap(), runtime_lora()).await;
    for name in ["a", "b"] {
        let (status, v) = post(&url, "/load_lora_adapter", &json!({"lora_name": name, "lora_path": dir.path().join(name)})).await;
        assert_eq!(status, 200, "{v}");
    }
    let _base = streaming(&url, &long_reply("tiny", 6000)).await;
    let _a = streaming(&url, &long_reply("a", 6000)).await;
    let ids = json!({"logprobs": true, "return_tokens_as_token_ids": true});
    let (status, v) = post(&url, "/chat/completions", &body("b", ids.clone())).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(ids_of(&v["choices"][0]), expected[1].token_ids, "adapter b, decoded beside a and the base model");
    let (_, v) = post(&url, "/chat/completions", &body("a", ids)).await;
    assert_eq!(ids_of(&v["choices"][0]), expected[0].token_ids, "adapter a, decoded beside a and the base model");
    assert!(state.stats().mixed_adapter_steps >= 12, "{:?}", state.stats());
}

/// A request whose prompt starts as an ended one's did reads only past the cached prefix, and answers
/// as it does without the cache.
#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_that_starts_like_an_earlier_one_reads_only_past_the_cached_prefix() {
    let system = "You answer from the text. ".repeat(20);
    let ask = |question: &str| {
        json!({"model": "tiny", "temperature": 0, "max_tokens": 8, "logprobs": true, "return_tokens_as_token_ids": true,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]})
    };
    let no_cache = ServeConfig { prefix_cache_bytes: 0, ..ServeConfig::default() };
    let (plain_url, plain) = start(tiny_policy_with(wide(), 3).unwrap(), no_cache).await;
    let (url, state) = start(tiny_policy_with(wide(), 3).unwrap(), ServeConfig::default()).await;
    for (i, question) in ["Who?", "When was it?"].into_iter().enumerate() {
        let (_, cached) = post(&url, "/chat/completions", &ask(question)).await;
        let (_, fresh) = post(&plain_url, "/chat/completions", &ask(question)).await;
        assert_eq!(ids_of(&cached["choices"][0]), ids_of(&fresh["choices"][0]), "question {i}");
    }
    let (stats, plain) = (state.stats(), plain.stats());
    assert!(stats.cached_prompt_tokens > 500, "the second prompt's system part came from the cache: {stats:?}");
    assert_eq!(stats.prompt_tokens + stats.cached_prompt_tokens, plain.prompt_tokens, "{stats:?} against {plain:?}");
}

/// `--max-model-len`, `--max-num-seqs` and `--api-key` hold, each refusal OpenAI-shaped.
#[tokio::test(flavor = "multi_thread")]
async fn the_length_cap_the_sequence_cap_and_the_api_key_are_enforced() {
    let too_long = ServeConfig { max_model_len: Some(10_000), ..ServeConfig::default() };
    assert!(ServerState::new(tiny_policy(Arch::Llama, 3).unwrap(), "tiny", too_long).is_err());
    let config = ServeConfig { max_model_len: Some(128), max_num_seqs: 2, api_key: Some("s3cret".into()), ..ServeConfig::default() };
    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), config).await;
    let client = reqwest::Client::new();
    let send = |key: Option<&'static str>, body: Value| {
        let mut r = client.post(format!("{url}/chat/completions")).json(&body);
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, v) = send(None, body("tiny", json!({}))).await;
    assert_eq!((status, v["error"]["type"].as_str()), (401, Some("AuthenticationError")), "{v}");
    let (status, v) = send(Some("guess"), body("tiny", json!({}))).await;
    assert_eq!(status, 401, "{v}");
    let health = client.get(url.replace("/v1", "/health")).send().await.unwrap();
    assert_eq!(health.status(), 200, "health stays open for probes");
    let (status, v) = send(Some("s3cret"), body("tiny", json!({"max_tokens": 4}))).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = send(Some("s3cret"), body("tiny", json!({"max_tokens": 60}))).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("maximum context length is 128 tokens"), "{v}");
    let (status, v) = send(Some("s3cret"), body("tiny", json!({"n": 3}))).await;
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("n")), "{v}");
}

/// The tiny Llama with random adapters that change its replies, saved in PEFT form at `dir`.
fn trained_adapter_in(dir: &std::path::Path) -> Policy {
    let mut trained = tiny_policy(Arch::Llama, 3).unwrap();
    trained.init_adapters(LoraConfig { rank: 4, alpha: 8.0, ..LoraConfig::default() }, 9).unwrap();
    trained.adapters.as_ref().unwrap().randomize_b(0.5, 1).unwrap();
    trained.save_adapters(dir).unwrap();
    trained
}

#[tokio::test(flavor = "multi_thread")]
async fn adapters_load_answer_and_unload_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let trained = trained_adapter_in(&dir.path().join("a"));
    let with_adapter = greedy(&trained, 12);
    let base = greedy(&tiny_policy(Arch::Llama, 3).unwrap(), 12);
    assert_ne!(with_adapter.logprobs, base.logprobs, "the adapter must change the model for this test to mean anything");

    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), runtime_lora()).await;
    let load = json!({"lora_name": "step-1", "lora_path": dir.path().join("a")});
    let (status, v) = post(&url, "/load_lora_adapter", &load).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = post(&url, "/load_lora_adapter", &load).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("already been loaded"));
    let models: Value = reqwest::get(format!("{url}/models")).await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["tiny", "step-1"]);

    let logprobs = json!({"logprobs": true, "return_tokens_as_token_ids": true});
    let (_, v) = post(&url, "/chat/completions", &body("step-1", logprobs.clone())).await;
    assert_eq!(ids_of(&v["choices"][0]), with_adapter.token_ids);
    let (_, v) = post(&url, "/chat/completions", &body("tiny", logprobs.clone())).await;
    assert_eq!(ids_of(&v["choices"][0]), base.token_ids);

    let (status, v) = post(&url, "/load_lora_adapter", &json!({"lora_name": "bad", "lora_path": dir.path().join("missing")})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("missing"), "{v}");
    let (status, _) = post(&url, "/unload_lora_adapter", &json!({"lora_name": "step-1"})).await;
    assert_eq!(status, 200);
    let (status, _) = post(&url, "/chat/completions", &body("step-1", logprobs)).await;
    assert_eq!(status, 404);
}

/// The client the judge and the `openai:` policy send through reads what this server writes: an adapter
/// loaded by name, a reply with its exact ids and log-probs, a stop string named in `stop_reason`.
#[tokio::test(flavor = "multi_thread")]
async fn the_shared_client_loads_adapters_and_reads_exact_replies() {
    use agentrt_openai::wire::{ChatCompletionRequest, ChatMessage, LoadLoraAdapter, StopReason, UnloadLoraAdapter};
    use agentrt_openai::{Client, ClientConfig, ClientError, Retry};
    let dir = tempfile::tempdir().unwrap();
    let trained = trained_adapter_in(&dir.path().join("a"));
    let expected = greedy(&trained, 12);

    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), runtime_lora()).await;
    let client = Client::new(ClientConfig { base_url: url.clone(), api_key: None, timeout: Duration::from_secs(60), retry: Retry::NEVER }).unwrap();
    client.load_lora_adapter(&LoadLoraAdapter { lora_name: "step-1".into(), lora_path: dir.path().join("a"), load_inplace: false }).await.unwrap();
    let messages = messages().into_iter().map(|m| ChatMessage::new(m.role, m.content)).collect();
    let request = ChatCompletionRequest {
        model: "step-1".into(),
        messages,
        temperature: Some(0.0),
        max_tokens: Some(12),
        logprobs: Some(true),
        return_tokens_as_token_ids: Some(true),
        ..ChatCompletionRequest::default()
    };
    let reply = client.chat_completion(&request).await.unwrap();
    let entries = reply.choices[0].logprobs.as_ref().and_then(|l| l.content.as_ref()).expect("log-probs were asked for");
    let ids: Vec<u32> = entries.iter().map(|e| e.token.strip_prefix("token_id:").unwrap().parse().unwrap()).collect();
    assert_eq!(ids, expected.token_ids);
    for (e, lp) in entries.iter().zip(&expected.logprobs) {
        assert!((e.logprob.unwrap() as f32 - lp).abs() < 1e-5, "{e:?} against {lp}");
    }
    assert_eq!(reply.usage.unwrap().completion_tokens, expected.token_ids.len());

    // A stop string that ends the reply comes back in `stop_reason`, cut from the text.
    let stop = expected.text.chars().next().expect("the greedy reply has text").to_string();
    let reply = client.chat_completion(&ChatCompletionRequest { stop: vec![stop.clone()], ..request.clone() }).await.unwrap();
    assert_eq!(reply.choices[0].stop_reason, Some(StopReason::Text(stop.clone())), "{reply:?}");
    assert!(!reply.choices[0].message.content.as_deref().unwrap().contains(&stop), "{reply:?}");

    client.unload_lora_adapter(&UnloadLoraAdapter { lora_name: "step-1".into() }).await.unwrap();
    match client.chat_completion(&request).await {
        Err(ClientError::Http { status: 404, body, .. }) => assert!(body.contains("`step-1` does not exist"), "{body}"),
        other => panic!("expected a 404 for the unloaded adapter, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn created_is_when_the_request_came_not_when_the_server_started() {
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), ServeConfig::default()).await;
    // Past a second boundary after the start, so a start-time `created` cannot equal the request's.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = now();
    let (status, v) = post(&url, "/chat/completions", &body("tiny", json!({}))).await;
    assert_eq!(status, 200, "{v}");
    let created = v["created"].as_u64().unwrap();
    assert!(created >= before && created <= now(), "created {created}, request sent at {before}");
    let streamed = body("tiny", json!({"stream": true}));
    let before = now();
    let r = reqwest::Client::new().post(format!("{url}/chat/completions")).json(&streamed).send().await.unwrap();
    let data = events(r).await;
    let first: Value = serde_json::from_str(&data[0]).unwrap();
    let created = first["created"].as_u64().unwrap();
    assert!(created >= before && created <= now(), "streamed created {created}, request sent at {before}");
}

/// `v` is an OpenAI error body with status `expected`: `{"error": {"message", "type", "param", "code"}}`.
fn assert_openai_error(status: u16, v: &Value, expected: u16) {
    assert_eq!(status, expected, "{v}");
    let e = v["error"].as_object().unwrap_or_else(|| panic!("not an OpenAI error body: {v}"));
    let mut keys: Vec<&str> = e.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["code", "message", "param", "type"], "{v}");
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].as_str().is_some_and(|t| t.ends_with("Error")), "{v}");
    assert!(e["param"].is_null() || e["param"].is_string(), "{v}");
    assert_eq!(e["code"], expected, "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_field_of_the_wrong_type_is_named_with_the_type_expected() {
    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), runtime_lora()).await;
    let mut content = body("tiny", json!({}));
    content["messages"][1]["content"] = json!(5);
    let cases = [
        (body("tiny", json!({"temperature": "hot"})), "temperature", "a number"),
        (body("tiny", json!({"seed": -1})), "seed", "an integer from 0"),
        (body("tiny", json!({"stream": "yes"})), "stream", "true or false"),
        (body("tiny", json!({"stop": 5})), "stop", "a string or a list of strings"),
        (body("tiny", json!({"stop": ["</tool>", 5]})), "stop", "a string or a list of strings"),
        (body("tiny", json!({"max_tokens": "many"})), "max_tokens", "an integer"),
        (body("tiny", json!({"messages": "hi"})), "messages", "a list of messages"),
        (content, "messages[1].content", "a string or a list of text parts"),
    ];
    for (request, param, expected) in cases {
        let (status, v) = post(&url, "/chat/completions", &request).await;
        assert_openai_error(status, &v, 400);
        assert_eq!(v["error"]["param"], param, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{param}`")) && message.contains(expected), "{param}: expected {expected:?} in {message:?}");
    }
    let load = [
        (json!({"lora_name": 5, "lora_path": "/nowhere"}), "lora_name", "a string"),
        (json!({"lora_name": "a", "lora_path": "/nowhere", "load_inplace": "yes"}), "load_inplace", "true or false"),
    ];
    for (request, param, expected) in load {
        let (status, v) = post(&url, "/load_lora_adapter", &request).await;
        assert_openai_error(status, &v, 400);
        assert_eq!(v["error"]["param"], param, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(expected), "{v}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_too_large_a_wrong_method_and_an_unknown_route_get_openai_errors() {
    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), ServeConfig::default()).await;
    // One byte over the limit: the server has read the whole body when it answers, so the client is never
    // cut off mid-send (as it can be with a far larger body, which the server stops reading at the limit).
    let limit = agentrt_serve::http::MAX_BODY_BYTES;
    let mut big = body("tiny", json!({}));
    big["messages"][1]["content"] = json!("");
    let empty = serde_json::to_vec(&big).unwrap().len();
    big["messages"][1]["content"] = json!("x".repeat(limit + 1 - empty));
    let bytes = serde_json::to_vec(&big).unwrap();
    assert_eq!(bytes.len(), limit + 1);
    let r = reqwest::Client::new().post(format!("{url}/chat/completions")).header("content-type", "application/json").body(bytes).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("a body over the limit: not JSON: {text:?}"));
    assert_openai_error(status, &v, 413);
    assert!(v["error"]["message"].as_str().unwrap().contains(&format!("{limit} bytes")), "{v}");

    let r = reqwest::get(format!("{url}/chat/completions")).await.unwrap();
    assert_eq!(r.headers().get("allow").map(|a| a.to_str().unwrap().to_string()), Some("POST".into()));
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("GET /v1/chat/completions: not JSON: {text:?}"));
    assert_openai_error(status, &v, 405);
    assert!(v["error"]["message"].as_str().unwrap().contains("POST"), "{v}");

    let r = reqwest::get(format!("{url}/completions")).await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("GET /v1/completions: not JSON: {text:?}"));
    assert_openai_error(status, &v, 404);
    assert!(v["error"]["message"].as_str().unwrap().contains("/v1/completions"), "{v}");

    let (status, v) = post(&url, "/chat/completions", &body("tiny", json!({"max_tokens": 2}))).await;
    assert_eq!(status, 200, "the server stopped answering: {v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_the_404_and_405_errors_name_is_served() {
    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), ServeConfig::default()).await;
    let root = url.strip_suffix("/v1").unwrap();
    for (method, path) in agentrt_serve::http::ROUTES {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = reqwest::Client::new().request(method.clone(), format!("{root}{path}")).json(&json!({})).send().await.unwrap();
        let status = r.status().as_u16();
        assert!(status != 404 && status != 405, "{method} {path}: {status} {}", r.text().await.unwrap());
    }
}

/// Runtime adapter loading is off unless the server was started with it (vLLM's
/// `VLLM_ALLOW_RUNTIME_LORA_UPDATING`): a client could otherwise probe the filesystem through `lora_path`.
/// With `--lora-root`, a path must lie under the root once its symlinks are resolved.
#[tokio::test(flavor = "multi_thread")]
async fn runtime_lora_loading_is_off_by_default_and_kept_under_its_root() {
    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), ServeConfig::default()).await;
    for (path, request) in [
        ("/load_lora_adapter", json!({"lora_name": "probe", "lora_path": "/etc"})),
        ("/load_lora_adapter", json!({"lora_name": "probe", "lora_path": "../../x"})),
        ("/unload_lora_adapter", json!({"lora_name": "probe"})),
    ] {
        let (status, v) = post(&url, path, &request).await;
        assert_openai_error(status, &v, 403);
        assert_eq!(v["error"]["type"], "PermissionDeniedError", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("--allow-runtime-lora"), "{v}");
    }

    let dir = tempfile::tempdir().unwrap();
    let (root, outside) = (dir.path().join("root"), dir.path().join("outside"));
    let mut trained = tiny_policy(Arch::Llama, 3).unwrap();
    trained.init_adapters(LoraConfig { rank: 4, alpha: 8.0, ..LoraConfig::default() }, 9).unwrap();
    trained.save_adapters(&root.join("a")).unwrap();
    trained.save_adapters(&outside.join("b")).unwrap();
    std::os::unix::fs::symlink(outside.join("b"), root.join("link")).unwrap();
    // A checkpoint-like directory inside the root whose `adapters/` points outside.
    std::fs::create_dir(root.join("checkpoint")).unwrap();
    std::os::unix::fs::symlink(outside.join("b"), root.join("checkpoint/adapters")).unwrap();
    let config = ServeConfig { lora_root: Some(root.clone()), ..runtime_lora() };
    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), config).await;
    let refused = [
        "../outside/b".to_string(),
        root.join("../outside/b").display().to_string(),
        outside.join("b").display().to_string(),
        root.join("link").display().to_string(),
        root.join("checkpoint").display().to_string(),
        root.join("missing").display().to_string(),
        "/etc".into(),
    ];
    for lora_path in refused {
        let (status, v) = post(&url, "/load_lora_adapter", &json!({"lora_name": "x", "lora_path": lora_path})).await;
        assert_openai_error(status, &v, 403);
        assert_eq!(v["error"]["param"], "lora_path", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("--lora-root"), "{lora_path}: {v}");
    }
    let (status, v) = post(&url, "/load_lora_adapter", &json!({"lora_name": "a", "lora_path": root.join("a")})).await;
    assert_eq!(status, 200, "{v}");
    // A relative path is read under the root.
    let (status, v) = post(&url, "/load_lora_adapter", &json!({"lora_name": "a2", "lora_path": "a"})).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = post(&url, "/chat/completions", &body("a2", json!({}))).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = post(&url, "/unload_lora_adapter", &json!({"lora_name": "a"})).await;
    assert_eq!(status, 200, "{v}");
}

/// Everything the log writes while the test that installs [`capture_log`] runs, whichever test wrote it.
static LOG: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every request refused with an error status is logged with its method, path, status and reason, as the
/// answered ones are.
#[tokio::test(flavor = "multi_thread")]
async fn every_rejected_request_is_logged_with_its_reason() {
    let subscriber = tracing_subscriber::fmt().with_writer(|| LogWriter).with_ansi(false).finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let config = ServeConfig { api_key: Some("s3cret".into()), ..ServeConfig::default() };
    let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), config).await;
    let client = reqwest::Client::new();
    let auth = |r: reqwest::RequestBuilder| r.header("authorization", "Bearer s3cret");
    let base = url.trim_end_matches("/v1");
    let cases = [
        (client.post(format!("{url}/chat/completions")).json(&body("tiny", json!({}))), "POST", "/v1/chat/completions", 401, "Incorrect or missing API key"),
        (
            auth(client.post(format!("{url}/chat/completions"))).json(&body("tiny", json!({"temperature": "hot"}))),
            "POST",
            "/v1/chat/completions",
            400,
            "`temperature`",
        ),
        (auth(client.post(format!("{url}/chat/completions"))).json(&body("nobody", json!({}))), "POST", "/v1/chat/completions", 404, "`nobody` does not exist"),
        (auth(client.get(format!("{base}/v1/rejected-route"))), "GET", "/v1/rejected-route", 404, "There is no route"),
        (auth(client.get(format!("{url}/load_lora_adapter"))), "GET", "/v1/load_lora_adapter", 405, "does not take GET"),
        (
            auth(client.post(format!("{url}/unload_lora_adapter"))).json(&json!({"lora_name": "x"})),
            "POST",
            "/v1/unload_lora_adapter",
            403,
            "--allow-runtime-lora",
        ),
    ];
    for (request, method, path, status, reason) in cases {
        let r = request.send().await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{method} {path}: {}", r.text().await.unwrap());
        let expected = [format!("method={method}"), format!("path={path}"), format!("status={status}")];
        let mut line = None;
        for _ in 0..100 {
            let log = String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned();
            line = log
                .lines()
                .find(|l| l.contains("request rejected") && expected.iter().all(|e| l.contains(e.as_str())) && l.contains(reason))
                .map(str::to_string);
            if line.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let line = line.unwrap_or_else(|| panic!("no log line for {method} {path} {status} ({reason}) in:\n{}", String::from_utf8_lossy(&LOG.lock().unwrap())));
        assert!(line.contains("WARN"), "{line}");
    }
}

/// An adapter's `agent.json` is listed with it in `/v1/models` (as the shared client reads it), loaded at
/// start or at runtime; the base model and an adapter without one list none; a file that is not a JSON
/// object is refused with the adapter, naming it.
#[tokio::test(flavor = "multi_thread")]
async fn the_models_list_carries_each_adapters_agent_settings() {
    use agentrt_openai::{Client, ClientConfig, Retry};
    let dir = tempfile::tempdir().unwrap();
    for name in ["with", "without", "bad"] {
        trained_adapter_in(&dir.path().join(name));
    }
    let settings = json!({"model": "tiny", "system_prompt": "Answer in one word.", "demonstration": false, "max_turns": 2});
    std::fs::write(dir.path().join("with").join(agentrt_serve::AGENT_FILE), settings.to_string()).unwrap();
    std::fs::write(dir.path().join("bad").join(agentrt_serve::AGENT_FILE), "[1, 2]").unwrap();

    let (url, state) = start(tiny_policy(Arch::Llama, 3).unwrap(), runtime_lora()).await;
    state.add_adapter("with", &dir.path().join("with"), false).unwrap();
    let (status, v) = post(&url, "/load_lora_adapter", &json!({"lora_name": "without", "lora_path": dir.path().join("without")})).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = post(&url, "/load_lora_adapter", &json!({"lora_name": "bad", "lora_path": dir.path().join("bad")})).await;
    assert_eq!(status, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("agent.json") && message.contains("not a JSON object"), "{message}");

    let client = Client::new(ClientConfig { base_url: url.clone(), api_key: None, timeout: Duration::from_secs(60), retry: Retry::NEVER }).unwrap();
    let models = client.models().await.unwrap();
    let listed: Vec<(&str, Option<&str>, Option<&Value>)> =
        models.data.iter().map(|m| (m.id.as_str(), m.parent.as_deref(), m.agent_settings.as_ref())).collect();
    assert_eq!(listed, [("tiny", None, None), ("with", Some("tiny"), Some(&settings)), ("without", Some("tiny"), None)]);
}

/// Response ids never repeat, within a server or across its starts (they were `chatcmpl-0`, `-1`, …
/// again at every start), streamed or not.
#[tokio::test(flavor = "multi_thread")]
async fn response_ids_do_not_repeat_across_server_starts() {
    let mut ids = Vec::new();
    for _start in 0..2 {
        let (url, _) = start(tiny_policy(Arch::Llama, 3).unwrap(), ServeConfig::default()).await;
        for _ in 0..2 {
            let (status, v) = post(&url, "/chat/completions", &body("tiny", json!({"max_tokens": 2}))).await;
            assert_eq!(status, 200, "{v}");
            ids.push(v["id"].as_str().unwrap().to_string());
        }
        let r =
            reqwest::Client::new().post(format!("{url}/chat/completions")).json(&body("tiny", json!({"max_tokens": 2, "stream": true}))).send().await.unwrap();
        let chunks: Vec<Value> = events(r).await.iter().filter(|d| *d != "[DONE]").map(|d| serde_json::from_str(d).unwrap()).collect();
        let streamed: std::collections::BTreeSet<&str> = chunks.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(streamed.len(), 1, "every chunk of a reply carries its one id: {streamed:?}");
        ids.push(streamed.into_iter().next().unwrap().to_string());
    }
    for id in &ids {
        let hex = id.strip_prefix("chatcmpl-").unwrap_or_else(|| panic!("{id}: not chatcmpl-…"));
        assert!(hex.len() == 24 && hex.chars().all(|c| c.is_ascii_hexdigit()), "{id}: not 96 bits in hex");
    }
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "an id repeated: {ids:?}");
}
