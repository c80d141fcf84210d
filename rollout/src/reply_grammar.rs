//! How a reply is read: the one question the episode loop asks of a reply's text, answered by the
//! environment that plays it (the wiki's grammar finds a program or an `<answer>`; the code environment
//! takes the whole reply as its answer).

/// What a reply asks the episode to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyAction {
    /// Run this program and show the model what it printed.
    Program(String),
    /// The episode ends with this answer.
    Answer(String),
    /// The reply holds neither a program nor an answer: the episode ends, the whole reply taken as an
    /// unmarked answer.
    Nothing,
}

/// An environment's reply grammar. Implementations must be cheap to share between tasks.
pub trait ReplyGrammar: Send + Sync {
    /// The grammar's name, as settings and reports show it (`tool_programs`, `final_answer`).
    fn name(&self) -> &'static str;

    /// What `reply` asks for.
    fn read(&self, reply: &str) -> ReplyAction;
}
