//! `agentrt serve` under a hostile load, on loopback with real clients: a flood of 1,000 requests at once,
//! a tenth of them from clients that go away after the first chunk of a long reply, a tenth with prompts past the context, a
//! tenth read slowly. Every client that stays gets its answer (or its 400), the gone ones are cancelled or
//! never admitted, the engine's counters add up, and the server answers normally afterwards. The peak
//! memory of the whole test process is printed (docs/reliability.md quotes it).

use agentrt_policy::tiny::tiny_policy;
use agentrt_policy::Arch;
use agentrt_serve::{ServeConfig, ServerState};
use serde_json::{json, Value};
use std::time::Duration;

const FLOOD: usize = 1000;

fn request(i: usize) -> Value {
    let content = if i % 10 == 1 { "x".repeat(2000) } else { format!("Question {i}?") };
    let (stream, max_tokens) = match i % 10 {
        2 => (true, 200),
        3 => (true, 6),
        _ => (false, 6),
    };
    json!({"model": "tiny", "messages": [{"role": "user", "content": content}], "temperature": 1.0, "seed": i, "max_tokens": max_tokens, "stream": stream})
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_hostile_clients_leaves_every_other_client_answered() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let state = ServerState::new(tiny_policy(Arch::Llama, 3).unwrap(), "tiny", ServeConfig::default()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/chat/completions", listener.local_addr().unwrap());
    tokio::spawn(agentrt_serve::http::serve(listener, state.clone()));
    let client = reqwest::Client::new();
    let tasks: Vec<_> = (0..FLOOD)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let mut r = client.post(&url).json(&request(i)).send().await.unwrap();
                if i % 10 == 2 {
                    // Gone after the first chunk: its sequence is cancelled mid-reply, or never admitted.
                    let _ = r.chunk().await;
                    return None;
                }
                let status = r.status().as_u16();
                let mut body = Vec::new();
                while let Some(chunk) = r.chunk().await.unwrap() {
                    if i % 10 == 3 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    body.extend_from_slice(&chunk);
                }
                Some((i, status, String::from_utf8_lossy(&body).into_owned()))
            })
        })
        .collect();
    let mut answered = 0;
    for t in tasks {
        let Some((i, status, body)) = t.await.unwrap() else { continue };
        match i % 10 {
            1 => {
                assert_eq!(status, 400, "request {i}: {body}");
                assert!(body.contains("maximum context length"), "request {i}: {body}");
            }
            3 => assert!(status == 200 && body.contains("[DONE]"), "request {i}: {status} {body}"),
            _ => {
                assert_eq!(status, 200, "request {i}: {body}");
                let v: Value = serde_json::from_str(&body).unwrap();
                assert!(v["usage"]["completion_tokens"].as_u64().is_some_and(|n| (1..=6).contains(&n)), "request {i}: {body}");
            }
        }
        answered += 1;
    }
    assert_eq!(answered, FLOOD - FLOOD / 10);
    // The server still answers, and its counters add up: every admitted sequence ended once.
    let v: Value = client.post(&url).json(&request(0)).send().await.unwrap().json().await.unwrap();
    assert!(v["choices"][0]["finish_reason"].as_str().is_some(), "{v}");
    let stats = state.stats();
    let admitted_or_gone = stats.sequences + stats.abandoned;
    assert!(admitted_or_gone <= (FLOOD - FLOOD / 10 + 1) as u64, "{stats:?}");
    assert!(stats.sequences >= (FLOOD - 2 * FLOOD / 10 + 1) as u64, "every client that stayed was admitted: {stats:?}");
    assert!(stats.largest_step <= ServeConfig::default().max_num_seqs, "{stats:?}");
    assert!(stats.cancelled + stats.abandoned > 0, "the clients that left freed their slots: {stats:?}");
    println!("flood of {FLOOD}: {stats:?}; peak memory of the test process {:.0} MiB", peak_rss_mib());
}
