//! pass@k of the code environment: the unbiased estimator of Chen et al. (2021), per task from `n`
//! samples of which `c` pass every test, averaged over tasks; with the tally of what went wrong.

use agentrt_rollout::{Episode, FailureKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `1 - C(n-c, k) / C(n, k)`: the chance that at least one of `k` samples drawn without replacement from
/// the `n` is correct, computed as a product so that large `n` does not overflow. `k` must be `<= n`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    assert!(k >= 1 && k <= n && c <= n, "pass@k needs 1 <= k <= n and c <= n (n={n}, c={c}, k={k})");
    if n - c < k {
        return 1.0;
    }
    1.0 - ((n - c + 1)..=n).map(|i| 1.0 - k as f64 / i as f64).product::<f64>()
}

/// One task's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    /// The task's id.
    pub task_id: String,
    /// Samples drawn.
    pub n: usize,
    /// Samples that passed every test.
    pub correct: usize,
    /// Mean fraction of tests passed over the samples.
    pub tests_passed: f64,
    /// Each sample's first failure (`None`: it passed), in sample order.
    pub failures: Vec<Option<FailureKind>>,
}

/// What `agentrt eval --env code` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CodeMetrics {
    /// Tasks evaluated.
    pub num_tasks: usize,
    /// Samples per task.
    pub n: usize,
    /// pass@k for each reported k (1, 5, 10, and n, those `<= n`), averaged over tasks.
    pub pass_at: BTreeMap<usize, f64>,
    /// Mean fraction of tests passed, over every sample.
    pub tests_passed: f64,
    /// Samples by their first failure's kind (`passed` for those that passed).
    pub outcomes: BTreeMap<String, usize>,
}

impl TaskResult {
    /// The result of one task from its episodes (all of the same task).
    pub fn of(task_id: &str, episodes: &[&Episode]) -> TaskResult {
        let runs: Vec<_> = episodes.iter().map(|e| e.tests.as_ref()).collect();
        TaskResult::of_runs(task_id, &runs)
    }

    /// The result of one task from each sample's test run (`None`: the sample's code was not run).
    pub fn of_runs(task_id: &str, runs: &[Option<&agentrt_rollout::TestRun>]) -> TaskResult {
        let correct = runs.iter().filter(|r| r.is_some_and(|r| r.all_passed())).count();
        let fraction = |r: Option<&agentrt_rollout::TestRun>| r.map_or(0.0, |r| if r.total() == 0 { 0.0 } else { r.passed as f64 / r.total() as f64 });
        TaskResult {
            task_id: task_id.to_string(),
            n: runs.len(),
            correct,
            tests_passed: runs.iter().map(|r| fraction(*r)).sum::<f64>() / runs.len().max(1) as f64,
            failures: runs
                .iter()
                .map(|r| if r.is_some_and(|r| r.all_passed()) { None } else { Some(r.and_then(|r| r.first_failure()).unwrap_or(FailureKind::Format)) })
                .collect(),
        }
    }
}

impl CodeMetrics {
    /// The metrics of `tasks`, which must all have the same `n`.
    pub fn of(tasks: &[TaskResult]) -> Result<CodeMetrics, String> {
        let n = tasks.first().map_or(0, |t| t.n);
        if let Some(t) = tasks.iter().find(|t| t.n != n || t.n == 0) {
            return Err(format!("task {} has {} samples, the first task {n}: pass@k needs the same n for every task", t.task_id, t.n));
        }
        let mut pass_at = BTreeMap::new();
        for k in [1, 5, 10, n] {
            if k >= 1 && k <= n && !tasks.is_empty() {
                pass_at.insert(k, tasks.iter().map(|t| pass_at_k(t.n, t.correct, k)).sum::<f64>() / tasks.len() as f64);
            }
        }
        let mut outcomes = BTreeMap::new();
        for f in tasks.iter().flat_map(|t| &t.failures) {
            *outcomes.entry(f.map_or("passed", FailureKind::name).to_string()).or_insert(0) += 1;
        }
        let samples = (tasks.len() * n).max(1) as f64;
        Ok(CodeMetrics { num_tasks: tasks.len(), n, pass_at, tests_passed: tasks.iter().map(|t| t.tests_passed * t.n as f64).sum::<f64>() / samples, outcomes })
    }

    /// A markdown summary.
    pub fn markdown(&self, policy: &str, tasks: &str) -> String {
        let mut out =
            format!("# Code evaluation\n\n{policy} on {} tasks of {tasks}, {} samples each.\n\n| metric | value |\n|---|---|\n", self.num_tasks, self.n);
        for (k, v) in &self.pass_at {
            out.push_str(&format!("| pass@{k} | {:.3} |\n", v));
        }
        out.push_str(&format!("| tests passed (mean fraction) | {:.3} |\n\n| outcome (first failure) | samples |\n|---|---|\n", self.tests_passed));
        for (kind, count) in &self.outcomes {
            out.push_str(&format!("| {kind} | {count} |\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_k_is_the_unbiased_estimator() {
        // Exact values of 1 - C(n-c,k)/C(n,k).
        assert_eq!(pass_at_k(10, 0, 1), 0.0);
        assert!((pass_at_k(10, 3, 1) - 0.3).abs() < 1e-12);
        assert!((pass_at_k(10, 3, 5) - (1.0 - 21.0 / 252.0)).abs() < 1e-12);
        assert_eq!(pass_at_k(10, 6, 5), 1.0);
        assert_eq!(pass_at_k(10, 1, 10), 1.0);
        assert!((pass_at_k(200, 20, 100) - (1.0 - (0..100).map(|i| (180 - i) as f64 / (200 - i) as f64).product::<f64>())).abs() < 1e-9);
    }

    #[test]
    fn metrics_average_over_tasks_and_tally_failures() {
        let t = |id: &str, correct: usize, failures: Vec<Option<FailureKind>>| TaskResult { task_id: id.into(), n: 2, correct, tests_passed: 0.5, failures };
        let m = CodeMetrics::of(&[t("a", 2, vec![None, None]), t("b", 0, vec![Some(FailureKind::Syntax), Some(FailureKind::WrongAnswer)])]).unwrap();
        assert_eq!(m.pass_at.get(&1), Some(&0.5));
        assert_eq!(m.pass_at.get(&2), Some(&0.5));
        assert_eq!(m.pass_at.get(&5), None);
        assert_eq!(m.outcomes.get("passed"), Some(&2));
        assert_eq!(m.outcomes.get("syntax"), Some(&1));
        let uneven = TaskResult { task_id: "c".into(), n: 3, correct: 0, tests_passed: 0.0, failures: vec![None; 3] };
        assert!(CodeMetrics::of(&[t("a", 1, vec![None, None]), uneven]).unwrap_err().contains("task c has 3 samples"));
    }
}
