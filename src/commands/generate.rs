//! `agentrt generate`: sample a completion from the policy, as the trainer and eval harness do (with `--decode-activations f32`,
//! exactly: by default it decodes with 8-bit activations, as `agentrt serve` and llama.cpp do).

use crate::inference_options::{InferenceOptions, LoadedModel};
use agentrt_policy::rand::SeedableRng;
use agentrt_policy::{Message, SamplingParams};
use anyhow::Context;

/// Arguments of `agentrt generate`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt generate --prompt \"What is the capital of France?\"\n  \
    agentrt generate --model qwen2.5-coder-0.5b --prompt \"Write a Python function that adds two numbers\"\n  \
    agentrt generate --model ./my-model-dir --adapter runs/x/adapter --temperature 0.7 --seed 1 --prompt \"…\"\n\n\
    The prompt is wrapped in the model's own chat template. With --temperature 0 the answer is greedy.")]
pub struct Args {
    /// The user message to answer.
    #[arg(long)]
    pub prompt: String,
    /// An optional system message (otherwise the adapter's trained system prompt, or the template's
    /// default, if any).
    #[arg(long)]
    pub system: Option<String>,
    /// An adapter to apply: a checkpoint of `agentrt train` / `agentrt sft` (or `models/...`), a PEFT
    /// LoRA adapter directory, or a dual `retain/` + `forget/` directory.
    #[arg(long)]
    pub adapter: Option<std::path::PathBuf>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Nucleus sampling: keep the smallest set of tokens with this much probability.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f64,
    /// Keep only the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Random seed for sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print token ids and their log-probs after the text.
    #[arg(long)]
    pub verbose: bool,
    #[command(flatten)]
    pub inference: InferenceOptions,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let LoadedModel { mut policy, trained, .. } = args.inference.load(args.adapter.as_deref())?;
    if let Some(dir) = &args.adapter {
        policy.load_adapters(&agentrt_trainer::warm_start::adapters_dir(dir)).with_context(|| format!("loading adapter {}", dir.display()))?;
    }
    let mut messages = Vec::new();
    let trained_prompt =
        trained.as_ref().map(|a| agentrt_environments::wiki::system_prompt(agentrt_environments::wiki::system_prompt_template(&a.system_prompt), &[]));
    if let Some(s) = args.system.clone().or(trained_prompt) {
        messages.push(Message::system(s));
    }
    messages.push(Message::user(args.prompt.clone()));
    let prompt = policy.chat_prompt(&messages)?;
    let params =
        SamplingParams { n: 1, temperature: args.temperature, top_p: args.top_p, top_k: args.top_k, max_tokens: args.max_tokens, ..Default::default() };
    let mut rng = agentrt_policy::rand::rngs::StdRng::seed_from_u64(args.seed);
    let out = policy.sample(&[prompt], &params, &mut rng)?;
    let c = &out[0];
    println!("{}", c.text);
    if args.verbose {
        eprintln!("finish: {:?}", c.finish_reason);
        for (id, lp) in c.token_ids.iter().zip(&c.logprobs) {
            eprintln!("{id}\t{lp:.4}\t{:?}", policy.tokenizer.decode(&[*id]).unwrap_or_default());
        }
    }
    Ok(())
}
