//! The wiki's questions: a questions file (`env.wiki.questions`; by default the bundled
//! `data/wiki/questions.jsonl`, 8,313 SQuAD questions over the corpus with their gold page and split),
//! read per split when asked. The reader is the one reader of question files (`agentrt_search::questions`,
//! which retrieval evaluation shares): JSON Lines or Parquet, a bad row an error naming file, line and
//! field.

use agentrt_rollout::{read_questions, Question, RolloutError};
use std::path::{Path, PathBuf};

pub use agentrt_rollout::DEFAULT_QUESTIONS_FILE;

/// The wiki's questions file.
#[derive(Debug, Clone)]
pub struct WikiQuestions {
    path: PathBuf,
}

impl WikiQuestions {
    /// The questions of the file at `path`.
    pub fn new(path: &Path) -> WikiQuestions {
        WikiQuestions { path: path.to_path_buf() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The questions of `split` (`all`: every one, split or not), in file order.
    pub fn of_split(&self, split: &str) -> Result<Vec<Question>, RolloutError> {
        read_questions(&self.path, (split != "all").then_some(split))
    }
}
