//! A wiki episode runner over the fixture tools, for tests (no index, no model download).

use crate::wiki::{prompt::DEFAULT_SYSTEM_PROMPT, JudgeGrader, ToolPrograms};
use agentrt_judge::{RuleJudge, DEFAULT_F1_THRESHOLD};
use agentrt_rollout::{EpisodeRunner, EpisodeSpec};
use agentrt_runtime::{FixtureTools, Limits, Sandbox, SandboxConfig};
use std::sync::Arc;

/// A runner of the wiki environment with the real sandbox over [`FixtureTools`], the rule judge, the
/// default system prompt and no demonstration.
pub async fn fixture_runner(spec: EpisodeSpec) -> EpisodeRunner {
    let sandbox = Sandbox::new(SandboxConfig { limits: Limits::default(), ..SandboxConfig::default() }, Arc::new(FixtureTools::default()))
        .await
        .expect("the sandbox over the fixture tools starts");
    EpisodeRunner {
        sandbox: Arc::new(sandbox),
        grader: Arc::new(JudgeGrader::new(Arc::new(RuleJudge::new(DEFAULT_F1_THRESHOLD).expect("the default threshold is valid")))),
        system_prompt: DEFAULT_SYSTEM_PROMPT.replace("{plugins}", ""),
        demonstration: vec![],
        spec,
        reply_grammar: Arc::new(ToolPrograms),
    }
}
