//! The client against a real HTTP server on loopback, written for these tests: just enough HTTP/1.1 for
//! reqwest (one request per connection, `Connection: close`). Nothing here leaves 127.0.0.1.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_openai::wire::{ChatCompletionRequest, ChatMessage, LoadLoraAdapter, UnloadLoraAdapter, CHAT_COMPLETIONS_PATH};
use agentrt_openai::{Client, ClientConfig, ClientError, Retry};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
enum Answer {
    /// This status with this body.
    Status(u16, String),
    /// Read the request, then never answer.
    Hang,
}

/// One request as the server read it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    authorization: Option<String>,
    body: serde_json::Value,
}

struct Server {
    base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

type Behaviour = dyn Fn(usize) -> Answer + Send + Sync;

/// Starts a server on 127.0.0.1:0; `behaviour(index)` decides the reply to the `index`th request.
async fn start(behaviour: impl Fn(usize) -> Answer + Send + Sync + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let behaviour: Arc<Behaviour> = Arc::new(behaviour);
    let task_seen = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (seen, behaviour) = (task_seen.clone(), behaviour.clone());
            tokio::spawn(async move {
                let _ = serve(stream, seen, behaviour).await;
            });
        }
    });
    Server { base_url, seen }
}

async fn serve(mut stream: TcpStream, seen: Arc<Mutex<Vec<Seen>>>, behaviour: Arc<Behaviour>) -> std::io::Result<()> {
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
    let path = head.split_whitespace().nth(1).unwrap_or_default().to_string();
    let header = |name: &str| head.lines().find_map(|l| l.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_string()));
    let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buf.len() < header_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[header_end..]).unwrap_or(serde_json::Value::Null);
    let index = {
        let mut seen = seen.lock().unwrap();
        seen.push(Seen { path, authorization: header("authorization"), body });
        seen.len() - 1
    };
    let (status, payload) = match behaviour(index) {
        Answer::Status(status, payload) => (status, payload),
        Answer::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return Ok(());
        }
    };
    let response =
        format!("HTTP/1.1 {status} Status\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}", payload.len());
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

fn completion(content: &str) -> Answer {
    let reply = serde_json::json!({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    });
    Answer::Status(200, reply.to_string())
}

/// A client with a short timeout and backoff.
fn client(base_url: &str, api_key: Option<&str>, max_retries: u32) -> Client {
    Client::new(ClientConfig {
        base_url: base_url.into(),
        api_key: api_key.map(str::to_string),
        timeout: Duration::from_secs(5),
        retry: Retry { max_retries, backoff_base: Duration::from_millis(10) },
    })
    .unwrap()
}

fn request() -> ChatCompletionRequest {
    ChatCompletionRequest {
        model: "m".into(),
        messages: vec![ChatMessage::user("Is it Paris?")],
        temperature: Some(0.0),
        max_tokens: Some(16),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_completion_is_sent_with_the_key_and_read() {
    let server = start(|_| completion("yes")).await;
    let reply = client(&server.base_url, Some("sk-test"), 0).chat_completion(&request()).await.unwrap();
    assert_eq!(reply.choices[0].message.content.as_deref(), Some("yes"));
    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, format!("/v1{CHAT_COMPLETIONS_PATH}"));
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(seen[0].body, serde_json::to_value(request()).unwrap());
}

#[tokio::test]
async fn no_key_sends_no_authorization_header() {
    let server = start(|_| completion("yes")).await;
    client(&server.base_url, None, 0).chat_completion(&request()).await.unwrap();
    client(&server.base_url, Some(""), 0).chat_completion(&request()).await.unwrap();
    assert!(server.requests().iter().all(|s| s.authorization.is_none()), "{:?}", server.requests());
}

#[tokio::test]
async fn a_5xx_is_retried_until_it_succeeds() {
    let server = start(|index| if index < 2 { Answer::Status(503, "loading".into()) } else { completion("yes") }).await;
    let reply = client(&server.base_url, None, 3).chat_completion(&request()).await.unwrap();
    assert_eq!(reply.choices[0].message.content.as_deref(), Some("yes"));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_persistent_5xx_names_the_endpoint_the_status_and_the_body() {
    let server = start(|_| Answer::Status(500, "model is loading".into())).await;
    let err = client(&server.base_url, None, 2).chat_completion(&request()).await.unwrap_err();
    assert!(matches!(err, ClientError::Http { status: 500, attempts: 3, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.starts_with(&format!("{}/chat/completions answered HTTP 500", server.base_url)), "{message}");
    assert!(message.contains("model is loading"), "{message}");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_4xx_is_not_retried() {
    let server = start(|_| Answer::Status(401, r#"{"error":{"message":"Incorrect API key provided"}}"#.into())).await;
    let err = client(&server.base_url, Some("sk-wrong"), 3).chat_completion(&request()).await.unwrap_err();
    assert!(matches!(err, ClientError::Http { status: 401, attempts: 1, .. }), "{err:?}");
    assert!(!err.is_transient());
    assert!(err.to_string().contains("Incorrect API key provided"), "{err}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_named() {
    let base_url = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", listener.local_addr().unwrap())
    };
    let err = client(&base_url, None, 1).chat_completion(&request()).await.unwrap_err();
    assert!(matches!(err, ClientError::Connection { attempts: 2, .. }), "{err:?}");
    assert_eq!(err.endpoint(), format!("{base_url}/chat/completions"));
    assert!(err.to_string().contains(&format!("{base_url}/chat/completions could not be reached")), "{err}");
}

#[tokio::test]
async fn a_hang_is_a_timeout_and_is_retried() {
    let server = start(|_| Answer::Hang).await;
    let client = Client::new(ClientConfig {
        base_url: server.base_url.clone(),
        api_key: None,
        timeout: Duration::from_millis(300),
        retry: Retry { max_retries: 1, backoff_base: Duration::from_millis(10) },
    })
    .unwrap();
    let err = client.chat_completion(&request()).await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout { attempts: 2, .. }), "{err:?}");
    assert!(err.to_string().contains("did not answer within 300ms"), "{err}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_reply_that_is_not_a_completion_is_not_retried() {
    let server = start(|_| Answer::Status(200, r#"{"error":"no such model"}"#.into())).await;
    let err = client(&server.base_url, None, 3).chat_completion(&request()).await.unwrap_err();
    assert!(matches!(err, ClientError::BadResponse { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&format!("{}/chat/completions", server.base_url)) && message.contains("no such model"), "{message}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn lora_adapters_are_loaded_and_unloaded_by_name() {
    let server = start(|_| Answer::Status(200, "Success".into())).await;
    let client = client(&server.base_url, None, 0);
    let load = LoadLoraAdapter { lora_name: "m-step-1".into(), lora_path: "/runs/a/step-1".into(), load_inplace: true };
    assert_eq!(client.load_lora_adapter(&load).await.unwrap(), "Success");
    client.unload_lora_adapter(&UnloadLoraAdapter { lora_name: "m-step-1".into() }).await.unwrap();
    let seen = server.requests();
    assert_eq!(seen[0].path, "/v1/load_lora_adapter");
    assert_eq!(seen[0].body, serde_json::json!({"lora_name": "m-step-1", "lora_path": "/runs/a/step-1", "load_inplace": true}));
    assert_eq!(seen[1].path, "/v1/unload_lora_adapter");
    assert_eq!(seen[1].body, serde_json::json!({"lora_name": "m-step-1"}));
}
