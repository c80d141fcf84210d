//! The loopback chat-completions server the judge's tests run against (`agentrt_openai::loopback_server`), and
//! how they read the judge's prompt off a request.

#![allow(dead_code)]

pub use agentrt_openai::loopback_server::{start, Reply, Request};

/// The `Response: …` line of the judge prompt in a request.
pub fn graded_response(request: &Request) -> String {
    let prompt = request.body["messages"][0]["content"].as_str().unwrap_or_default();
    prompt.lines().find_map(|line| line.strip_prefix("Response: ")).unwrap_or_default().to_string()
}
