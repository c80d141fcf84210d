//! `agentrt serve` as users run it, on loopback with tiny random models: it answers with the same tokens as
//! `agentrt generate` at temperature 0, streamed or not; `agentrt eval --policy openai:` against it plays
//! the same episodes as `agentrt eval --adapter` (the adapter's own agent.json, the same model tokens); its
//! response ids never repeat across starts; and `agentrt train` samples from two servers, loading each
//! step's adapter on both and recording the server-trainer log-prob gap.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use crate::common::{agentrt, metrics, questions, read_json, read_jsonl, set_flag, succeed, tiny_model, train_args};

/// A running `agentrt serve`, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(model: &Path, adapters: &[String]) -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut cmd = agentrt();
        cmd.args(["serve", "--model", model.to_str().unwrap(), "--served-model-name", "tiny", "--port", "0"]);
        // Training loads each step's adapter at runtime, from the run it writes beside the model.
        cmd.args(["--allow-runtime-lora", "--lora-root", model.parent().unwrap().to_str().unwrap()]);
        for a in adapters {
            cmd.args(["--adapter", a]);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.starts_with("http://127.0.0.1:"), "serve printed {line:?}");
        Server { child, url: line.trim().to_string() }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tiny model directory and a trained-looking adapter for it (random `B`, so it changes the model).
fn model_and_adapter(dir: &Path) -> (PathBuf, PathBuf) {
    let model = tiny_model(dir);
    let mut p = agentrt_policy::Policy::load(&agentrt_policy::ModelSource::Path(model.clone()), &agentrt_policy::Device::Cpu).unwrap();
    p.init_adapters(agentrt_policy::LoraConfig { rank: 4, alpha: 8.0, ..Default::default() }, 3).unwrap();
    p.adapters.as_ref().unwrap().randomize_b(0.3, 1).unwrap();
    let adapter = dir.join("adapter");
    p.save_adapters(&adapter).unwrap();
    (model, adapter)
}

