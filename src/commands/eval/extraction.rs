//! `agentrt eval extraction`: how well a model picks the answer out of the section that holds it, with no
//! tools: the question and its gold section in one prompt after two worked questions, the reply judged as
//! an episode's answer is.
//! Minutes per model, so it chooses a base before any long training (which base extracts best per
//! CPU-second), and it bounds what reading well can give: an agent whose programs print the gold section
//! answers at most this often.

use agentrt_judge::{judge_from_spec, JudgeInput};
use agentrt_policy::rand::SeedableRng;
use agentrt_policy::{Message, ModelSource, Policy, SamplingParams};
use agentrt_progress::Progress;
use agentrt_rollout::Question;
use agentrt_runtime::ToolHost;
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;

/// The probe's instruction: the shortest span, as SQuAD's answers are.
pub const EXTRACTION_SYSTEM_PROMPT: &str =
    "Answer the question with the shortest span of the passage that answers it, copied exactly. Reply with the span only.";

/// Two worked questions shown before each one (as earlier chat turns): without them the small models
/// answer in sentences, which the rule judge refuses whatever span they hold (SmolLM2-135M: 0 of 300).
/// The passage is the corpus's own text (the tools' fixture page); neither question is in the data.
const SHOTS: &[(&str, &str)] = &[("Who published Nineteen Eighty-Four?", "Secker & Warburg"), ("When was Nineteen Eighty-Four published?", "8 June 1949")];
const SHOT_PASSAGE: &str = "Nineteen Eighty-Four is a dystopian and speculative fiction novel by English writer George Orwell. \
It was published on 8 June 1949 by Secker & Warburg as Orwell's ninth and final completed book.";

/// The probe's chat for one question: the instruction, the worked questions, then the question on its
/// gold section.
fn probe_messages(passage: &str, question: &str) -> Vec<Message> {
    let ask = |passage: &str, question: &str| Message::user(format!("Passage:\n{passage}\n\nQuestion: {}", question.trim()));
    let mut messages = vec![Message::system(EXTRACTION_SYSTEM_PROMPT.to_string())];
    for (q, a) in SHOTS {
        messages.push(ask(SHOT_PASSAGE, q));
        messages.push(Message::assistant(a.to_string()));
    }
    messages.push(ask(passage, question));
    messages
}

/// Arguments of `agentrt eval extraction`.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  agentrt eval extraction --num-samples 300 --output-dir eval/extract-smollm2\n  \
    agentrt eval extraction --model qwen2.5-coder-0.5b --num-samples 300 --output-dir eval/extract-qwen\n\n\
    Each question's gold section is the section of its gold page that holds a gold answer as a whole word\n\
    and the most of the question's words (the one a perfect reader would print). Questions whose gold page\n\
    holds no answer are counted apart and not asked. The questions are the same seeded subset that\n\
    `agentrt eval` plays with the same --split, --num-samples and --seed.\n\n\
    OUTPUT_DIR gets results.json (accuracy with its Wilson 95% interval, CPU and wall seconds, settings)\n\
    and replies.jsonl (question, gold answers, section id, reply, verdict).")]
pub struct Args {
    /// Which questions: train, dev or all.
    #[arg(long, default_value = "dev")]
    pub split: String,
    /// Questions (JSON Lines or Parquet with question, answers, page).
    #[arg(long, default_value = agentrt_rollout::DEFAULT_QUESTIONS_FILE)]
    pub questions: PathBuf,
    /// Questions to ask (a seeded random subset of the split, as `agentrt eval` draws it; 0: all).
    #[arg(long, default_value_t = 300)]
    pub num_samples: usize,
    /// The subset's seed (`agentrt eval`'s default is 0).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `smollm2-135m`, `qwen2.5-coder-0.5b`, a `.gguf` file or a safetensors directory.
    #[arg(long, default_value = agentrt_policy::DEFAULT_MODEL_NAME)]
    pub model: String,
    /// An adapter to apply (a checkpoint directory, `models/...`, or a PEFT LoRA directory).
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// Prompts decoded together.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Most tokens of a reply.
    #[arg(long, default_value_t = 32)]
    pub max_tokens: usize,
    /// `rule`, `rule:0.5` or `openai:MODEL@BASE_URL`.
    #[arg(long, default_value = "rule")]
    pub judge: String,
    /// Where results go (refused if it already holds results.json).
    #[arg(long)]
    pub output_dir: PathBuf,
    /// The search index whose sections are read (default: where `agentrt index` writes it).
    #[arg(long, value_name = "DIR", env = "AGENTRT_INDEX_DIR")]
    pub index_dir: Option<PathBuf>,
}

