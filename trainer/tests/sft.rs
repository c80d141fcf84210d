//! `agentrt sft` at the library level, on a tiny random model served from a safetensors directory: the loss
//! mask of transcripts, a falling validation loss, errors that name file and line, exact resumption, and a
//! warm start (`model.init_adapter`) whose KL reference is the warm-started model.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_policy::{Device, ModelSource, Policy, Tensor};
use agentrt_rollout::{EpisodeSpec, Question, ScriptedPolicy};
use agentrt_trainer::sft::{load_examples, validation_loss};
use agentrt_trainer::sft_data::{read_conversations, TranscriptOptions};
use agentrt_trainer::{sft, Learner, LearnerConfig, LossScale, RunConfig, Sample, SftConfig, SftRequest};
use std::path::{Path, PathBuf};

fn tiny_model(dir: &Path) -> PathBuf {
    agentrt_policy::tiny::tiny_model_dir(dir).unwrap()
}

/// 24 short conversations with a learnable shape (the answer is the question's number mod 3).
fn chat_data(dir: &Path) -> PathBuf {
    let p = dir.join("chat.jsonl");
    let lines: Vec<String> = (0..24)
        .map(|i| {
            serde_json::json!({"messages": [
                {"role": "system", "content": "Answer."},
                {"role": "user", "content": format!("q{i}?")},
                {"role": "assistant", "content": format!("<answer>{}</answer>", i % 3)},
            ], "source": "test"})
            .to_string()
        })
        .collect();
    std::fs::write(&p, lines.join("\n")).unwrap();
    p
}

fn config(model: &Path, data: &Path, out: &Path, name: &str, extra: &[&str]) -> SftConfig {
    let mut o: Vec<String> = vec![
        format!("model.name={}", model.display()),
        format!("data.train=[\"{}\"]", data.display()),
        "data.val_examples=4".into(),
        "sft.lr=1e-2".into(),
        "sft.batch_size=4".into(),
        format!("run.output_dir={}", out.display()),
        format!("run.run_name={name}"),
    ];
    o.extend(extra.iter().map(|s| s.to_string()));
    SftConfig::from_layers(None, &o).unwrap()
}

fn metrics(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn load(model: &Path) -> Policy {
    Policy::load(&ModelSource::parse(model.to_str().unwrap()), &Device::Cpu).unwrap()
}

#[test]
fn sft_lowers_the_validation_loss_and_writes_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data, out) = (tiny_model(dir.path()), chat_data(dir.path()), dir.path().join("runs"));
    let c = config(&model, &data, &out, "sft", &["sft.max_steps=30", "sft.eval_steps=10", "sft.warmup_steps=3", "run.save_steps=10"]);
    let base = load(&model);
    let (_, val, dropped, _) = load_examples(&c, &base).unwrap();
    assert_eq!((val.len(), dropped), (4, 0));
    let (before, _) = validation_loss(&base, &val).unwrap();

    let summary = sft(SftRequest { config: c.clone(), run_dir: out.join("sft"), resume: false, progress: false }).unwrap();
    assert_eq!((summary.train_examples, summary.val_examples, summary.steps), (20, 4, 30));
    let run = out.join("sft");
    let m = metrics(&run);
    assert_eq!(m.len(), 30);
    let vals: Vec<f64> = m.iter().filter_map(|l| l["val_loss"].as_f64()).collect();
    assert_eq!(vals.len(), 3, "evaluated at steps 10, 20, 30");
    let after = summary.final_val_loss.unwrap();
    assert!(after < 0.7 * before, "validation loss {before} -> {after} ({vals:?})");
    assert!(vals[2] < vals[0], "{vals:?}");
    for key in ["train_loss", "model_tokens", "tokens", "lr", "grad_norm", "examples_seen"] {
        assert!(m[0].get(key).is_some_and(|v| !v.is_null()), "metrics line without {key}: {}", m[0]);
    }
    assert!((m[0]["lr"].as_f64().unwrap() - 1e-2 / 3.0).abs() < 1e-12, "warm-up");
    assert_eq!(m[29]["examples_seen"], 120);
    eprintln!("last metrics line: {}", m[29]);
    // The saved adapter gives the logged validation loss.
    let mut p = load(&model);
    p.load_adapters(&summary.last_checkpoint.as_ref().unwrap().join("adapters")).unwrap();
    assert!((validation_loss(&p, &val).unwrap().0 - after).abs() < 1e-4);
    let png = agentrt_trainer::plot::plot_run(&run, None).unwrap();
    assert!(png.is_file());
}

