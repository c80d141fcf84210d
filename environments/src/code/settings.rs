//! `[env.code]`: the code environment's own settings: its tasks, the reply format it requires, its
//! reward and the bounds its tests run under.

use serde::{Deserialize, Serialize};

/// Fuel a code test may burn when `env.code.test_fuel` does not say (ten times `rollout.fuel`'s default, so
/// a correct but plain solution of a HumanEval task is not cut short: at 200 million, 18 of 1,640
/// Qwen2.5-Coder samples that CPython passes failed on fuel alone).
pub const CODE_TEST_FUEL: u64 = 2_000_000_000;

/// A code test's wall time when `env.code.test_timeout_ms` does not say: HumanEval's harness allows 3 s.
pub const CODE_TEST_TIMEOUT_MS: u64 = 3_000;

/// `[env.code]` of a training config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeSection {
    /// Code tasks (JSON Lines in HumanEval's format).
    pub tasks: String,
    /// Which tasks train: `train`, `test` or `all` (HumanEval's documented split: every fourth is `test`).
    pub split: String,
    /// Require `<reasoning>…</reasoning><answer>…</answer>` (a reply without it scores 0).
    pub reasoning_format: bool,
    /// Reward for passing every test, paid pro rata.
    pub base_weight: f64,
    /// Added when every test passes.
    pub perfect_weight: f64,
    /// Tests run per task at most (its first ones); 0: all.
    pub max_tests_per_problem: usize,
    /// Fuel each test program may burn. A test calls the candidate on real inputs (HumanEval/147 loops
    /// over 10^6 triples: 0.75 billion fuel, about 0.1 s), far more work than a wiki program's tool calls.
    #[serde(default = "default_test_fuel")]
    pub test_fuel: u64,
    /// Wall time each test program may take, in milliseconds (HumanEval's own harness gives a task 3 s).
    #[serde(default = "default_test_timeout_ms")]
    pub test_timeout_ms: u64,
}

// Configs saved before the code tests had their own limits load with the defaults.
fn default_test_fuel() -> u64 {
    CODE_TEST_FUEL
}

fn default_test_timeout_ms() -> u64 {
    CODE_TEST_TIMEOUT_MS
}

impl Default for CodeSection {
    fn default() -> Self {
        CodeSection {
            tasks: "data/humaneval/HumanEval.jsonl".into(),
            split: "train".into(),
            reasoning_format: false,
            base_weight: 1.0,
            perfect_weight: 0.5,
            max_tests_per_problem: 0,
            test_fuel: CODE_TEST_FUEL,
            test_timeout_ms: CODE_TEST_TIMEOUT_MS,
        }
    }
}

impl CodeSection {
    /// Checks ranges; the message names the key. `played`: the code environment is the one played (a
    /// reward of nothing is then an error, not only an oddity of an unused section).
    pub fn validate(&self, played: bool) -> Result<(), String> {
        for (key, v) in [("env.code.base_weight", self.base_weight), ("env.code.perfect_weight", self.perfect_weight)] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(format!("{key}: must be a finite number, 0 or more"));
            }
        }
        if played && self.base_weight + self.perfect_weight == 0.0 {
            return Err("env.code.base_weight / env.code.perfect_weight: both 0 would reward nothing".into());
        }
        if self.test_fuel == 0 || self.test_timeout_ms == 0 {
            return Err("env.code.test_fuel / env.code.test_timeout_ms: must be at least 1".into());
        }
        if !["train", "test", "all"].contains(&self.split.as_str()) {
            return Err(format!("env.code.split: `{}`: expected train, test or all", self.split));
        }
        Ok(())
    }

    /// The test reward these settings describe.
    pub fn test_reward(&self) -> super::grader::TestReward {
        super::grader::TestReward {
            base_weight: self.base_weight as f32,
            perfect_weight: self.perfect_weight as f32,
            max_tests_per_problem: self.max_tests_per_problem,
            reasoning_format: self.reasoning_format,
        }
    }
}
