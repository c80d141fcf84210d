//! A chat-completions server on loopback for tests of clients (the `loopback-server` feature): just enough
//! HTTP/1.1 for reqwest (one request per connection, `Connection: close`), with what it read and counters the
//! tests assert on. Nothing here leaves 127.0.0.1. The client's tests and the LLM judge's use it; the
//! real server is `agentrt serve`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
pub enum Reply {
    /// 200 with a chat completion whose one choice says this text ([`completion`]).
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

/// One request as the server read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The request line's method, e.g. `POST`.
    pub method: String,
    /// The request line's path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The `Authorization` header, when sent.
    pub authorization: Option<String>,
    /// The body as JSON (`null` when it is not JSON).
    pub body: serde_json::Value,
}

/// What the connection tasks record.
#[derive(Default)]
struct Record {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    requests: Mutex<Vec<Request>>,
}

/// A running server; it stops when the test's runtime ends.
pub struct LoopbackServer {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    record: Arc<Record>,
}

impl LoopbackServer {
    /// Every request read so far, in the order they arrived.
    pub fn requests(&self) -> Vec<Request> {
        self.record.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many requests arrived.
    pub fn request_count(&self) -> usize {
        self.record.requests.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The most requests that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.record.max_in_flight.load(Ordering::SeqCst)
    }

    /// The chat-completions URL.
    pub fn endpoint(&self) -> String {
        format!("{}{}", self.base_url, crate::wire::CHAT_COMPLETIONS_PATH)
    }
}

type Behaviour = dyn Fn(usize, &Request) -> Reply + Send + Sync;

/// Starts a server on 127.0.0.1:0; `behaviour(index, request)` decides the reply to the `index`th request.
///
/// # Panics
/// When no loopback port can be bound (a test cannot go on without one).
pub async fn start(behaviour: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static) -> LoopbackServer {
    #[allow(clippy::expect_used)]
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    #[allow(clippy::expect_used)]
    let base_url = format!("http://{}/v1", listener.local_addr().expect("the bound address"));
    let record = Arc::new(Record::default());
    let behaviour: Arc<Behaviour> = Arc::new(behaviour);
    let task_record = record.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (record, behaviour) = (task_record.clone(), behaviour.clone());
            tokio::spawn(async move {
                let _ = serve(stream, record, behaviour).await;
            });
        }
    });
    LoopbackServer { base_url, record }
}

/// A chat completion (the shape OpenAI sends) whose one choice says `content`.
pub fn completion(content: &str) -> String {
    serde_json::json!({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "loopback-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    })
    .to_string()
}

/// Leaves the in-flight count when the request is answered (or its task ends).
struct InFlight(Arc<Record>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve(mut stream: TcpStream, record: Arc<Record>, behaviour: Arc<Behaviour>) -> std::io::Result<()> {
    let Some(request) = read_request(&mut stream).await? else { return Ok(()) };
    let now = record.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    record.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let guard = InFlight(record.clone());
    let index = {
        let mut requests = record.requests.lock().unwrap_or_else(PoisonError::into_inner);
        requests.push(request.clone());
        requests.len() - 1
    };
    let (status, payload) = match behaviour(index, &request) {
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
    stream.shutdown().await
}

/// Reads one request: its head, then `Content-Length` bytes of body. `None` when the peer closed first.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let header = |name: &str| head.lines().find_map(|l| l.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_string()));
    let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buf.len() < header_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(Request {
        method: head.split_whitespace().next().unwrap_or_default().to_string(),
        path: head.split_whitespace().nth(1).unwrap_or_default().to_string(),
        authorization: header("authorization"),
        body: serde_json::from_slice(&buf[header_end..]).unwrap_or(serde_json::Value::Null),
    }))
}
