//! A tiny chat-completions server on loopback, written for the tests: just enough HTTP/1.1 for
//! reqwest (one request per connection, `Connection: close`), with counters the tests assert on.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
pub enum Reply {
    /// 200 with a chat completion whose message content is this text.
    Content(String),
    /// The same after a pause.
    Delayed(Duration, String),
    /// This status with this body.
    Status(u16, String),
    /// 200 with this raw body.
    Raw(String),
    /// Read the request, then never answer.
    Hang,
}

/// Counters shared with the connection tasks.
#[derive(Default)]
pub struct Stats {
    pub requests: AtomicUsize,
    pub in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    pub bodies: Mutex<Vec<serde_json::Value>>,
    pub auth_headers: Mutex<Vec<String>>,
}

/// A running server; it stops when the test's runtime ends.
pub struct Server {
    pub base_url: String,
    pub stats: Arc<Stats>,
}

impl Server {
    pub fn requests(&self) -> usize {
        self.stats.requests.load(Ordering::SeqCst)
    }

    pub fn max_in_flight(&self) -> usize {
        self.stats.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url)
    }
}

type Behaviour = dyn Fn(usize, &serde_json::Value) -> Reply + Send + Sync;

/// Starts a server on 127.0.0.1:0; `behaviour(index, request_json)` decides each reply.
pub async fn start(behaviour: impl Fn(usize, &serde_json::Value) -> Reply + Send + Sync + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let stats = Arc::new(Stats::default());
    let behaviour: Arc<Behaviour> = Arc::new(behaviour);
    let task_stats = stats.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let stats = task_stats.clone();
            let behaviour = behaviour.clone();
            tokio::spawn(async move {
                let _ = serve(stream, stats, behaviour).await;
            });
        }
    });
    Server { base_url: format!("http://{addr}/v1"), stats }
}

/// A chat completion (the shape OpenAI sends) whose one choice says `content`.
pub fn completion(content: &str) -> String {
    serde_json::json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "judge-test",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    })
    .to_string()
}

/// The `Response: …` line of the judge prompt in a request.
pub fn graded_response(request: &serde_json::Value) -> String {
    let prompt = request["messages"][0]["content"].as_str().unwrap_or_default();
    prompt.lines().find_map(|line| line.strip_prefix("Response: ")).unwrap_or_default().to_string()
}

struct InFlight(Arc<Stats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve(mut stream: TcpStream, stats: Arc<Stats>, behaviour: Arc<Behaviour>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let mut content_length = 0usize;
    let mut auth = String::new();
    for line in head.lines() {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                content_length = value.trim().parse().unwrap_or(0);
            } else if name.eq_ignore_ascii_case("authorization") {
                auth = value.trim().to_string();
            }
        }
    }
    while buf.len() < header_end + content_length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: serde_json::Value = serde_json::from_slice(&buf[header_end..]).unwrap_or(serde_json::Value::Null);

    let index = stats.requests.fetch_add(1, Ordering::SeqCst);
    let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    stats.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let guard = InFlight(stats.clone());
    stats.bodies.lock().unwrap().push(body.clone());
    stats.auth_headers.lock().unwrap().push(auth);

    let (status, payload) = match behaviour(index, &body) {
        Reply::Content(text) => (200, completion(&text)),
        Reply::Delayed(pause, text) => {
            tokio::time::sleep(pause).await;
            (200, completion(&text))
        }
        Reply::Status(status, body) => (status, body),
        Reply::Raw(body) => (200, body),
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return Ok(());
        }
    };
    // Leave the in-flight count before the client can see the reply and send its next request.
    drop(guard);
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let response =
        format!("HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}", payload.len());
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await?;
    Ok(())
}
