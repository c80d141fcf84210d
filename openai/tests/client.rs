//! The client against a real HTTP server on loopback (`agentrt_openai::loopback_server`). Nothing here leaves
//! 127.0.0.1.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_openai::loopback_server::{start, Reply};
use agentrt_openai::wire::{ChatCompletionRequest, ChatMessage, LoadLoraAdapter, UnloadLoraAdapter, CHAT_COMPLETIONS_PATH, MODELS_PATH};
use agentrt_openai::{Client, ClientConfig, ClientError, Retry};
use std::time::Duration;

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
    let server = start(|_, _| Reply::Content("yes".into())).await;
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
    let server = start(|_, _| Reply::Content("yes".into())).await;
    client(&server.base_url, None, 0).chat_completion(&request()).await.unwrap();
    client(&server.base_url, Some(""), 0).chat_completion(&request()).await.unwrap();
    assert!(server.requests().iter().all(|s| s.authorization.is_none()), "{:?}", server.requests());
}

#[tokio::test]
async fn a_5xx_is_retried_until_it_succeeds() {
    let server = start(|index, _| if index < 2 { Reply::Status(503, "loading".into()) } else { Reply::Content("yes".into()) }).await;
    let reply = client(&server.base_url, None, 3).chat_completion(&request()).await.unwrap();
    assert_eq!(reply.choices[0].message.content.as_deref(), Some("yes"));
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn a_persistent_5xx_names_the_endpoint_the_status_and_the_body() {
    let server = start(|_, _| Reply::Status(500, "model is loading".into())).await;
    let err = client(&server.base_url, None, 2).chat_completion(&request()).await.unwrap_err();
    assert!(matches!(err, ClientError::Http { status: 500, attempts: 3, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.starts_with(&format!("{}/chat/completions answered HTTP 500", server.base_url)), "{message}");
    assert!(message.contains("model is loading"), "{message}");
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn a_4xx_is_not_retried() {
    let server = start(|_, _| Reply::Status(401, r#"{"error":{"message":"Incorrect API key provided"}}"#.into())).await;
    let err = client(&server.base_url, Some("sk-wrong"), 3).chat_completion(&request()).await.unwrap_err();
    assert!(matches!(err, ClientError::Http { status: 401, attempts: 1, .. }), "{err:?}");
    assert!(!err.is_transient());
    assert!(err.to_string().contains("Incorrect API key provided"), "{err}");
    assert_eq!(server.request_count(), 1);
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
    let server = start(|_, _| Reply::Hang).await;
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
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn a_reply_that_is_not_a_completion_is_not_retried() {
    let server = start(|_, _| Reply::Status(200, r#"{"error":"no such model"}"#.into())).await;
    let err = client(&server.base_url, None, 3).chat_completion(&request()).await.unwrap_err();
    assert!(matches!(err, ClientError::BadResponse { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&format!("{}/chat/completions", server.base_url)) && message.contains("no such model"), "{message}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn lora_adapters_are_loaded_and_unloaded_by_name() {
    let server = start(|_, _| Reply::Status(200, "Success".into())).await;
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

#[tokio::test]
async fn the_models_list_is_a_get_read_with_each_cards_agent_settings() {
    let list = serde_json::json!({"object": "list", "data": [
        {"id": "base", "object": "model", "created": 1, "owned_by": "agentrt", "parent": null},
        {"id": "wiki", "object": "model", "created": 1, "owned_by": "agentrt", "parent": "base", "agent_settings": {"model": "base", "max_turns": 2}},
    ]});
    let server = start(move |index, _| if index == 0 { Reply::Raw(list.to_string()) } else { Reply::Raw("{\"models\": []}".into()) }).await;
    let client = client(&server.base_url, Some("sk-test"), 0);
    let models = client.models().await.unwrap();
    assert_eq!(models.data.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["base", "wiki"]);
    assert_eq!((&models.data[0].agent_settings, models.data[1].agent_settings.as_ref().map(|s| &s["max_turns"])), (&None, Some(&serde_json::json!(2))));
    let seen = server.requests();
    assert_eq!((seen[0].method.as_str(), seen[0].path.as_str(), seen[0].authorization.as_deref()), ("GET", "/v1/models", Some("Bearer sk-test")));
    // A body without `data` (not an OpenAI-compatible list) is an error naming the endpoint.
    let err = client.models().await.unwrap_err();
    assert!(matches!(err, ClientError::BadResponse { .. }) && err.to_string().contains(&format!("{}{MODELS_PATH}", server.base_url)), "{err}");
}
