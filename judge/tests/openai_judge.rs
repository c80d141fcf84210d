//! The LLM judge against a real HTTP server on loopback that speaks the chat-completions API.
//! Nothing here touches the network beyond 127.0.0.1.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

mod common;

use agentrt_judge::{judge_batch, Judge, JudgeError, JudgeInput, JudgeOptions, OpenAiJudge, OpenAiJudgeConfig, VerdictLabel, PROMPT_VERSION};
use common::{graded_response, start, Reply};
use std::path::Path;
use std::time::{Duration, Instant};

/// Fast options for tests: short timeout and backoff, no cache unless given, no judge-level limit.
fn options(cache_dir: Option<&Path>) -> JudgeOptions {
    JudgeOptions {
        cache_dir: cache_dir.map(Path::to_path_buf),
        timeout: Duration::from_secs(5),
        max_retries: 3,
        backoff_base: Duration::from_millis(10),
        max_tokens: 16,
        max_concurrency: 0,
    }
}

fn judge_at(base_url: &str, options: JudgeOptions) -> OpenAiJudge {
    OpenAiJudge::new(OpenAiJudgeConfig { model: "judge-test".into(), base_url: base_url.into(), api_key: Some("sk-test".into()), options })
        .expect("build judge")
}

fn item(response: &str) -> JudgeInput {
    JudgeInput::new("Which team won Super Bowl 50?", ["Denver Broncos", "Broncos"], response)
}

#[tokio::test]
async fn verdicts_are_read_strictly_from_the_first_word() {
    // The server answers with the graded response itself, so each item picks its own reply.
    let server = start(|_, request| Reply::Content(graded_response(request))).await;
    let judge = judge_at(&server.base_url, options(None));
    let cases = [
        ("Yes.", 1.0, VerdictLabel::Correct),
        ("no", 0.0, VerdictLabel::Incorrect),
        ("The answer is yes", 0.0, VerdictLabel::Unparsable),
        ("@@ garbage ##", 0.0, VerdictLabel::Unparsable),
    ];
    for (reply, reward, label) in cases {
        let verdict = judge.judge(&item(reply)).await.expect("verdict");
        assert_eq!((verdict.reward, verdict.label), (reward, label), "{reply:?}");
        assert_eq!(verdict.raw, reply, "raw keeps the reply verbatim");
    }
    assert_eq!(server.request_count(), cases.len());

    // The request: model, temperature 0, max tokens, the prompt with question, aliases and response.
    let request = server.requests()[0].body.clone();
    assert_eq!(request["model"], "judge-test");
    assert_eq!(request["temperature"], 0.0);
    assert_eq!(request["max_tokens"], 16);
    let prompt = request["messages"][0]["content"].as_str().unwrap();
    assert!(prompt.contains("Question: Which team won Super Bowl 50?"), "{prompt}");
    assert!(prompt.contains("Gold answer(s): Denver Broncos | Broncos"), "{prompt}");
    assert!(prompt.contains("Response: Yes."), "{prompt}");
    assert!(prompt.ends_with("Is the response correct and coherent? Answer yes or no."), "{prompt}");
    assert_eq!(server.requests()[0].authorization.as_deref(), Some("Bearer sk-test"));
}

#[tokio::test]
async fn only_the_answer_tag_is_sent() {
    let server = start(|_, _| Reply::Content("yes".into())).await;
    let judge = judge_at(&server.base_url, options(None));
    judge.judge(&item("I looked it up. <answer>Denver Broncos</answer> Done.")).await.unwrap();
    assert_eq!(graded_response(&server.requests()[0]), "Denver Broncos");
}

