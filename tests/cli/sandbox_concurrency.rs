//! Many programs at once on one sandbox: every result must be its own.

use agentrt_runtime::{FixtureTools, Sandbox, SandboxConfig};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_programs_run_concurrently_and_each_gets_its_own_result() {
    let sandbox = Arc::new(Sandbox::new(SandboxConfig::default(), Arc::new(FixtureTools::default())).await.unwrap());
    let queries = ["Paris", "Oxygen", "Denver Broncos"];
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..64usize {
        let sandbox = sandbox.clone();
        let query = queries[i % queries.len()];
        tasks.spawn(async move {
            let program = format!("hits = search_pages({query:?})\ntotal = sum(range({i} + 1))\nprint({i}, hits[0]['page_id'], total)\ntotal * 2\n");
            (i, query, sandbox.run(&program).await)
        });
    }
    let mut seen = 0;
    while let Some(joined) = tasks.join_next().await {
        let (i, query, report) = joined.unwrap();
        assert!(report.is_ok(), "program {i}: {:?}", report.result);
        let expected_page = query.to_lowercase().replace(' ', "_");
        let total = i * (i + 1) / 2;
        assert_eq!(report.stdout, format!("{i} {expected_page} {total}\n"), "program {i}");
        assert_eq!(report.result.unwrap().value, Some((total * 2).to_string()), "program {i}");
        assert_eq!(report.host_calls.len(), 1);
        assert_eq!(report.host_calls[0].args["query"], query);
        seen += 1;
    }
    assert_eq!(seen, 64);
}
