//! Evaluation of episodes: what `agentrt eval` measures and writes.
//!
//! The design in three parts:
//! - **who plays**: the caller runs episodes with [`agentrt_rollout::EpisodeRunner`], the same loop as
//!   training, with any [`agentrt_rollout::TurnPolicy`] (the trained model, zero-shot, the random baseline,
//!   or a model behind an OpenAI-compatible server).
//! - **who measures**: [`Metrics::from_episodes`] computes accuracy, tool calls (in all and per tool),
//!   turns, tokens, search quality (the gold page among the first search's hits, and its rank), the share
//!   of replies with a runnable program and the failure categories, each rate with a 95% Wilson interval;
//!   and [`Diversity`]: distinct samples and pairwise similarity, with a `degenerate` flag for collapse.
//! - **who reports**: [`write_report`] writes `results.json`, `results.md`, `results.png` and
//!   `transcripts.jsonl` into the output directory; [`compare`] puts two of them side by side, with
//!   [`paired`]'s question-by-question difference (paired bootstrap interval, McNemar's exact test).

mod diversity;
mod metrics;
mod paired;
mod pass_at_k;
mod report;

pub use diversity::{jaccard, preview, spread, DegeneracyThresholds, Diversity, MAX_PAIRED_SAMPLES};
pub use metrics::{difference_interval, sample_text, wilson_interval, Mean, Metrics, Rate};
pub use paired::{mcnemar_exact, paired, paired_outcomes, Paired, BOOTSTRAP_RESAMPLES, TRANSCRIPTS};
pub use pass_at_k::{pass_at_k, CodeMetrics, TaskResult};
pub use report::{compare, markdown as report_markdown, read_results, table, write_report, EvalInfo, RESULTS_JSON, RESULTS_MD, RESULTS_PNG};

/// Why a report could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// Reading or writing a file failed (the io error is the source).
    #[error("{path}")]
    Io {
        /// The file or directory read or written.
        path: std::path::PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A results file was read but is not what it should be.
    #[error("{path}: {reason}")]
    Malformed {
        /// The `results.json` read.
        path: std::path::PathBuf,
        /// What is wrong with it: not JSON, or which part (`info`, `metrics`) fails to parse.
        reason: String,
    },
    /// Anything else: an episode that will not serialise, a chart that cannot be drawn, no evaluations to tabulate.
    #[error("{0}")]
    Invalid(String),
}