/// One question's probe: what was asked and how it was judged.
#[derive(serde::Serialize)]
struct Reply {
    id: String,
    question: String,
    answers: Vec<String>,
    section_id: String,
    reply: String,
    reward: f32,
    verdict: String,
    /// Whether the reply holds a gold answer as a whole word (right span, wrong form or length).
    holds_gold: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.output_dir.join("results.json").exists(),
        "{} already holds results.json: choose another --output-dir or remove it",
        args.output_dir.display()
    );
    anyhow::ensure!(args.batch_size > 0 && args.max_tokens > 0, "--batch-size and --max-tokens must be at least 1");
    let split = (args.split != "all").then_some(args.split.as_str());
    let questions = agentrt_rollout::seeded_subset(agentrt_rollout::read_questions(&args.questions, split)?, args.num_samples, args.seed);
    anyhow::ensure!(!questions.is_empty(), "no questions of split `{}` in {}", args.split, args.questions.display());
    let dir = args.index_dir.clone().unwrap_or_else(agentrt_search::default_index_dir);
    let tools = agentrt_environments::wiki::tools::open(&dir, agentrt_search::QueryEncoder::default())?;
    let judge = judge_from_spec(&args.judge)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;

    let mut asked = Vec::new();
    let mut no_gold_section = 0usize;
    for q in &questions {
        match runtime.block_on(gold_section(tools.as_ref(), q))? {
            Some((id, text)) => asked.push((q, id, text)),
            None => no_gold_section += 1,
        }
    }

    let cpu_start = process_cpu_seconds();
    let wall = Instant::now();
    let mut policy = Policy::load_for_inference(&ModelSource::parse(&args.model), &agentrt_policy::parse_device("cpu")?)
        .with_context(|| format!("loading model `{}`", args.model))?;
    policy.decoder.decode_activations = agentrt_policy::DecodeActivations::F32;
    if let Some(adapter) = &args.adapter {
        policy.load_adapters(&agentrt_trainer::warm_start::adapters_dir(adapter)).with_context(|| format!("loading adapter {}", adapter.display()))?;
    }
    let params = SamplingParams { n: 1, temperature: 0.0, max_tokens: args.max_tokens, ..Default::default() };
    let mut rng = agentrt_policy::rand::rngs::StdRng::seed_from_u64(args.seed);
    let progress = Progress::new("extraction", "questions", asked.len() as u64, 0);
    let mut replies = Vec::with_capacity(asked.len());
    for chunk in asked.chunks(args.batch_size) {
        let prompts = chunk.iter().map(|(q, _, text)| policy.chat_prompt(&probe_messages(text, &q.question))).collect::<Result<Vec<_>, _>>()?;
        let completions = policy.sample(&prompts, &params, &mut rng)?;
        anyhow::ensure!(completions.len() == chunk.len(), "{} completions for {} prompts", completions.len(), chunk.len());
        for ((q, section_id, _), c) in chunk.iter().zip(completions) {
            let reply = c.text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
            let verdict = runtime.block_on(judge.judge(&JudgeInput::new(q.question.clone(), q.answers.clone(), reply.clone())))?;
            replies.push(Reply {
                id: q.id.clone(),
                question: q.question.clone(),
                answers: q.answers.clone(),
                section_id: section_id.clone(),
                reply,
                reward: verdict.reward,
                verdict: verdict.label.to_string(),
                holds_gold: q.answered_in(&c.text),
            });
        }
        let correct = replies.iter().filter(|r| r.reward >= 1.0).count();
        progress.set(replies.len() as u64, format!("accuracy {:.3}", correct as f64 / replies.len() as f64));
    }
    progress.finish_and_clear();
    let wall_s = wall.elapsed().as_secs_f64();
    let cpu_s = match (cpu_start, process_cpu_seconds()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };

    let correct = replies.iter().filter(|r| r.reward >= 1.0).count();
    let accuracy = correct as f64 / replies.len().max(1) as f64;
    let (lo, hi) = agentrt_eval::wilson_interval(correct, replies.len());
    let holding = replies.iter().filter(|r| r.holds_gold).count();
    let results = serde_json::json!({
        "model": args.model,
        "adapter": args.adapter,
        "questions": format!("{} split of {} (seed {}, {} drawn)", args.split, args.questions.display(), args.seed, questions.len()),
        "judge": judge.name(),
        "system_prompt": EXTRACTION_SYSTEM_PROMPT,
        "asked": replies.len(),
        "no_gold_section": no_gold_section,
        "correct": correct,
        "accuracy": accuracy,
        "accuracy_ci95": [lo, hi],
        "holds_gold": holding as f64 / replies.len().max(1) as f64,
        "holds_gold_ci95": agentrt_eval::wilson_interval(holding, replies.len()),
        "shots": SHOTS.len(),
        "cpu_seconds": cpu_s,
        "wall_seconds": wall_s,
        "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu": agentrt_kernels::describe(),
    });
    std::fs::create_dir_all(&args.output_dir).with_context(|| format!("creating {}", args.output_dir.display()))?;
    let mut lines = String::new();
    for r in &replies {
        lines.push_str(&serde_json::to_string(r)?);
        lines.push('\n');
    }
    agentrt_assets::write_atomic(&args.output_dir.join("replies.jsonl"), lines.as_bytes())?;
    agentrt_assets::write_atomic(&args.output_dir.join("results.json"), serde_json::to_string_pretty(&results)?.as_bytes())?;
    println!(
        "extraction of {} on {} questions ({} without a gold section): {:.1}% [{:.1}, {:.1}] judged correct, {:.1}% hold a gold answer; {} CPU s, {:.0} wall s",
        args.model,
        replies.len(),
        no_gold_section,
        100.0 * accuracy,
        100.0 * lo,
        100.0 * hi,
        100.0 * holding as f64 / replies.len().max(1) as f64,
        cpu_s.map_or("?".to_string(), |s| format!("{s:.0}")),
        wall_s
    );
    println!("written to {}", args.output_dir.display());
    Ok(())
}

