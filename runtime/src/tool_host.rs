//! The host side of the wiki tools: a trait, so that the search index (or a test fixture) plugs in
//! without the runtime knowing about either.

pub use agentrt_tool_types::{PageHit, PassageHit, SectionRef};
use serde::Serialize;

/// Why a tool call failed, in words meant for the model that made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum ToolFailure {
    /// An argument is out of range or malformed.
    #[error("bad argument: {0}")]
    BadArgument(String),
    /// The page or section asked for does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The tool could not do its work (an index error, say).
    #[error("{0}")]
    Failed(String),
}

/// Serves the four wiki tools. Implementations must be cheap to call concurrently: many programs run
/// at once and each may call several tools.
#[async_trait::async_trait]
pub trait ToolHost: Send + Sync + 'static {
    /// The `k` best pages for `query`, best first.
    async fn search_pages(&self, query: &str, k: usize) -> Result<Vec<PageHit>, ToolFailure>;
    /// The `k` passages that best answer `query`, best first: from the page `page_id`, or from the best
    /// pages for `query` when it is `None`.
    async fn search_passages(&self, query: &str, page_id: Option<&str>, k: usize) -> Result<Vec<PassageHit>, ToolFailure>;
    /// The sections of a page, in reading order.
    async fn view_sections(&self, page_id: &str) -> Result<Vec<SectionRef>, ToolFailure>;
    /// The text of one section.
    async fn read_section(&self, section_id: &str) -> Result<String, ToolFailure>;
}

/// The tool host of an environment without a corpus (the code environment): every wiki tool fails with
/// a message saying so, which a program sees as a RuntimeError.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoWikiTools;

const NO_WIKI: &str = "this environment has no corpus: the wiki tools are not available";

#[async_trait::async_trait]
impl ToolHost for NoWikiTools {
    async fn search_pages(&self, _query: &str, _k: usize) -> Result<Vec<PageHit>, ToolFailure> {
        Err(ToolFailure::Failed(NO_WIKI.into()))
    }
    async fn search_passages(&self, _query: &str, _page_id: Option<&str>, _k: usize) -> Result<Vec<PassageHit>, ToolFailure> {
        Err(ToolFailure::Failed(NO_WIKI.into()))
    }
    async fn view_sections(&self, _page_id: &str) -> Result<Vec<SectionRef>, ToolFailure> {
        Err(ToolFailure::Failed(NO_WIKI.into()))
    }
    async fn read_section(&self, _section_id: &str) -> Result<String, ToolFailure> {
        Err(ToolFailure::Failed(NO_WIKI.into()))
    }
}