async fn post(url: &str, body: serde_json::Value) -> String {
    let r = reqwest::Client::new().post(format!("{url}/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_answers_with_the_tokens_of_generate_streamed_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let (model, adapter) = model_and_adapter(dir.path());
    let server = Server::start(&model, &[format!("trained={}", adapter.display())]);
    let (system, prompt) = ("You answer questions.", "Who discovered oxygen?");
    for (name, adapter_flag) in [("tiny", None), ("trained", Some(&adapter))] {
        let mut generate = agentrt();
        generate.args(["generate", "--model", model.to_str().unwrap(), "--system", system, "--prompt", prompt, "--max-tokens", "24"]);
        if let Some(a) = adapter_flag {
            generate.args(["--adapter", a.to_str().unwrap()]);
        }
        let expected = succeed(&mut generate);
        let expected = expected.strip_suffix('\n').unwrap();
        let body = serde_json::json!({"model": name, "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            "temperature": 0, "max_tokens": 24});
        let whole: serde_json::Value = serde_json::from_str(&post(&server.url, body.clone()).await).unwrap();
        assert_eq!(whole["choices"][0]["message"]["content"], expected, "{name}: serve and generate differ");
        let mut streamed = body;
        streamed["stream"] = true.into();
        let text: String = post(&server.url, streamed)
            .await
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).unwrap()["choices"][0]["delta"]["content"].as_str().map(str::to_string))
            .collect();
        assert_eq!(text, expected, "{name}: the stream adds up to something else");
    }
}

/// One field of each turn of each episode an evaluation's transcript records, by question.
fn turn_fields<T: Ord>(eval_dir: &Path, field: impl Fn(&serde_json::Value) -> T) -> Vec<(String, Vec<T>)> {
    let mut r: Vec<(String, Vec<T>)> = read_jsonl(&eval_dir.join("transcripts.jsonl"))
        .into_iter()
        .map(|v| {
            let e = if v["episode"].is_null() { v } else { v["episode"].clone() };
            let turns = e["turns"].as_array().unwrap().iter().map(&field).collect();
            (e["question"]["id"].as_str().unwrap().to_string(), turns)
        })
        .collect();
    r.sort();
    r
}

/// Each episode's replies, by question.
fn replies(eval_dir: &Path) -> Vec<(String, Vec<String>)> {
    turn_fields(eval_dir, |t| t["reply"].as_str().unwrap().to_string())
}

#[test]
fn eval_through_serve_plays_the_episodes_of_eval_with_the_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let (model, adapter) = model_and_adapter(dir.path());
    let qs = questions(dir.path());
    let server = Server::start(&model, &[format!("trained={}", adapter.display())]);
    let common = ["eval", "--fixture", "--questions", qs.to_str().unwrap(), "--split", "train", "--max-turns", "1", "--max-new-tokens", "24"];
    let local = dir.path().join("local");
    succeed(agentrt().args(common).args(["--model", model.to_str().unwrap(), "--adapter", adapter.to_str().unwrap(), "--output-dir", local.to_str().unwrap()]));
    let served = dir.path().join("served");
    let spec = format!("openai:trained@{}", server.url);
    succeed(agentrt().args(common).args(["--policy", &spec, "--output-dir", served.to_str().unwrap()]));
    let (l, s) = (replies(&local), replies(&served));
    assert_eq!(l.len(), 3);
    assert_eq!(l, s, "the served adapter replied differently from the local one");
}

/// Each episode's reply tokens as its transcript records them, by question.
fn reply_tokens(eval_dir: &Path) -> Vec<(String, Vec<u64>)> {
    turn_fields(eval_dir, |t| t["reply_tokens"].as_u64().unwrap())
}

/// A served adapter is played as it was trained without a flag: the server lists its agent.json in
/// `/v1/models`, and `eval --policy openai:` plays its prompt, turns and reply length, as `eval --adapter`
/// does, replying alike and counting the same model tokens (the server's `usage`; they were 0). Settings
/// given with `--agent-settings` that differ from the server's are played, with a warning naming both.
#[test]
fn eval_through_serve_plays_the_adapters_own_settings_and_counts_its_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let (model, adapter) = model_and_adapter(dir.path());
    // None of these is the default (the short prompt, the demonstration, 3 turns, 160 tokens).
    let trained =
        serde_json::json!({"model": "tiny", "system_prompt": "You are a terse test agent.", "demonstration": false, "max_turns": 2, "max_new_tokens": 24});
    std::fs::write(adapter.join("agent.json"), trained.to_string()).unwrap();
    let qs = questions(dir.path());
    let server = Server::start(&model, &[format!("trained={}", adapter.display())]);
    let common = ["eval", "--fixture", "--questions", qs.to_str().unwrap(), "--split", "train"];
    let local = dir.path().join("local");
    succeed(agentrt().args(common).args(["--model", model.to_str().unwrap(), "--adapter", adapter.to_str().unwrap(), "--output-dir", local.to_str().unwrap()]));
    let served = dir.path().join("served");
    let spec = format!("openai:trained@{}", server.url);
    let played = agentrt().args(common).args(["--policy", &spec, "--output-dir", served.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&played.stderr);
    assert!(played.status.success(), "{stderr}");
    let warned = stderr.lines().any(|l| l.contains("WARN") && (l.contains("agent settings") || l.contains("token counts")));
    assert!(!warned, "the served evaluation could not use the server's settings or counts:\n{stderr}");

    let (l, s) = (read_json(&local.join("results.json")), read_json(&served.join("results.json")));
    assert!(l["info"]["system_prompt"].as_str().unwrap().starts_with("You are a terse test agent."), "{}", l["info"]);
    for key in ["system_prompt", "demonstration", "max_turns"] {
        assert_eq!(s["info"][key], l["info"][key], "{key}: the served evaluation did not play the adapter's agent.json");
    }
    assert_eq!(replies(&served), replies(&local), "the served adapter replied differently from the local one");
    let tokens = reply_tokens(&local);
    assert!(tokens.iter().all(|(_, t)| t.iter().all(|&n| n > 0)), "{tokens:?}");
    assert_eq!(reply_tokens(&served), tokens, "the served replies' tokens are not the local ones'");
    let avg = l["metrics"]["avg_model_tokens"].as_f64().unwrap();
    assert!(avg > 0.0 && s["metrics"]["avg_model_tokens"].as_f64() == Some(avg), "local {avg}, served {}", s["metrics"]["avg_model_tokens"]);

    // Settings of the caller's that are not the server's: played as asked, with both named.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let mut given = trained.clone();
    given["max_turns"] = 1.into();
    std::fs::write(other.join("agent.json"), given.to_string()).unwrap();
    let overridden = dir.path().join("overridden");
    let played = agentrt()
        .args(common)
        .args(["--policy", &spec, "--agent-settings", other.to_str().unwrap(), "--output-dir", overridden.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&played.stderr);
    assert!(played.status.success(), "{stderr}");
    let warning = stderr.lines().find(|l| l.contains("WARN") && l.contains("--agent-settings")).unwrap_or_else(|| panic!("no warning:\n{stderr}"));
    assert!(
        warning.contains(&other.display().to_string()) && warning.contains(&format!("{}/models", server.url)) && warning.contains("max_turns"),
        "{warning}"
    );
    assert_eq!(read_json(&overridden.join("results.json"))["info"]["max_turns"], 1);
}

/// Response ids are unique across two starts of the server (they were `chatcmpl-0`, `chatcmpl-1`, … again
/// at every start), and each request's log line still names its id.
#[test]
fn response_ids_never_repeat_across_server_starts_and_name_their_log_lines() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let mut ids = Vec::new();
    for _start in 0..2 {
        let (mut child, url) = serve_with_env(&model, &[]);
        let (lines, logged) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let body = serde_json::json!({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
        let mine: Vec<String> = (0..2)
            .map(|_| {
                let (status, text) = post_blocking(&format!("{url}/chat/completions"), body.clone());
                assert_eq!(status, 200, "{text}");
                serde_json::from_str::<serde_json::Value>(&text).unwrap()["id"].as_str().unwrap().to_string()
            })
            .collect();
        // The log line comes as the reply is handed over: wait for it rather than for a fixed time.
        let mut unseen: Vec<&String> = mine.iter().collect();
        while !unseen.is_empty() {
            let line = logged.recv_timeout(std::time::Duration::from_secs(30)).unwrap_or_else(|_| panic!("no log line names {unseen:?}"));
            unseen.retain(|id| !(line.contains(&format!("id={id}")) && line.contains("request done")));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        ids.extend(mine);
    }
    for id in &ids {
        let hex = id.strip_prefix("chatcmpl-").unwrap_or_else(|| panic!("{id}: not chatcmpl-…"));
        assert!(hex.len() == 24 && hex.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "a response id repeated: {ids:?}");
}

#[test]
fn training_samples_on_two_servers_keeps_them_on_policy_and_records_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = model_and_adapter(dir.path());
    let qs = questions(dir.path());
    let (a, b) = (Server::start(&model, &[]), Server::start(&model, &[]));
    let out = dir.path().join("runs");
    let mut args = train_args(&model, &qs, &out, "served", 2);
    args.extend(["--set".to_string(), format!("rollout.sampler=openai:tiny@{},{}", a.url, b.url)]);
    succeed(agentrt().args(&args));
    let run = out.join("served");
    let steps = metrics(&run);
    assert_eq!(steps.len(), 2);
    for m in &steps {
        assert!(m["logprob_gap_tokens"].as_u64().unwrap() > 0, "no gap measured: {m}");
        assert!(m["logprob_gap_abs_mean"].as_f64().unwrap().is_finite(), "{m}");
    }
    // Step 2 sampled with the adapter after one update, on both servers; the run unloaded what it loaded.
    assert!(run.join("served-adapters/step-1/adapter_config.json").is_file());
    let rt = tokio::runtime::Runtime::new().unwrap();
    for s in [&a, &b] {
        let (models, health): (serde_json::Value, serde_json::Value) = rt.block_on(async {
            (
                reqwest::get(format!("{}/models", s.url)).await.unwrap().json().await.unwrap(),
                reqwest::get(s.url.replace("/v1", "/health")).await.unwrap().json().await.unwrap(),
            )
        });
        let ids: Vec<&str> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["tiny"], "{}: the run left an adapter loaded", s.url);
        assert!(health["engine"]["sequences"].as_u64().unwrap() > 0, "server {} sampled nothing", s.url);
    }

    // GRPO skips a group whose rewards are all equal (the random model's are all 0): no sample reaches the
    // update, and the gap is still measured, on the skipped samples.
    let mut args = train_args(&model, &qs, &out, "skipped", 1);
    set_flag(&mut args, "--advantage", "grpo");
    args.extend(["--set".to_string(), format!("rollout.sampler=openai:tiny@{},{}", a.url, b.url)]);
    // (A run that trained nothing fails, after writing its metrics.)
    let trained_nothing = agentrt().args(&args).output().unwrap();
    assert!(!trained_nothing.status.success(), "{trained_nothing:?}");
    let m = &metrics(&out.join("skipped"))[0];
    assert_eq!((m["groups_equal"].as_u64(), m["trained_samples"].as_u64()), (Some(2), Some(0)), "the premise (every group skipped) failed: {m}");
    assert!(m["logprob_gap_tokens"].as_u64().unwrap() > 0, "no gap measured when every group was skipped: {m}");
    assert!(m["logprob_gap_abs_mean"].as_f64().unwrap().is_finite(), "{m}");
}

#[test]
fn the_llm_judge_reads_its_verdicts_from_serve() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = model_and_adapter(dir.path());
    let server = Server::start(&model, &[]);
    let out = succeed(agentrt().args([
        "judge",
        "--judge",
        &format!("openai:tiny@{}", server.url),
        "--question",
        "What is the capital of France?",
        "--answer",
        "Paris",
        "--response",
        "<answer>Paris</answer>",
        "--no-cache",
        "--retries",
        "0",
    ]));
    // The judge's client (agentrt_openai) parses the reply into the shared wire types: the shapes agree. A random model's
    // verdict is rarely a clean yes or no, so only its form is checked.
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(["correct", "incorrect", "unparsable"].contains(&v["label"].as_str().unwrap()), "{v}");
    assert!(v["raw"].is_string(), "{v}");
}

fn served_models(url: &str) -> Vec<String> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let models: serde_json::Value = rt.block_on(async { reqwest::get(format!("{url}/models")).await.unwrap().json().await.unwrap() });
    models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn training_runs_again_on_the_same_server_and_a_failed_run_unloads_its_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = model_and_adapter(dir.path());
    let qs = questions(dir.path());
    let server = Server::start(&model, &[]);
    let out = dir.path().join("runs");
    let sampler = format!("rollout.sampler=openai:tiny@{}", server.url);
    // The same training twice on the same server: the second publishes the same adapter names again.
    for name in ["first", "again"] {
        let mut args = train_args(&model, &qs, &out, name, 1);
        args.extend(["--set".to_string(), sampler.clone()]);
        succeed(agentrt().args(&args));
    }
    assert_eq!(served_models(&server.url), ["tiny"], "the runs left an adapter loaded");

    // A run whose second server is gone fails after loading step 0's adapter on the first: the error is the
    // dead server's, and the first server is left as it was.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dead_url = format!("http://{dead}/v1");
    let mut args = train_args(&model, &qs, &out, "failed", 1);
    args.extend(["--set".to_string(), format!("rollout.sampler=openai:tiny@{},{dead_url}", server.url)]);
    let failed = agentrt().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "a run with a dead server succeeded:\n{stderr}");
    assert!(stderr.contains(&format!("{dead_url}/load_lora_adapter")), "the error does not name the dead server:\n{stderr}");
    assert_eq!(served_models(&server.url), ["tiny"], "the failed run left an adapter loaded:\n{stderr}");
}

