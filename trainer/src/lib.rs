//! `agentrt train`: reinforcement learning of the policy's LoRA adapters on multi-turn tool use.
//!
//! The design in three parts:
//! - **who plays**: each step takes the next questions of a seeded, resumable order (passing over the
//!   settled ones on request: [`draw`]), and the
//!   [`agentrt_rollout::EpisodeRunner`] plays `num_rollouts` episodes per question (the policy writes
//!   programs, the WASM sandbox runs them, the judge scores the answer).
//! - **who learns**: [`advantages`] turns rewards into advantages (REINFORCE, RLOO or GRPO, skipping groups
//!   with no signal); the [`routing::Detector`] marks samples that must train only the forget adapter; the
//!   [`Learner`] computes the masked policy-gradient loss with a KL penalty to the reference (the base
//!   model, or the warm-started model of `model.init_adapter`: [`warm_start`]), clips, and steps AdamW;
//!   [`sft`] trains the same adapters with the same learner on written conversations.
//! - **who records**: the [`RunDir`] holds the resolved config, `metrics.jsonl` (one [`StepMetrics`] line per step),
//!   transcripts, and atomic checkpoints (adapters, optimizer, data position) that `--resume` continues from
//!   exactly; one run loop (`run_loop.rs`) does the resuming, checkpoints and progress of both `train` and
//!   `sft`, each of which supplies only its step; [`plot`] draws the curves as PNG; [`sweep`] runs a grid of
//!   configs.

pub mod advantages;
pub mod config;
pub mod draw;
mod error;
mod external;
pub mod learner;
pub mod metrics;
pub mod model_section;
pub mod plot;
pub mod reward;
pub mod routing;
pub mod run_config;
pub mod run_dir;
mod run_loop;
pub mod sft;
pub mod sft_data;
pub mod sweep;
// For tests and examples only: the `testing` feature, which only dev-dependencies turn on.
#[cfg(any(test, feature = "testing"))]
pub mod toy;
mod trainer;
pub mod warm_start;

pub use config::{AdvantageKind, TrainConfig, DEFAULT_CONFIG};
pub use error::TrainError;
pub use learner::{model_tokens, Learner, LearnerConfig, LossScale, Sample, UpdateStats};
pub use metrics::{HeldOutEval, RoutingEval, RoutingModeEval, SftStepMetrics, StepMetrics, StepSeconds};
pub use run_config::RunConfig;
pub use run_dir::{RunDir, TrainerState};
pub use sft::{sft, SftConfig, SftRequest, SftSummary, DEFAULT_SFT_CONFIG};
pub use trainer::{eval_slice, eval_split, learner_config, sample_seed, train, TrainRequest, TrainSummary};
