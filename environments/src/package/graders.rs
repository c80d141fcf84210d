//! The graders a package names in `[grader]`: the built-in ones (`exact`, `numeric`) and a grader
//! component (`component`: a `.wasm` of the `agentrt:tools/grader` world, run bounded in the sandbox).
//! `judge` is the wiki's [`crate::wiki::JudgeGrader`].

use super::tasks::TaskRows;
use agentrt_judge::{extract_answer, normalize_answer};
use agentrt_rollout::{Grade, Grader, Question, RolloutError};
use agentrt_runtime::{GraderComponent, Limits};
use async_trait::async_trait;
use std::sync::Arc;

/// A grade from a reward's parts: the reward is their sum.
fn grade_of(components: Vec<(String, f32)>, correct: bool) -> Grade {
    Grade {
        reward: components.iter().map(|(_, v)| v).sum(),
        correct,
        components,
        partial_credit: None,
        well_formed: true,
        verdict: None,
        tests: None,
        grader_error: None,
    }
}

/// The question's gold answers, or an error naming the task: a built-in grader compares against them.
fn gold(question: &Question) -> Result<&[String], RolloutError> {
    if question.answers.is_empty() {
        return Err(RolloutError::Invalid(format!("task {}: no `answer` or `answers` to grade against", question.id)));
    }
    Ok(&question.answers)
}

/// `exact`: the answer (inside its `<answer>` tag when it has one) equals one of the gold answers after
/// SQuAD's normalisation (case, punctuation, articles, spaces). One part, `exact`.
pub struct ExactGrader;

#[async_trait]
impl Grader for ExactGrader {
    fn name(&self) -> String {
        "exact".into()
    }

    async fn grade(&self, items: &[(&Question, &str)]) -> Result<Vec<Grade>, RolloutError> {
        items
            .iter()
            .map(|(q, reply)| {
                let answer = normalize_answer(extract_answer(reply));
                let correct = gold(q)?.iter().any(|g| normalize_answer(g) == answer);
                Ok(grade_of(vec![("exact".into(), if correct { 1.0 } else { 0.0 })], correct))
            })
            .collect()
    }
}

/// `numeric`: the last number in the answer (`42`, `-3.5`, `1,024`; inside its `<answer>` tag when it has
/// one) equals a gold answer's number within `tolerance` of the larger of 1 and the gold's size. One
/// part, `numeric`.
pub struct NumericGrader {
    /// The relative tolerance.
    pub tolerance: f64,
}

/// The default relative tolerance of `numeric`.
pub const NUMERIC_TOLERANCE: f64 = 1e-6;

/// The last number written in `text` (thousands separators allowed; a trailing stop is not a decimal
/// point).
pub fn last_number(text: &str) -> Option<f64> {
    let mut found = None;
    let mut current = String::new();
    let mut flush = |current: &mut String| {
        let cleaned: String = current.chars().filter(|c| *c != ',').collect();
        if let Ok(x) = cleaned.trim_end_matches('.').parse::<f64>() {
            found = Some(x);
        }
        current.clear();
    };
    for c in text.chars() {
        let continues = c.is_ascii_digit() || ((c == '.' || c == ',') && !current.is_empty()) || (c == '-' && current.is_empty());
        if continues {
            current.push(c);
        } else {
            flush(&mut current);
        }
    }
    flush(&mut current);
    found
}

#[async_trait]
impl Grader for NumericGrader {
    fn name(&self) -> String {
        format!("numeric(tolerance {})", self.tolerance)
    }

    async fn grade(&self, items: &[(&Question, &str)]) -> Result<Vec<Grade>, RolloutError> {
        items
            .iter()
            .map(|(q, reply)| {
                let golds: Vec<f64> = gold(q)?
                    .iter()
                    .map(|g| last_number(g).ok_or_else(|| RolloutError::Invalid(format!("task {}: the answer {g:?} is not a number", q.id))))
                    .collect::<Result<_, _>>()?;
                let correct = last_number(extract_answer(reply)).is_some_and(|x| golds.iter().any(|g| (x - g).abs() <= self.tolerance * g.abs().max(1.0)));
                Ok(grade_of(vec![("numeric".into(), if correct { 1.0 } else { 0.0 })], correct))
            })
            .collect()
    }
}