/// The section of `q`'s gold page holding a gold answer as a whole word with the most of the question's
/// content words ([`agentrt_environments::wiki::question_overlap`], as the synthesiser picks its evidence; the first
/// such section on a tie), with its text; `None` when no section of the page holds one
/// or the question names no page.
async fn gold_section(tools: &dyn ToolHost, q: &Question) -> anyhow::Result<Option<(String, String)>> {
    let Some(page) = &q.page else { return Ok(None) };
    let sections = tools.view_sections(page).await.map_err(|e| anyhow::anyhow!("view_sections({page:?}) for question {}: {e}", q.id))?;
    let mut best: Option<(usize, String, String)> = None;
    for s in sections {
        let text = tools.read_section(&s.section_id).await.map_err(|e| anyhow::anyhow!("read_section({:?}): {e}", s.section_id))?;
        if !q.answered_in(&text) {
            continue;
        }
        let overlap = agentrt_environments::wiki::question_overlap(&q.question, &text);
        if best.as_ref().is_none_or(|(o, _, _)| overlap > *o) {
            best = Some((overlap, s.section_id, text));
        }
    }
    Ok(best.map(|(_, id, text)| (id, text)))
}

/// This process's user + system CPU time in seconds (`/proc/self/stat`; `None` where there is none).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) close with ')': utime and stime are the
    // 14th and 15th fields of the line, the 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // The kernel reports these in clock ticks of USER_HZ, which Linux fixes at 100.
    Some(ticks / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_runtime::FixtureTools;

    fn question(question: &str, answer: &str, page: &str) -> Question {
        Question { id: "q".into(), question: question.into(), answers: vec![answer.into()], page: Some(page.into()), split: Some("dev".into()) }
    }

    #[tokio::test]
    async fn the_gold_section_holds_an_answer_and_the_most_question_words() {
        let tools = FixtureTools::default();
        let (id, text) = gold_section(&tools, &question("Who discovered oxygen in the 1770s?", "Carl Wilhelm Scheele", "oxygen")).await.unwrap().unwrap();
        assert_eq!(id, "oxygen:discovery");
        assert!(text.contains("Scheele"), "{text}");
        assert_eq!(gold_section(&tools, &question("What is the capital of France?", "Lyon", "paris")).await.unwrap(), None);
        assert!(gold_section(&tools, &question("What is gold?", "metal", "gold")).await.is_err(), "an unknown page is an error, not a miss");
    }

    #[test]
    fn the_probe_asks_after_two_worked_questions_on_the_same_passage_form() {
        let m = probe_messages("Some passage.", " Who? ");
        let roles: Vec<&str> = m.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user", "assistant", "user"]);
        assert_eq!(m[5].content, "Passage:\nSome passage.\n\nQuestion: Who?");
        for (shot, answer) in [(1, "Secker & Warburg"), (3, "8 June 1949")] {
            assert!(m[shot].content.starts_with("Passage:\nNineteen Eighty-Four") && SHOT_PASSAGE.contains(&m[shot + 1].content), "{answer}");
        }
    }
}