#[tokio::test]
async fn a_500_is_retried_then_succeeds() {
    let server = start(|index, _| if index == 0 { Reply::Status(500, "model is loading".into()) } else { Reply::Content("Yes".into()) }).await;
    let judge = judge_at(&server.base_url, options(None));
    let verdict = judge.judge(&item("Denver Broncos")).await.expect("retried to success");
    assert_eq!(verdict.label, VerdictLabel::Correct);
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn persistent_5xx_gives_up_after_the_retries() {
    let server = start(|_, _| Reply::Status(503, "overloaded".into())).await;
    let mut opts = options(None);
    opts.max_retries = 2;
    let judge = judge_at(&server.base_url, opts);
    let err = judge.judge(&item("Denver Broncos")).await.unwrap_err();
    assert!(matches!(err, JudgeError::Http { status: 503, attempts: 3, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&server.endpoint()) && message.contains("overloaded"), "{message}");
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn a_hang_times_out_with_an_error_naming_the_endpoint() {
    let server = start(|_, _| Reply::Hang).await;
    let mut opts = options(None);
    opts.timeout = Duration::from_millis(300);
    opts.max_retries = 1;
    let judge = judge_at(&server.base_url, opts);
    let started = Instant::now();
    let err = judge.judge(&item("Denver Broncos")).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, JudgeError::Timeout { attempts: 2, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&server.endpoint()), "{message}");
    assert!(message.contains("did not answer within"), "{message}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    assert_eq!(server.request_count(), 2, "timeouts are retried");
}

#[tokio::test]
async fn a_401_is_not_retried_and_says_what_to_fix() {
    let body = r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#;
    let server = start(move |_, _| Reply::Status(401, body.into())).await;
    let judge = judge_at(&server.base_url, options(None));
    let err = judge.judge(&item("Denver Broncos")).await.unwrap_err();
    assert!(matches!(err, JudgeError::Http { status: 401, attempts: 1, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&server.endpoint()), "{message}");
    assert!(message.contains("HTTP 401"), "{message}");
    assert!(message.contains("Incorrect API key provided"), "{message}");
    assert!(message.contains("AGENTRT_JUDGE_API_KEY"), "{message}");
    assert_eq!(server.request_count(), 1, "4xx must not be retried");
}

#[tokio::test]
async fn a_refused_connection_is_a_clear_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let base_url = format!("http://127.0.0.1:{port}/v1");
    let mut opts = options(None);
    opts.max_retries = 1;
    let judge = judge_at(&base_url, opts);
    let err = judge.judge(&item("Denver Broncos")).await.unwrap_err();
    assert!(matches!(err, JudgeError::Connection { attempts: 2, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&format!("{base_url}/chat/completions")), "{message}");
}

#[tokio::test]
async fn a_reply_that_is_not_a_completion_is_reported() {
    let server = start(|_, _| Reply::Raw("<html>proxy login</html>".into())).await;
    let judge = judge_at(&server.base_url, options(None));
    let err = judge.judge(&item("Denver Broncos")).await.unwrap_err();
    assert!(matches!(err, JudgeError::BadResponse { .. }), "{err:?}");
    assert!(err.to_string().contains(&server.endpoint()), "{err}");
    assert_eq!(server.request_count(), 1);

    let server = start(|_, _| Reply::Raw(r#"{"error":"no such model"}"#.into())).await;
    let judge = judge_at(&server.base_url, options(None));
    let err = judge.judge(&item("Denver Broncos")).await.unwrap_err();
    assert!(err.to_string().contains("no such model"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_hold_the_concurrency_bound_and_keep_order() {
    // Later requests answer sooner, so completion order differs from submission order.
    let server = start(|index, request| {
        let pause = Duration::from_millis(150 - (index as u64 % 5) * 25);
        Reply::Delayed(pause, graded_response(request))
    })
    .await;
    let judge = judge_at(&server.base_url, options(None));
    let items: Vec<JudgeInput> = (0..12).map(|i| item(&format!("{} ({i})", if i % 3 == 0 { "no" } else { "yes" }))).collect();
    let verdicts = judge_batch(&judge, &items, 3).await;
    assert_eq!(server.request_count(), 12);
    assert_eq!(server.max_in_flight(), 3, "the bound is reached and never exceeded");
    for (i, verdict) in verdicts.into_iter().enumerate() {
        let verdict = verdict.expect("verdict");
        let want = if i % 3 == 0 { VerdictLabel::Incorrect } else { VerdictLabel::Correct };
        assert_eq!(verdict.label, want, "item {i} out of order: {verdict:?}");
        assert!(verdict.raw.ends_with(&format!("({i})")), "item {i}: {verdict:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_judge_bound_holds_across_callers() {
    let server = start(|_, _| Reply::Delayed(Duration::from_millis(80), "yes".into())).await;
    let mut opts = options(None);
    opts.max_concurrency = 2;
    let judge = judge_at(&server.base_url, opts);
    let items: Vec<JudgeInput> = (0..8).map(|i| item(&format!("Broncos {i}"))).collect();
    // Two callers, each allowing 4 in flight: the judge's own limit of 2 still holds.
    let (a, b) = tokio::join!(judge_batch(&judge, &items[..4], 4), judge_batch(&judge, &items[4..], 4));
    assert!(a.iter().chain(b.iter()).all(|v| v.is_ok()));
    assert_eq!(server.request_count(), 8);
    assert_eq!(server.max_in_flight(), 2);
}

#[tokio::test]
async fn the_cache_answers_the_second_call() {
    let server = start(|_, _| Reply::Content("Yes, it matches.".into())).await;
    let dir = tempfile::tempdir().unwrap();
    let judge = judge_at(&server.base_url, options(Some(dir.path())));
    let first = judge.judge(&item("Denver Broncos")).await.unwrap();
    let second = judge.judge(&item("Denver Broncos")).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(server.request_count(), 1, "the second call is a cache hit");

    // A re-run (a new judge on the same directory) costs nothing either.
    let rerun = judge_at(&server.base_url, options(Some(dir.path())));
    assert_eq!(rerun.judge(&item("Denver Broncos")).await.unwrap(), first);
    assert_eq!(server.request_count(), 1);

    // Any change in the key's fields misses: response, answers, question, model.
    judge.judge(&item("Broncos")).await.unwrap();
    assert_eq!(server.request_count(), 2);
    let mut other_answers = item("Denver Broncos");
    other_answers.answers.push("DEN".into());
    judge.judge(&other_answers).await.unwrap();
    assert_eq!(server.request_count(), 3);
    let other_model = OpenAiJudge::new(OpenAiJudgeConfig {
        model: "another-judge".into(),
        base_url: server.base_url.clone(),
        api_key: None,
        options: options(Some(dir.path())),
    })
    .unwrap();
    other_model.judge(&item("Denver Broncos")).await.unwrap();
    assert_eq!(server.request_count(), 4);

    // The entry is one JSON file holding the key (with the prompt version) and the verdict.
    let key = judge.cache_key(&item("Denver Broncos"));
    assert_eq!(key.prompt_version, PROMPT_VERSION);
    let stored: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join(format!("{}.json", key.digest()))).unwrap()).unwrap();
    assert_eq!(stored["verdict"]["label"], "correct");
    assert_eq!(stored["key"]["model"], "judge-test");
}

#[tokio::test]
async fn errors_are_not_cached() {
    let server =
        start(|index, _| if index == 0 { Reply::Status(400, r#"{"error":{"message":"bad request"}}"#.into()) } else { Reply::Content("no".into()) }).await;
    let dir = tempfile::tempdir().unwrap();
    let judge = judge_at(&server.base_url, options(Some(dir.path())));
    assert!(judge.judge(&item("Panthers")).await.is_err());
    let verdict = judge.judge(&item("Panthers")).await.unwrap();
    assert_eq!(verdict.label, VerdictLabel::Incorrect);
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn spec_builds_a_working_judge() {
    let server = start(|_, _| Reply::Content("yes".into())).await;
    let spec: agentrt_judge::JudgeSpec = format!("openai:judge-test@{}", server.base_url).parse().unwrap();
    let judge = spec.build(&options(None)).unwrap();
    assert_eq!(judge.name(), format!("openai:judge-test@{}", server.base_url));
    assert_eq!(judge.judge(&item("Denver Broncos")).await.unwrap().reward, 1.0);
}