/// Transcripts of `agentrt eval` (an episode per line) and `agentrt train` (`{"step", "episode"}`) are read
/// as they are; their conversations mask exactly the replies (and each reply's end-of-turn token).
#[tokio::test]
async fn transcripts_are_read_as_they_are_and_mask_only_the_replies() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let runner = agentrt_environments::testing::fixture_runner(EpisodeSpec { max_turns: 3, ..EpisodeSpec::default() }).await;
    let replies = vec!["```python\nprint(40 + 2)\n```".to_string(), "<answer>42</answer>".to_string()];
    let scripted = ScriptedPolicy::new([("q1".to_string(), replies.clone())].into());
    let q = Question { id: "q1".into(), question: "What is 40 + 2?".into(), answers: vec!["42".into()], page: None, split: None };
    let batch = runner.run(&scripted, &[q]).await.unwrap();
    let e = &batch.episodes[0];
    let p = dir.path().join("transcripts.jsonl");
    let lines = [serde_json::to_string(e).unwrap(), serde_json::json!({"step": 3, "episode": e}).to_string()];
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();

    let opts = TranscriptOptions { system_prompt: "short".into(), demonstration: false.into(), only_correct: true };
    let (convs, stats) = read_conversations(&p, &opts).unwrap();
    assert_eq!((convs.len(), stats.transcripts, stats.not_correct), (2, 2, 0));
    let roles: Vec<&str> = convs[0].messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    assert_eq!(convs[0].messages[3].content, e.turns[0].observation.clone().unwrap());

    let c = SftConfig::from_layers(
        None,
        &[
            format!("model.name={}", model.display()),
            format!("data.train=[\"{}\"]", p.display()),
            "data.val_fraction=0".into(),
            "data.demonstration=false".into(),
            "data.only_correct=true".into(),
        ],
    )
    .unwrap();
    let policy = load(&model);
    let (train, _, _, _) = load_examples(&c, &policy).unwrap();
    assert_eq!(train.len(), 2);
    let mut spans = vec![];
    let mut cur = vec![];
    for (&id, &m) in train[0].ids.iter().zip(&train[0].model_mask) {
        if m {
            cur.push(id);
        } else if !cur.is_empty() {
            spans.push(policy.tokenizer.decode(&std::mem::take(&mut cur)).unwrap());
        }
    }
    spans.push(policy.tokenizer.decode(&cur).unwrap());
    assert_eq!(spans, replies.iter().map(|r| format!("{r}<|im_end|>")).collect::<Vec<_>>());
    // Everything else is the rendered conversation, token for token.
    let rendered = policy.template.render(&convs[0].messages, false).unwrap();
    assert_eq!(train[0].ids, policy.tokenizer.encode(rendered.strip_suffix('\n').unwrap()).unwrap());
}

