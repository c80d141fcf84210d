//! `agentrt judge`: judge one response exactly as the trainer and eval do, and print the verdict.

use agentrt_judge::{JudgeInput, JudgeOptions, JudgeSpec};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Duration;

const AFTER_HELP: &str = "\
Judges:
  rule                   offline (the default): SQuAD normalized exact match, or token F1 >= 0.8,
                         against any --answer
  rule:THRESHOLD         the same with another F1 threshold, e.g. rule:0.5
  openai:MODEL@BASE_URL  any OpenAI-compatible chat-completions server; the reply's first word must
                         be yes or no (anything else is reported as \"unparsable\", reward 0)
  openai:MODEL           OpenAI itself (https://api.openai.com/v1)
  The API key comes from AGENTRT_JUDGE_API_KEY, else OPENAI_API_KEY; local servers need none.
  LLM verdicts are cached in $AGENTRT_CACHE/judge (see --cache-dir, --no-cache).

The verdict is printed as one line of JSON: {\"reward\": 0 or 1, \"label\": ..., \"raw\": ...}.
Labels: exact_match, f1_match, no_match (rule); correct, incorrect, unparsable (LLM).
If the response holds <answer>...</answer>, only the text inside is judged.

Examples:
  agentrt judge --question 'Who won Super Bowl 50?' --answer 'Denver Broncos' --answer Broncos \\
      --response '<answer>the Denver Broncos</answer>'
  agentrt judge --judge rule:0.5 --question 'Where is Levi'\\''s Stadium?' --answer 'Santa Clara' \\
      --response 'Santa Clara, California'
  agentrt judge --judge openai:qwen2.5:7b@http://localhost:11434/v1 \\
      --question 'Who won Super Bowl 50?' --answer 'Denver Broncos' --response 'The Broncos won.'
  AGENTRT_JUDGE_API_KEY=sk-... agentrt judge --judge openai:gpt-4o-mini \\
      --question 'Who won Super Bowl 50?' --answer 'Denver Broncos' --response 'Carolina'";

/// Arguments of `agentrt judge`.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The question that was asked.
    #[arg(long)]
    pub question: String,
    /// A gold answer; repeat the flag for each accepted alias.
    #[arg(long = "answer", value_name = "ANSWER", required = true)]
    pub answers: Vec<String>,
    /// The response to judge (an <answer>...</answer> tag inside it narrows what is judged).
    #[arg(long)]
    pub response: String,
    /// Which judge: rule, rule:THRESHOLD, openai:MODEL@BASE_URL or openai:MODEL.
    #[arg(long, value_name = "SPEC", default_value = "rule")]
    pub judge: JudgeSpec,
    /// Seconds to wait for the LLM judge's reply, per attempt.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout_secs: u64,
    /// Retries after a 5xx, a timeout or a connection error (4xx is never retried).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub retries: u32,
    /// max_tokens for the LLM judge's reply (raise it for models that think before answering).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_tokens: u32,
    /// Where LLM verdicts are cached [default: $AGENTRT_CACHE/judge].
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache")]
    pub cache_dir: Option<PathBuf>,
    /// Ask the LLM judge even if a cached verdict exists, and store nothing.
    #[arg(long)]
    pub no_cache: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let defaults = JudgeOptions::default();
    let options = JudgeOptions {
        cache_dir: if args.no_cache { None } else { args.cache_dir.or(defaults.cache_dir.clone()) },
        timeout: Duration::from_secs(args.timeout_secs.max(1)),
        max_retries: args.retries,
        max_tokens: args.max_tokens.max(1),
        ..defaults
    };
    let judge = args.judge.build(&options).with_context(|| format!("setting up judge {}", args.judge))?;
    let input = JudgeInput { question: args.question, answers: args.answers, response: args.response };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the async runtime")?;
    let verdict = runtime.block_on(judge.judge(&input)).with_context(|| format!("judging with {}", judge.name()))?;
    // Whole rewards print as integers (`"reward": 1`), as the verdict format promises.
    let reward = if verdict.reward.fract() == 0.0 { serde_json::json!(verdict.reward as i64) } else { serde_json::json!(verdict.reward) };
    #[derive(serde::Serialize)]
    struct Line {
        reward: serde_json::Value,
        label: agentrt_judge::VerdictLabel,
        raw: String,
    }
    let line = Line { reward, label: verdict.label, raw: verdict.raw };
    println!("{}", serde_json::to_string(&line)?);
    Ok(())
}
