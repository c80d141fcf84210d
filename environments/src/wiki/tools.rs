//! The wiki's tools (`search_pages`, `search_passages`, `view_sections`, `read_section`, declared in WIT) served by the search
//! index: the one place where `agentrt-runtime` and `agentrt-search` meet.

use agentrt_runtime::{PageHit, PassageHit, SectionRef, ToolFailure, ToolHost};
use agentrt_search::{QueryEncoder, SearchError, WikiIndex};
use std::path::Path;
use std::sync::Arc;

/// [`ToolHost`] over a [`WikiIndex`]. Searches run on tokio's blocking pool: they are CPU work (an
/// embedding and a tantivy query) and must not stall the tasks that drive other programs.
pub struct IndexTools {
    index: Arc<WikiIndex>,
}

impl IndexTools {
    /// The tools over `index`.
    pub fn new(index: Arc<WikiIndex>) -> Self {
        Self { index }
    }
}

/// Opens the index at `dir`, its queries embedded by `queries`, or says how to build it.
pub fn open(dir: &Path, queries: QueryEncoder) -> Result<Arc<dyn ToolHost>, SearchError> {
    if !dir.exists() {
        return Err(SearchError::BadIndex {
            dir: dir.to_path_buf(),
            reason: "nothing is there (building it takes about two minutes on the bundled corpus)".into(),
        });
    }
    Ok(Arc::new(IndexTools::new(Arc::new(WikiIndex::open_with(dir, queries)?))))
}

fn failure(error: SearchError) -> ToolFailure {
    match error {
        SearchError::UnknownPage(_) | SearchError::UnknownSection(_) => ToolFailure::NotFound(error.to_string()),
        SearchError::EmptyQuery => ToolFailure::BadArgument(error.to_string()),
        other => ToolFailure::Failed(other.to_string()),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, SearchError> + Send + 'static) -> Result<T, ToolFailure> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ToolFailure::Failed(format!("the search task failed: {e}")))?.map_err(failure)
}

#[async_trait::async_trait]
impl ToolHost for IndexTools {
    async fn search_pages(&self, query: &str, k: usize) -> Result<Vec<PageHit>, ToolFailure> {
        let index = self.index.clone();
        let query = query.to_string();
        blocking(move || index.search_pages(&query, k)).await
    }

    async fn search_passages(&self, query: &str, page_id: Option<&str>, k: usize) -> Result<Vec<PassageHit>, ToolFailure> {
        let index = self.index.clone();
        let (query, page_id) = (query.to_string(), page_id.map(str::to_string));
        blocking(move || index.search_passages(&query, page_id.as_deref(), k)).await
    }

    async fn view_sections(&self, page_id: &str) -> Result<Vec<SectionRef>, ToolFailure> {
        self.index.view_sections(page_id).map_err(failure)
    }

    async fn read_section(&self, section_id: &str) -> Result<String, ToolFailure> {
        self.index.read_section(section_id).map_err(failure)
    }
}
