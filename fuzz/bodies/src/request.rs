//! `agentrt serve`'s request bodies: `/v1/chat/completions` ([`parse_chat_request`]) and vLLM's LoRA
//! endpoints ([`parse_lora_load`], [`parse_lora_unload`]). The HTTP framing before them is hyper's; these are
//! what turns a body from anyone who can reach the port into what the engine samples.

use crate::violated;
use agentrt_serve::protocol::{parse_chat_request, parse_lora_load, parse_lora_unload, ApiError, ChatRequest, MAX_CHOICES};
use serde_json::{json, Value};

/// The chat request's fields that the parser reads: a `param` in an error names one of these (or a path
/// inside one, `messages[2].content`).
const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "tools",
    "response_format",
    "logit_bias",
    "top_logprobs",
    "temperature",
    "top_p",
    "top_k",
    "max_completion_tokens",
    "max_tokens",
    "n",
    "stop",
    "stream_options",
    "stream",
    "seed",
    "logprobs",
    "return_tokens_as_token_ids",
    "include_stop_str_in_output",
    "frequency_penalty",
    "presence_penalty",
    "tool_choice",
];

/// The message of a refusal of a field the parser does not know (OpenAI's words): its `param` is that
/// field, which the body holds at its top level.
const UNRECOGNIZED: &str = "Unrecognized request argument supplied: ";

/// The body given to each of the three parsers. A refusal is a 400 whose message says what is wrong and
/// whose `param`, when there is one, names a field the parser reads, or (the chat parser) a field of the
/// body it does not know, as its message says; a body that is not JSON says so. An
/// accepted chat request holds only values in range, and writing it back as a request parses to the same.
pub fn serve_request(data: &[u8]) {
    let body = serde_json::from_slice::<Value>(data).ok();
    let is_json = body.is_some();
    let check_error = |e: &ApiError, fields: &[&str]| {
        if e.status != 400 || e.message.trim().is_empty() {
            violated(&format!("a refusal that is not a 400 with a message: {e:?}"), data);
        }
        if let Some(param) = &e.param {
            let root = param.split(['[', '.']).next().unwrap_or_default();
            let unrecognized = e
                .message
                .strip_prefix(UNRECOGNIZED)
                .is_some_and(|name| name == param && !fields.contains(&name) && body.as_ref().and_then(Value::as_object).is_some_and(|o| o.contains_key(name)));
            if !fields.contains(&root) && !unrecognized {
                violated(&format!("a refusal naming `{param}`, not a field the parser reads: {e:?}"), data);
            }
        }
        if !is_json && !e.message.contains("not JSON") {
            violated(&format!("a body that is not JSON refused without saying so: {e:?}"), data);
        }
    };
    match parse_chat_request(data) {
        Ok(request) => {
            check_chat(&request, data);
            let again =
                parse_chat_request(&rewrite(&request)).unwrap_or_else(|e| violated(&format!("the accepted request, written back, is refused: {e:?}"), data));
            if !same_request(&request, &again) {
                violated(&format!("the accepted request, written back, parses differently:\n  {request:?}\n  {again:?}"), data);
            }
        }
        Err(e) => check_error(&e, CHAT_FIELDS),
    }
    match parse_lora_load(data) {
        Ok(load) => {
            if load.name.trim().is_empty() || load.path.trim().is_empty() {
                violated(&format!("a LoRA load with a blank name or path accepted: {load:?}"), data);
            }
        }
        Err(e) => check_error(&e, &["lora_name", "lora_path", "load_inplace"]),
    }
    match parse_lora_unload(data) {
        Ok(name) if name.trim().is_empty() => violated("a LoRA unload with a blank name accepted", data),
        Ok(_) => {}
        Err(e) => check_error(&e, &["lora_name"]),
    }
}

/// What an accepted request may hold.
fn check_chat(r: &ChatRequest, data: &[u8]) {
    let p = &r.params;
    let fine = !r.model.trim().is_empty()
        && !r.messages.is_empty()
        && r.messages.iter().all(|m| ["system", "user", "assistant", "tool"].contains(&m.role.as_str()))
        && (1..=MAX_CHOICES).contains(&p.n)
        && p.temperature.is_finite()
        && (0.0..=2.0).contains(&p.temperature)
        && p.top_p > 0.0
        && p.top_p <= 1.0
        && p.max_tokens >= 1
        && p.stop.iter().all(|s| !s.is_empty())
        && [p.frequency_penalty, p.presence_penalty].iter().all(|x| x.is_finite() && (-2.0..=2.0).contains(x));
    if !fine {
        violated(&format!("an accepted request holds a value out of range: {r:?}"), data);
    }
}

/// The request as a client would write it.
fn rewrite(r: &ChatRequest) -> Vec<u8> {
    let p = &r.params;
    let messages: Vec<Value> = r.messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect();
    let mut v = json!({
        "model": r.model,
        "messages": messages,
        "n": p.n,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": p.top_k,
        "max_tokens": p.max_tokens,
        "stop": p.stop,
        "stream": r.stream,
        "stream_options": {"include_usage": r.stream_usage},
        "logprobs": r.logprobs,
        "return_tokens_as_token_ids": r.tokens_as_ids,
        "include_stop_str_in_output": r.include_stop,
        "frequency_penalty": p.frequency_penalty,
        "presence_penalty": p.presence_penalty,
    });
    if let Some(seed) = r.seed {
        v["seed"] = json!(seed);
    }
    serde_json::to_vec(&v).expect("a JSON value serialises")
}

/// The same request, up to the last bit of a float read back from its shortest decimal form.
fn same_request(a: &ChatRequest, b: &ChatRequest) -> bool {
    let close = |x: f64, y: f64| x == y || (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs());
    let (p, q) = (&a.params, &b.params);
    a.model == b.model
        && a.messages.len() == b.messages.len()
        && a.messages.iter().zip(&b.messages).all(|(m, n)| m.role == n.role && m.content == n.content)
        && p.n == q.n
        && close(p.temperature, q.temperature)
        && close(p.top_p, q.top_p)
        && p.top_k == q.top_k
        && p.max_tokens == q.max_tokens
        && p.frequency_penalty == q.frequency_penalty
        && p.presence_penalty == q.presence_penalty
        && p.stop == q.stop
        && a.stream == b.stream
        && a.stream_usage == b.stream_usage
        && a.seed == b.seed
        && a.logprobs == b.logprobs
        && a.tokens_as_ids == b.tokens_as_ids
        && a.include_stop == b.include_stop
}
