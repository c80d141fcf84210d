//! The wiki environment: answer questions about a Wikipedia corpus by writing short programs that search
//! and read it. Everything that defines it is here:
//! - **what is asked**: [`questions`], the questions file (`env.wiki.questions`; the bundled
//!   `data/wiki/questions.jsonl`), read per split by the one reader of question files.
//! - **how it is played**: the system prompt and the worked demonstration ([`prompt`]); the reply grammar
//!   ([`reply`]: a fenced program or the one-call `<tool>` form runs, an `<answer>` ends the episode) and
//!   the stop strings the sampler ends a reply at; the tools the programs call ([`tools`]: the search
//!   index behind `search_pages`, `view_sections` and `read_section`).
//! - **how it is scored**: [`grader`], a judge against the gold answers (the offline rule judge or any
//!   OpenAI-compatible model).
//!
//! Its settings are `[env.wiki]` of a training config ([`settings`]: the questions file and split, the
//! prompt, the judge).
//!
//! Beside them, two policies without a model that only make sense here: the trajectory synthesiser
//! ([`synthetic`], the supervised data of `agentrt trajectories synth`) and the random baseline
//! ([`random_policy`]).

pub mod grader;
pub mod prompt;
pub mod questions;
pub mod random_policy;
pub mod reply;
pub mod settings;
pub mod synthetic;
pub mod tools;

pub use grader::JudgeGrader;
pub use prompt::{demonstration, system_prompt, system_prompt_template, Demonstration, DEFAULT_SYSTEM_PROMPT, FULL_SYSTEM_PROMPT, PLUGINS_PLACEHOLDER};
pub use questions::WikiQuestions;
pub use random_policy::RandomPolicy;
pub use reply::{ToolPrograms, STOP_STRINGS};
pub use settings::WikiSection;
pub use synthetic::{check_visible, passages_program, question_overlap, read_more_program, read_program, SynthStyle, SynthesizingPolicy};
pub use tools::IndexTools;

use crate::package::{Bounds, GraderChoice, Grammar, Package, Prompt, Splits, Tasks};
use agentrt_policy::Message;
use agentrt_rollout::RolloutError;
use agentrt_runtime::Sandbox;
use std::sync::Arc;

/// The environment's name, as `--env` and `env.name` spell it.
pub const NAME: &str = "wiki";

/// The wiki as a package: its questions file and training split, prompt and judge from `[env.wiki]`;
/// programs that call the wiki tools over several turns; `dev` held out.
pub fn package(settings: &WikiSection) -> Package {
    Package {
        name: NAME.into(),
        tasks: Tasks::WikiQuestions(settings.questions.clone().into()),
        splits: Splits { train: settings.split.clone(), train_key: "env.wiki.split".into(), held_out: "dev".into(), eval: "dev".into() },
        grammar: Grammar::ToolPrograms,
        stop: STOP_STRINGS.iter().map(|s| s.to_string()).collect(),
        max_new_tokens: None,
        bounds: Bounds::default(),
        wiki_tools: true,
        plugins: Vec::new(),
        prompt: Prompt::Wiki(settings.clone()),
        grader: GraderChoice::Judge { spec: settings.judge.clone(), key: "env.wiki.judge", partial_credit_beta: settings.partial_credit_beta },
    }
}

/// The judge a spec names (`rule`, `rule:0.5`, `openai:MODEL@BASE_URL`) as a grader; `key` is the
/// setting that named it, for the error.
pub(crate) fn judge_grader(spec: &str, key: &str, partial_credit_beta: f64) -> Result<Arc<JudgeGrader>, RolloutError> {
    let judge = agentrt_judge::judge_from_spec(spec).map_err(|e| RolloutError::Invalid(format!("{key} {spec:?}: {e}")))?;
    Ok(Arc::new(JudgeGrader { partial_credit_beta, ..JudgeGrader::new(judge) }))
}

/// The wiki's prompt in `sandbox`: the system prompt `settings` name (listing the sandbox's plug-in
/// tools) and the demonstration when they show one.
pub(crate) fn prompt_of(settings: &WikiSection, sandbox: &Sandbox) -> Result<(String, Vec<Message>), RolloutError> {
    let plugins = sandbox.plugins().signatures();
    let template = system_prompt_template(&settings.system_prompt);
    if !plugins.is_empty() && !template.contains(PLUGINS_PLACEHOLDER) {
        let names: Vec<&str> = plugins.iter().map(|p| p.name.as_str()).collect();
        tracing::warn!(
            "env.wiki.system_prompt has no {PLUGINS_PLACEHOLDER}: the plug-in tools ({}) are listed at its end; put {PLUGINS_PLACEHOLDER} where the list should go",
            names.join(", ")
        );
    }
    let prompt = system_prompt(template, &plugins);
    let demonstration = settings.demonstration.turns().map_err(RolloutError::Invalid)?;
    Ok((prompt, demonstration))
}