#[test]
fn bad_input_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let opts = TranscriptOptions { system_prompt: "short".into(), demonstration: false.into(), only_correct: false };
    let ok = r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}"#;
    let cases = [
        (r#"{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]}"#, "no assistant turn"),
        (r#"{"messages": [{"role": "narrator", "content": "x"}, {"role": "assistant", "content": "y"}]}"#, "role `narrator`"),
        (r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assis"#, "truncated or malformed"),
        (r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]}"#, "empty assistant content"),
        (r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": []}]}"#, "tool_calls"),
        (r#"{"prompt": "x", "completion": "y"}"#, "neither a chat conversation"),
    ];
    for (i, (bad, why)) in cases.iter().enumerate() {
        let p = dir.path().join(format!("bad{i}.jsonl"));
        std::fs::write(&p, format!("{ok}\n\n{ok}\n{bad}\n{ok}\n")).unwrap();
        let e = read_conversations(&p, &opts).unwrap_err().to_string();
        assert!(e.contains(&format!("bad{i}.jsonl: line 4: ")) && e.contains(why), "case {i}: {e}");
    }
    // A conversation routed to the forget adapter of a run without one is an error naming its line.
    let p = dir.path().join("routed.jsonl");
    std::fs::write(&p, format!("{ok}\n{}\n", ok.replace("]}", "], \"routed\": true}"))).unwrap();
    let model = tiny_model(dir.path());
    let c = SftConfig::from_layers(None, &[format!("model.name={}", model.display()), format!("data.train=[\"{}\"]", p.display())]).unwrap();
    let e = load_examples(&c, &load(&model)).unwrap_err().to_string();
    assert!(e.contains("routed.jsonl: line 2") && e.contains("dual_lora"), "{e}");
    // Unknown config keys are errors too.
    assert!(SftConfig::from_layers(None, &["sft.lrr=1".into()]).unwrap_err().to_string().contains("sft.lrr"));
}

fn adapter_tensors(dir: &Path) -> Vec<(String, Vec<f32>)> {
    let t = candle_core::safetensors::load(dir.join("adapters/adapter_model.safetensors"), &Device::Cpu).unwrap();
    let mut v: Vec<(String, Vec<f32>)> = t.into_iter().map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1().unwrap())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Two steps, a "kill" (a torn metrics line, a half-written checkpoint), a resume to four: the same data
/// position, metrics and (up to float rounding) the same final adapter as four steps straight.
#[test]
fn a_resumed_run_matches_a_straight_one() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data, out) = (tiny_model(dir.path()), chat_data(dir.path()), dir.path().join("runs"));
    let extra = ["sft.max_steps=4", "run.save_steps=1", "sft.eval_steps=2"];
    let straight =
        sft(SftRequest { config: config(&model, &data, &out, "straight", &extra), run_dir: out.join("straight"), resume: false, progress: false }).unwrap();

    let split = out.join("split");
    let two = config(&model, &data, &out, "split", &["sft.max_steps=2", "run.save_steps=1", "sft.eval_steps=2"]);
    sft(SftRequest { config: two, run_dir: split.clone(), resume: false, progress: false }).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(split.join("metrics.jsonl"))
        .map(|mut f| std::io::Write::write_all(&mut f, b"{\"step\": 3, \"train_lo").unwrap())
        .unwrap();
    std::fs::create_dir_all(split.join(".checkpoint-3.partial")).unwrap();
    let resumed = sft(SftRequest { config: config(&model, &data, &out, "split", &extra), run_dir: split.clone(), resume: true, progress: false }).unwrap();
    assert_eq!(resumed.steps, 4);

    let (a, b) = (metrics(&out.join("straight")), metrics(&split));
    assert_eq!(b.iter().map(|l| l["step"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x["examples_seen"], y["examples_seen"]);
        assert!((x["train_loss"].as_f64().unwrap() - y["train_loss"].as_f64().unwrap()).abs() < 1e-4, "{x} vs {y}");
    }
    for ((ka, va), (kb, vb)) in
        adapter_tensors(straight.last_checkpoint.as_ref().unwrap()).iter().zip(adapter_tensors(resumed.last_checkpoint.as_ref().unwrap()).iter())
    {
        assert_eq!(ka, kb);
        let diff = va.iter().zip(vb).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(diff < 1e-4, "{ka} differs by {diff}");
    }
}

fn logprobs(p: &Policy, seq: &[u32]) -> Vec<f32> {
    p.token_logprobs(&[seq.to_vec()], &[]).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

/// `model.init_adapter`: the run starts from the saved adapter's weights, and the KL reference is the
/// warm-started model (base + that adapter, frozen), not the base model.
#[test]
fn a_warm_start_begins_at_the_adapter_and_is_its_own_kl_reference() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data, out) = (tiny_model(dir.path()), chat_data(dir.path()), dir.path().join("runs"));
    let done = sft(SftRequest { config: config(&model, &data, &out, "warm", &["sft.max_steps=6"]), run_dir: out.join("warm"), resume: false, progress: false })
        .unwrap();
    let ckpt = done.last_checkpoint.unwrap();
    let mut trained = load(&model);
    trained.load_adapters(&ckpt.join("adapters")).unwrap();
    let base = load(&model);
    let seq: Vec<u32> = trained.tokenizer.encode("<|im_start|>user\nq5?<|im_end|>\n<|im_start|>assistant\n<answer>2</answer><|im_end|>").unwrap();
    let (lp_trained, lp_base) = (logprobs(&trained, &seq), logprobs(&base, &seq));
    assert!(max_diff(&lp_trained, &lp_base) > 1e-2, "SFT changed nothing");

    // The RL trainer's path: TrainConfig's model section with init_adapter (a checkpoint directory).
    let tc = agentrt_trainer::TrainConfig::from_layers(None, &[format!("model.name={}", model.display()), format!("model.init_adapter={}", ckpt.display())])
        .unwrap();
    let mut policy = load(&model);
    agentrt_trainer::warm_start::start_adapters(&mut policy, &tc.model, 7).unwrap();
    assert!(max_diff(&logprobs(&policy, &seq), &lp_trained) < 1e-5, "the run does not start from the adapter's weights");
    let reference = agentrt_trainer::warm_start::reference_adapters(&policy, &tc.model).unwrap();
    let mut learner = Learner::new(policy, LearnerConfig { beta: 0.1, ..LearnerConfig::plain(1e-2, 1.0) }).unwrap();
    learner.set_reference(reference);
    let as_vec = |t: Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
    let r0 = as_vec(learner.reference_logprobs(std::slice::from_ref(&seq)).unwrap());
    assert!(max_diff(&r0, &lp_trained) < 1e-5, "the KL reference is not the warm-started model");
    // One update: the policy moves, the reference stays where it was (a frozen copy, not the trained one).
    let mask: Vec<bool> = (0..seq.len()).map(|i| i > seq.len() / 2).collect();
    let s = learner
        .accumulate(
            &[Sample { ids: seq.clone(), model_mask: mask, advantage: 1.0, routed: false, sampled_logprobs: Vec::new() }],
            LossScale::PerSample { samples: 1 },
        )
        .unwrap();
    assert!(s.kl.abs() < 1e-5, "the first step's KL to the warm-started reference is {}", s.kl);
    learner.step().unwrap();
    let after = logprobs(&learner.policy, &seq);
    assert!(max_diff(&after, &lp_trained) > 1e-4, "the update changed nothing");
    let r1 = as_vec(learner.reference_logprobs(std::slice::from_ref(&seq)).unwrap());
    assert!(max_diff(&r1, &r0) < 1e-6, "the reference moved with the policy");

    // A dual run cannot warm-start from a single adapter.
    let dual = agentrt_trainer::TrainConfig::from_layers(
        None,
        &[format!("model.name={}", model.display()), format!("model.init_adapter={}", ckpt.display()), "model.dual_lora=true".into()],
    )
    .unwrap();
    let e = agentrt_trainer::warm_start::start_adapters(&mut load(&model), &dual.model, 7).unwrap_err().to_string();
    assert!(e.contains("model.init_adapter") && e.contains("dual_lora"), "{e}");
}
