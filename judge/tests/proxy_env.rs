//! Proxy variables in the environment must not send loopback judge requests elsewhere.
//! (Its own test binary: the variables it sets would leak into other tests.)

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

mod common;

use agentrt_judge::{Judge, JudgeInput, JudgeOptions, OpenAiJudge, OpenAiJudgeConfig, VerdictLabel};
use common::{start, Reply};
use std::time::Duration;

#[tokio::test]
async fn loopback_requests_ignore_proxy_variables() {
    // A proxy that does not exist: a request sent there would fail to connect.
    for name in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
        std::env::set_var(name, "http://127.0.0.1:9");
    }
    for name in ["NO_PROXY", "no_proxy"] {
        std::env::remove_var(name);
    }
    let server = start(|_, _| Reply::Content("yes".into())).await;
    let judge = OpenAiJudge::new(OpenAiJudgeConfig {
        model: "judge-test".into(),
        base_url: server.base_url.clone(),
        api_key: None,
        options: JudgeOptions { cache_dir: None, timeout: Duration::from_secs(5), max_retries: 0, ..JudgeOptions::default() },
    })
    .unwrap();
    let verdict = judge.judge(&JudgeInput::new("q", ["a"], "a")).await.expect("reached the server directly");
    assert_eq!(verdict.label, VerdictLabel::Correct);
    assert_eq!(server.request_count(), 1);
}