/// Starts `agentrt serve` on the tiny model with `env` set, and returns it (stderr piped) with its URL.
fn serve_with_env(model: &Path, env: &[(&str, &str)]) -> (Child, String) {
    let mut cmd = agentrt();
    cmd.args(["serve", "--model", model.to_str().unwrap(), "--served-model-name", "tiny", "--port", "0"]);
    cmd.env_remove("AGENTRT_ALLOW_RUNTIME_LORA").env_remove("AGENTRT_LOG").envs(env.iter().copied());
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("http://127.0.0.1:"), "serve printed {line:?}");
    (child, line.trim().to_string())
}

/// POSTs `body` to `url`, returning the status and the body.
fn post_blocking(url: &str, body: serde_json::Value) -> (u16, String) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

#[test]
fn a_default_server_refuses_runtime_lora_loading_and_logs_the_refusal() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let probe = serde_json::json!({"lora_name": "probe", "lora_path": "/etc"});
    let (mut child, url) = serve_with_env(&model, &[]);
    let (status, body) = post_blocking(&format!("{url}/load_lora_adapter"), probe.clone());
    child.kill().unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--allow-runtime-lora"), "{body}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let logged = stderr.lines().any(|l| l.contains("request rejected") && l.contains("path=/v1/load_lora_adapter") && l.contains("status=403"));
    assert!(logged, "the refusal was not logged:\n{stderr}");

    // $AGENTRT_ALLOW_RUNTIME_LORA=1 turns it on: the same request reaches the loader, which finds no adapter.
    let (mut child, url) = serve_with_env(&model, &[("AGENTRT_ALLOW_RUNTIME_LORA", "1")]);
    let (status, body) = post_blocking(&format!("{url}/load_lora_adapter"), probe);
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(status, 400, "{body}");
}

