//! An OpenAI-compatible server as the policy, against a real loopback HTTP server: the episode runs the
//! server's program in the sandbox, sends the tool output back, and grades the server's answer.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_rollout::{EpisodeOutcome, EpisodeRunner, EpisodeSpec, OpenAiPolicy, OpenAiPolicyConfig, Question, RolloutError};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serves chat completions: the first request of a conversation gets a program, a request that carries
/// tool output gets the answer; with `usage`, the program is counted as 7 tokens and the answer as 3, as
/// servers count them (without, no `usage`, as some servers send). Every request body is kept.
async fn serve(listener: tokio::net::TcpListener, bodies: Arc<Mutex<Vec<serde_json::Value>>>, usage: bool) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else { return };
        let bodies = bodies.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let body = loop {
                let n = sock.read(&mut chunk).await.unwrap();
                if n == 0 {
                    return;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len: usize = text[..end]
                        .lines()
                        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break serde_json::from_slice::<serde_json::Value>(&buf[end + 4..end + 4 + len]).unwrap();
                    }
                }
            };
            let saw_tool_output = body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
            bodies.lock().unwrap().push(body);
            let content = if saw_tool_output { "<answer>Paris</answer>" } else { "```python\nprint(read_section(\"paris:summary\"))\n```" };
            let mut reply = serde_json::json!({"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]});
            if usage {
                let completion_tokens = if saw_tool_output { 3 } else { 7 };
                reply["usage"] = serde_json::json!({"prompt_tokens": 50, "completion_tokens": completion_tokens, "total_tokens": 50 + completion_tokens});
            }
            let reply = reply.to_string();
            let response = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}", reply.len());
            sock.write_all(response.as_bytes()).await.unwrap();
        });
    }
}

async fn runner() -> EpisodeRunner {
    agentrt_environments::testing::fixture_runner(EpisodeSpec { max_turns: 4, ..EpisodeSpec::default() }).await
}

fn question() -> Question {
    Question { id: "q".into(), question: "What is the capital of France?".into(), answers: vec!["Paris".into()], page: Some("paris".into()), split: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_model_drives_the_sandboxed_tools() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(serve(listener, bodies.clone(), false));
    let policy = OpenAiPolicy::new(OpenAiPolicyConfig::parse(&format!("openai:tiny-7b@{url}")).unwrap()).unwrap();
    let batch = runner().await.run(&policy, &[question()]).await.unwrap();
    let e = &batch.episodes[0];
    assert_eq!(e.outcome, EpisodeOutcome::Correct, "{:?}", e.turns);
    assert_eq!(e.turns.len(), 2);
    // No `usage` in the replies: no tokens counted, and the policy says so (a warning, once).
    assert_eq!(e.model_tokens(), 0);
    assert!(policy.missed_token_counts());
    assert!(e.turns[0].observation.as_deref().unwrap().contains("capital and most populous city of France"));
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0]["model"], "tiny-7b");
    assert_eq!(bodies[0]["messages"][0]["role"], "system");
    assert!(bodies[1]["messages"][3]["content"].as_str().unwrap().contains("most populous city"), "{}", bodies[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_is_a_clear_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let policy = OpenAiPolicy::new(OpenAiPolicyConfig::parse(&format!("openai:m@{url}")).unwrap()).unwrap();
    match runner().await.run(&policy, &[question()]).await {
        Err(RolloutError::Endpoint { endpoint, .. }) => assert!(endpoint.starts_with(&url), "{endpoint}"),
        other => panic!("expected an endpoint error, got {other:?}"),
    }
}

/// A reply's tokens are the server's `usage.completion_tokens` when it sends them: what `agentrt eval`
/// reports as the model's tokens, which were 0 for every served reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_replys_tokens_are_the_servers_count() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(serve(listener, Arc::new(Mutex::new(Vec::new())), true));
    let policy = OpenAiPolicy::new(OpenAiPolicyConfig::parse(&format!("openai:tiny-7b@{url}")).unwrap()).unwrap();
    let e = runner().await.run(&policy, &[question(), question()]).await.unwrap().episodes;
    for e in &e {
        assert_eq!(e.turns.iter().map(|t| t.reply_tokens).collect::<Vec<_>>(), [7, 3], "{:?}", e.turns);
        assert_eq!(e.model_tokens(), 10);
    }
    assert!(!policy.missed_token_counts(), "replies with usage were taken for replies without");
}
