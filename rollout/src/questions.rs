//! Questions: the type and its reader live in `agentrt_search::questions` (the one reader of question
//! files, which retrieval evaluation uses too); this module gives them rollout's error type, and the seeded
//! orders every command draws questions in.

use crate::error::RolloutError;
pub use agentrt_search::questions::{find_word_ci, Question, DEFAULT_QUESTIONS_FILE};
use std::path::Path;

/// `items` in a seeded random order: the one order `agentrt eval --num-samples N --seed S` takes its first
/// N questions from, and training's held-out evaluation slice (`run.eval_skip`) skips them in.
pub fn seeded_order<T>(mut items: Vec<T>, seed: u64) -> Vec<T> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    items.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    items
}

/// The first `n` of [`seeded_order`] (all of `items`, in their own order, when `n` is 0 or more than there are).
pub fn seeded_subset<T>(items: Vec<T>, n: usize, seed: u64) -> Vec<T> {
    if n > 0 && n < items.len() {
        let mut items = seeded_order(items, seed);
        items.truncate(n);
        items
    } else {
        items
    }
}

/// [`agentrt_search::read_questions`] (`.jsonl`/`.json`/`.ndjson` or `.parquet`, keeping those of `split`
/// when given; a bad row is an error naming the file, the line and the field), with its error as a
/// [`RolloutError`].
pub fn read_questions(path: &Path, split: Option<&str>) -> Result<Vec<Question>, RolloutError> {
    Ok(agentrt_search::read_questions(path, split)?)
}