/// Starts `agentrt serve` on the default model with `args` added, and returns it with its URL.
fn serve_default(args: &[&str]) -> (Child, String) {
    let mut cmd = agentrt();
    cmd.args(["serve", "--port", "0"]).args(args);
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("http://127.0.0.1:"), "serve printed {line:?}");
    (child, line.trim().to_string())
}

/// The greedy reply of the server at `url` to one user message, and its tokens' log-probs.
fn greedy_reply(url: &str, message: &str) -> (String, Vec<f64>) {
    let body = serde_json::json!({"model": agentrt_policy::DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": message}], "temperature": 0, "max_tokens": 40, "logprobs": true});
    let (status, text) = post_blocking(&format!("{url}/chat/completions"), body);
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let choice = &v["choices"][0];
    let logprobs = choice["logprobs"]["content"].as_array().unwrap().iter().map(|e| e["logprob"].as_f64().unwrap()).collect();
    (choice["message"]["content"].as_str().unwrap().to_string(), logprobs)
}

/// Issue 48's sequence on a fresh default server: a question about owls, then the same request for colours
/// three times. The owls prompt leaves its keys and values in the prefix cache, and the colours prompts read
/// the chat template's opening from there (then their own, from the first colours reply on), yet every
/// colours reply is the one a server without a prefix cache gives, to the log-prob's last bit.
#[test]
fn temperature_0_replies_do_not_depend_on_the_prefix_cache_or_earlier_requests() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (mut cached, url) = serve_default(&[]);
    greedy_reply(&url, "Tell me a fact about owls.");
    let replies: Vec<(String, Vec<f64>)> = (0..3).map(|_| greedy_reply(&url, "Name three colours please.")).collect();
    cached.kill().unwrap();
    cached.wait().unwrap();
    let (mut plain, url) = serve_default(&["--prefix-cache-mib", "0"]);
    let want = greedy_reply(&url, "Name three colours please.");
    plain.kill().unwrap();
    plain.wait().unwrap();
    assert!(want.0.len() > 20, "a reply of several tokens: {:?}", want.0);
    for (i, got) in replies.iter().enumerate() {
        assert_eq!(got, &want, "colours reply {i} after the owls request differs from the uncached server's");
    }
}
