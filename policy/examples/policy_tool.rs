//! A small JSON-in/JSON-out driver of the policy, used by `bench/policy/parity.py` and `bench.py`, and a
//! compact tour of the API: load, template, sample, token log-probs, LoRA gradients, a train step.
//!
//! `cargo run --release -p agentrt-policy --example policy_tool < request.json`, where the request is
//! `{"cmd": "logprobs" | "tokenize" | "grad" | "bench_sample" | "bench_train", "model": "default" | PATH, ...}`
//! (sequences as `"ids"` or as `"texts"` to tokenise; `"learner_products": "int8"` for the 8-bit learner).

use agentrt_policy::{AdamW, AdamWConfig, LoraConfig, Message, ModelSource, Policy, SamplingParams, Target};
use rand::SeedableRng;
use serde_json::{json, Value};
use std::io::Read;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    agentrt_policy::allocator::keep_freed_memory();
    agentrt_policy::threads::fix_thread_count();
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let req: Value = serde_json::from_str(&input)?;
    let t0 = Instant::now();
    let mut policy = Policy::load(&ModelSource::parse(req["model"].as_str().unwrap_or("default")), &candle_core::Device::Cpu)?;
    let load_s = t0.elapsed().as_secs_f64();
    if let Some(dir) = req["adapter"].as_str() {
        policy.load_adapters(std::path::Path::new(dir))?;
    }
    // "int8": the learner's products with the frozen weights in 8 bits (`grad`, `bench_train`).
    if let Some(p) = req["learner_products"].as_str() {
        policy.decoder.learner_products = serde_json::from_value(json!(p))?;
    }
    let mut ids: Vec<Vec<u32>> = serde_json::from_value(req["ids"].clone()).unwrap_or_default();
    // Or texts, tokenised here.
    if let Some(texts) = req["texts"].as_array() {
        for t in texts {
            ids.push(policy.tokenizer.encode(t.as_str().ok_or("texts holds a non-string")?)?);
        }
    }
    let out = match req["cmd"].as_str().unwrap_or_default() {
        "tokenize" => {
            let texts: Vec<String> = serde_json::from_value(req["texts"].clone())?;
            let toks: Vec<Vec<u32>> = texts.iter().map(|t| policy.tokenizer.encode(t)).collect::<Result<_, _>>()?;
            let chat = policy.template.render(&[Message::system("S"), Message::user("What is 2+2?")], true)?;
            json!({"ids": toks, "chat": chat})
        }
        "logprobs" => {
            let lp = policy.token_logprobs(&ids, &[])?;
            json!({"logprobs": lp.to_vec2::<f32>()?})
        }
        "grad" => {
            // loss = -mean over sequences of the summed token log-probs; gradients of every LoRA tensor.
            let lp = policy.token_logprobs(&ids, &[])?;
            let loss = (lp.sum_all()? * (-1.0 / ids.len() as f64))?;
            let grads = loss.backward()?;
            let ad = policy.adapters.as_ref().ok_or("grad needs an adapter")?;
            let mut g = serde_json::Map::new();
            for (&(layer, t), pair) in &ad.retain.pairs {
                for (ab, v) in [("A", &pair.a), ("B", &pair.b)] {
                    let key = format!("base_model.model.model.layers.{layer}.{}.lora_{ab}.weight", t.hf_path());
                    let x = grads.get(v.as_tensor()).ok_or("missing gradient")?.flatten_all()?.to_vec1::<f32>()?;
                    g.insert(key, json!(x));
                }
            }
            json!({"loss": loss.to_scalar::<f32>()?, "grads": g})
        }
        "bench_sample" => {
            let n = req["n"].as_u64().unwrap_or(8) as usize;
            let max_tokens = req["max_tokens"].as_u64().unwrap_or(64) as usize;
            // "int8" samples as training's sampler does by default (`rollout.sampler_activations`).
            if let Some(a) = req["activations"].as_str() {
                let wanted = serde_json::from_value(json!(a))?;
                if policy.decoder.set_decode_activations(wanted) != wanted {
                    return Err(format!("activations {a:?}: the model has no GGUF blocks to multiply with them").into());
                }
            }
            let prompt = policy.chat_prompt(&[Message::user(req["prompt"].as_str().unwrap_or("Tell me a story."))])?;
            let params = SamplingParams { n, temperature: 1.0, max_tokens, ..Default::default() };
            let mut rng = rand::rngs::StdRng::seed_from_u64(0);
            // Warm-up, then the timed run.
            policy.sample(std::slice::from_ref(&prompt), &SamplingParams { n: 1, max_tokens: 2, ..params.clone() }, &mut rng)?;
            let t = Instant::now();
            let prompt_tokens = prompt.len();
            let outs = policy.sample(&[prompt], &params, &mut rng)?;
            let secs = t.elapsed().as_secs_f64();
            let toks: usize = outs.iter().map(|c| c.token_ids.len()).sum();
            json!({"tokens": toks, "prompt_tokens": prompt_tokens, "seconds": secs, "tokens_per_s": toks as f64 / secs, "kernels": agentrt_kernels::describe()})
        }
        "bench_train" => {
            let rank = req["rank"].as_u64().unwrap_or(16) as usize;
            policy.init_adapters(LoraConfig { rank, alpha: 2.0 * rank as f64, targets: Target::ALL.to_vec(), dual: false }, 0)?;
            let mut opt = AdamW::new(policy.trainable_vars(), AdamWConfig::default())?;
            let steps = req["steps"].as_u64().unwrap_or(3) as usize;
            let (mut times, mut phases) = (vec![], vec![]);
            for _ in 0..steps {
                let t = Instant::now();
                let lp = policy.token_logprobs(&ids, &[])?;
                let loss = (lp.sum_all()? * (-1.0 / ids.len() as f64))?;
                let forward = t.elapsed().as_secs_f64();
                let grads = loss.backward()?;
                let backward = t.elapsed().as_secs_f64() - forward;
                opt.step(&grads)?;
                let step = t.elapsed().as_secs_f64();
                times.push(step);
                phases.push(json!({"forward": forward, "backward": backward, "optimizer": step - forward - backward}));
            }
            json!({"step_seconds": times, "phases": phases})
        }
        other => return Err(format!("unknown cmd `{other}`").into()),
    };
    let mut out = out;
    out["load_seconds"] = json!(load_s);
    println!("{out}");
    Ok(())
}