/// `component`: a grader component scores each answer against its task's row, in a fresh instance under
/// `limits`. A grade it cannot give (a bound hit, a crash, a refusal) is that answer's: reward 0, not
/// correct, the reason in [`Grade::grader_error`]; the run goes on.
pub struct ComponentGrader {
    component: GraderComponent,
    tasks: Arc<TaskRows>,
    limits: Limits,
    /// Grades in flight at once.
    concurrency: usize,
}

impl ComponentGrader {
    /// A grader running `component` on the rows of `tasks`, each grade bounded by `limits`.
    pub fn new(component: GraderComponent, tasks: Arc<TaskRows>, limits: Limits) -> Self {
        ComponentGrader { component, tasks, limits, concurrency: crate::programs_in_flight() }
    }
}

#[async_trait]
impl Grader for ComponentGrader {
    fn name(&self) -> String {
        let file = self.component.path().file_name().map_or_else(|| self.component.path().display().to_string(), |f| f.to_string_lossy().into_owned());
        format!("component({file})")
    }

    async fn grade(&self, items: &[(&Question, &str)]) -> Result<Vec<Grade>, RolloutError> {
        use futures::StreamExt;
        let mut rows = Vec::with_capacity(items.len());
        for (q, reply) in items {
            let row =
                self.tasks.row(&q.id).ok_or_else(|| RolloutError::Invalid(format!("question {} is not a task of {}", q.id, self.tasks.path().display())))?;
            rows.push((row.to_string(), reply.to_string()));
        }
        let grades: Vec<Grade> = futures::stream::iter(rows)
            .map(|(row, reply): (String, String)| async move { self.component.grade(&row, &reply, self.limits).await })
            .buffered(self.concurrency)
            .map(|graded| match graded {
                Ok(g) => grade_of(g.parts, g.correct),
                Err(failure) => Grade { grader_error: Some(failure.to_string()), ..grade_of(Vec::new(), false) },
            })
            .collect()
            .await;
        Ok(grades)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(answers: &[&str]) -> Question {
        Question { id: "t".into(), question: "?".into(), answers: answers.iter().map(|a| a.to_string()).collect(), page: None, split: None }
    }

    #[test]
    fn the_last_number_of_a_text_is_read_with_separators_and_signs() {
        for (text, n) in [("42", Some(42.0)), ("It is 42.", Some(42.0)), ("from 3 to -1,024.5 apples", Some(-1024.5)), ("none", None), ("2 + 2 = 4", Some(4.0))]
        {
            assert_eq!(last_number(text), n, "{text}");
        }
    }

    #[tokio::test]
    async fn numeric_grades_42_0_and_42_apples_right_for_the_gold_42() {
        let grader = NumericGrader { tolerance: NUMERIC_TOLERANCE };
        let gold = q(&["42"]);
        let grades = grader.grade(&[(&gold, "42.0"), (&gold, "42 apples"), (&gold, "<answer>42</answer>"), (&gold, "43"), (&gold, "no idea")]).await.unwrap();
        let correct: Vec<bool> = grades.iter().map(|g| g.correct).collect();
        assert_eq!(correct, [true, true, true, false, false]);
        assert_eq!(grades[0].components, vec![("numeric".to_string(), 1.0)]);
        let error = grader.grade(&[(&q(&["many"]), "1")]).await.err().unwrap().to_string();
        assert!(error.contains("task t: the answer \"many\" is not a number"), "{error}");
    }

    #[tokio::test]
    async fn exact_compares_normalised_answers() {
        let gold = q(&["The Eiffel Tower"]);
        let grades = ExactGrader.grade(&[(&gold, "eiffel tower."), (&gold, "<answer>The Eiffel  Tower</answer>"), (&gold, "Eiffel")]).await.unwrap();
        assert_eq!(grades.iter().map(|g| g.reward).collect::<Vec<_>>(), [1.0, 1.0, 0.0]);
        assert!(ExactGrader.grade(&[(&q(&[]), "x")]).await.err().unwrap().to_string().contains("no `answer`"));
    }
}
