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
    /// The beta of the token F-score given as partial credit (1: SQuAD's F1; `env.wiki.partial_credit_beta`).
    pub partial_credit_beta: f64,
}

impl JudgeGrader {
    /// A grader asking `judge`, 8 verdicts at a time, with SQuAD's F1 as partial credit.
    pub fn new(judge: Arc<dyn Judge>) -> Self {
        JudgeGrader { judge, concurrency: 8, partial_credit_beta: 1.0 }
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
                    partial_credit: Some(agentrt_judge::best_f_beta(a, &q.answers, self.partial_credit_beta)),
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

    /// With `partial_credit_beta` 0.5 the partial credit weighs precision: a span around the answer earns
    /// less than a part of it, where F1 pays the two alike; the verdict does not change.
    #[tokio::test]
    async fn a_precision_weighted_partial_credit_ranks_parts_above_longer_spans() {
        let judge = Arc::new(RuleJudge::new(DEFAULT_F1_THRESHOLD).unwrap());
        let q = Question { id: "q".into(), question: "How much?".into(), answers: vec!["up to 3 pence".into()], page: None, split: None };
        let answers = [(&q, "3 pence"), (&q, "prices went up to 3 pence per pound")];
        let f1 = JudgeGrader::new(judge.clone()).grade(&answers).await.unwrap();
        let weighed = JudgeGrader { partial_credit_beta: 0.5, ..JudgeGrader::new(judge) }.grade(&answers).await.unwrap();
        let credit = |g: &[Grade]| (g[0].partial_credit.unwrap(), g[1].partial_credit.unwrap());
        assert!((credit(&f1).0 - credit(&f1).1).abs() < 1e-12, "F1 ties them: {:?}", credit(&f1));
        assert!(credit(&weighed).0 > credit(&weighed).1, "{:?}", credit(&weighed));
        assert_eq!(f1.iter().map(|g| g.reward).collect::<Vec<_>>(), weighed.iter().map(|g| g.reward).collect::<Vec<_>>());
    }
}
