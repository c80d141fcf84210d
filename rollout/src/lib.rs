//! Episodes: one question, a policy that writes programs, the sandbox that runs them, a judge that scores
//! the answer. Training (`agentrt train`) and evaluation (`agentrt eval`) both run episodes through this
//! crate, so what is measured is exactly what is trained.
//!
//! The design in three parts:
//! - **who writes**: a [`TurnPolicy`] replies to a batch of [`Conversation`]s at once. [`LocalPolicy`]
//!   samples from the candle policy and keeps the exact token ids, with a mask that is true only on the
//!   tokens the model wrote (tool output and prompts are masked out of the loss); [`OpenAiPolicy`] asks any
//!   OpenAI-compatible server; [`ScriptedPolicy`] replays fixed replies (tests). An environment may bring
//!   policies of its own (the wiki's random baseline).
//! - **who runs**: the [`EpisodeRunner`] reads each reply with its environment's [`ReplyGrammar`], runs the programs
//!   of every live episode concurrently in the WASM sandbox, appends each observation as a tool turn, and
//!   repeats until an `<answer>` or `max_turns`.
//! - **who scores**: the environment's [`Grader`] grades every final reply; an [`Episode`] keeps every turn,
//!   program, observation, tool call and the verdict, ready for a loss, a metric or a transcript line.

mod baselines;
mod conversation;
mod episode;
mod episode_spec;
mod error;
mod grading;
mod local_policy;
mod openai_policy;
mod questions;
mod reply_grammar;
mod trace;
mod trajectories;
mod turn_policy;

pub use baselines::ScriptedPolicy;
pub use conversation::{Conversation, TokenTrace};
pub use episode::{Episode, EpisodeOutcome, EpisodeRunner, PhaseTimes, RolloutBatch, ToolCallRecord, TurnAction, TurnRecord};
pub use episode_spec::EpisodeSpec;
pub use error::RolloutError;
pub use grading::{FailureKind, Grade, Grader, TestFailure, TestResult, TestRun};
pub use local_policy::LocalPolicy;
pub use openai_policy::{OpenAiPolicy, OpenAiPolicyConfig, ToolTurns};
pub use questions::{find_word_ci, read_questions, seeded_order, seeded_subset, Question, DEFAULT_QUESTIONS_FILE};
pub use reply_grammar::{ReplyAction, ReplyGrammar};
pub use trace::TraceBuilder;
pub use trajectories::{manifest_path, Offered, Trajectory, TrajectoryCounts, TrajectorySet};
pub use turn_policy::{Finish, Reply, ReplyStream, TurnPolicy};
