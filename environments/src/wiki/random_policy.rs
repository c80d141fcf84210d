//! The wiki's random baseline (random tool calls, then a random span of what it read): the floor a trained
//! policy must clear.

use agentrt_rollout::{Conversation, Reply, RolloutError, TurnPolicy};
use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Mutex;

/// The random baseline: first a program that searches for a few random words of the question, opens a
/// random hit and prints a random section; then an answer that is a random span (1-4 words) of what that
/// printed. It uses the real tools, so it measures what luck gets from the corpus.
pub struct RandomPolicy {
    rng: Mutex<StdRng>,
}

impl RandomPolicy {
    /// A random baseline whose choices are reproducible from `seed`.
    pub fn new(seed: u64) -> RandomPolicy {
        RandomPolicy { rng: Mutex::new(StdRng::seed_from_u64(seed)) }
    }

    fn program(question: &str, rng: &mut StdRng) -> String {
        let words: Vec<&str> = question.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() > 2).collect();
        let n = rng.random_range(1..=3usize).min(words.len().max(1));
        let query: Vec<&str> = if words.is_empty() { Vec::new() } else { (0..n).map(|_| words[rng.random_range(0..words.len())]).collect() };
        let query = if query.is_empty() { question.to_string() } else { query.join(" ") };
        let (hit, section) = (rng.random_range(0..5usize), rng.random_range(0..8usize));
        format!(
            "```python\nhits = search_pages({query:?})\npage = hits[min({hit}, len(hits) - 1)][\"page_id\"]\nsections = view_sections(page)\nprint(read_section(sections[{section} % len(sections)][\"section_id\"]))\n```"
        )
    }

    fn answer(read: &str, rng: &mut StdRng) -> String {
        let words: Vec<&str> = read.split_whitespace().collect();
        if words.is_empty() {
            return "<answer></answer>".into();
        }
        let len = rng.random_range(1..=4usize).min(words.len());
        let start = rng.random_range(0..=words.len() - len);
        format!("<answer>{}</answer>", words[start..start + len].join(" "))
    }
}

#[async_trait]
impl TurnPolicy for RandomPolicy {
    fn name(&self) -> String {
        "random".into()
    }

    async fn reply(&self, conversations: &[&Conversation]) -> Result<Vec<Reply>, RolloutError> {
        let mut rng = self.rng.lock().expect("rng lock");
        Ok(conversations
            .iter()
            .map(|c| {
                let text = match c.last_tool_output() {
                    None => Self::program(c.question().unwrap_or(""), &mut rng),
                    Some(read) => Self::answer(read, &mut rng),
                };
                Reply::text(text)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_rollout::ReplyAction;

    #[test]
    fn random_program_parses_and_answer_is_a_span() {
        let mut rng = StdRng::seed_from_u64(1);
        let p = RandomPolicy::program("Who won Super Bowl 50?", &mut rng);
        match crate::wiki::reply::parse_reply(&p) {
            ReplyAction::Program(code) => assert!(code.contains("search_pages(")),
            other => panic!("{other:?}"),
        }
        let a = RandomPolicy::answer("the Denver Broncos won", &mut rng);
        let inner = a.trim_start_matches("<answer>").trim_end_matches("</answer>");
        assert!(!inner.is_empty() && "the Denver Broncos won".contains(inner), "{a}");
    }
}
