//! The wiki environment's grader: a judge against the question's gold answers.

use agentrt_judge::{Judge, JudgeInput};
use agentrt_rollout::{Grade, Grader, Question, RolloutError};
use async_trait::async_trait;
use std::sync::Arc;

/// The wiki environment's grader: a [`Judge`] against the question's gold answers, `concurrency`
/// verdicts in flight at once.
pub struct JudgeGrader {
    /// Judges each final answer against the question's gold answers.
    pub judge: Arc<dyn Judge>,
    /// Verdicts in flight at once (at least 1 is used).
    pub concurrency: usize,
}

impl JudgeGrader {
    /// A grader asking `judge`, 8 verdicts at a time.
    pub fn new(judge: Arc<dyn Judge>) -> Self {
        JudgeGrader { judge, concurrency: 8 }
    }
}

#[async_trait]
impl Grader for JudgeGrader {
    fn name(&self) -> String {
        self.judge.name()
    }

    async fn grade(&self, items: &[(&Question, &str)]) -> Result<Vec<Grade>, RolloutError> {
        // Each verdict on its own task (owning its input), `concurrency` at a time.
        let permits = Arc::new(tokio::sync::Semaphore::new(self.concurrency.max(1)));
        let tasks: Vec<_> = items
            .iter()
            .map(|(q, a)| {
                let input = JudgeInput::new(q.question.clone(), q.answers.clone(), a.to_string());
                let (judge, permits) = (self.judge.clone(), permits.clone());
                tokio::spawn(async move {
                    let _permit = permits.acquire_owned().await.expect("the semaphore is never closed");
                    judge.judge(&input).await
                })
            })
            .collect();
        let mut verdicts = Vec::with_capacity(tasks.len());
        for t in tasks {
            verdicts.push(t.await.map_err(|e| RolloutError::Invalid(format!("a judge task failed: {e}")))?);
        }
        verdicts
            .into_iter()
            .zip(items)
            .map(|(v, (q, a))| {
                let v = v?;
                // Both judges give 0 or 1; an LLM judge's `yes` and the rule judge's matches are the 1s.
                let correct = v.reward > 0.5;
                Ok(Grade {
                    reward: v.reward,
                    correct,
                    components: vec![("judge".into(), v.reward)],
                    partial_credit: Some(agentrt_judge::best_f1(a, &q.answers)),
                    well_formed: true,
                    verdict: Some(v),
                    tests: None,
                    grader_error: None,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_judge::{RuleJudge, DEFAULT_F1_THRESHOLD};

    /// The judge's reward is the grade's one named part; the answer's token F1 against the best gold
    /// answer is its partial credit, whatever the verdict.
    #[tokio::test]
    async fn a_grade_names_the_judges_part_and_gives_the_answers_f1_as_partial_credit() {
        let grader = JudgeGrader::new(Arc::new(RuleJudge::new(DEFAULT_F1_THRESHOLD).unwrap()));
        let q = Question { id: "q".into(), question: "Who won?".into(), answers: vec!["Denver Broncos".into(), "Broncos".into()], page: None, split: None };
        let grades = grader.grade(&[(&q, "the Denver team"), (&q, "Broncos")]).await.unwrap();
        assert_eq!((grades[0].reward, grades[0].correct, grades[0].components.clone()), (0.0, false, vec![("judge".to_string(), 0.0)]));
        assert_eq!(grades[0].partial_credit, Some(0.5), "1 of 2 tokens each way against `Denver Broncos`");
        assert_eq!((grades[1].reward, grades[1].partial_credit, grades[1].well_formed), (1.0, Some(1.0), true));
    }
}
