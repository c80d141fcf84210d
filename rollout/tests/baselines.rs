//! The baselines play as documented whether or not a demonstration comes before the question: the random
//! baseline first runs its search-and-read program through the real sandbox (three tool calls), then
//! answers with a span of what that program printed, never of the demonstration's tool output.

use agentrt_environments::testing::fixture_runner;
use agentrt_environments::wiki::{demonstration, RandomPolicy};
use agentrt_rollout::{EpisodeOutcome, EpisodeSpec, Question, TurnAction};

fn question(i: usize) -> Question {
    Question {
        id: format!("q{i}"),
        question: "Which team won Super Bowl 50 for the Denver Broncos?".into(),
        answers: vec!["Denver Broncos".into()],
        page: Some("denver_broncos".into()),
        split: Some("dev".into()),
    }
}

#[tokio::test]
async fn the_random_baseline_searches_reads_then_answers_from_its_own_reading() {
    for with_demonstration in [false, true] {
        let mut runner = fixture_runner(EpisodeSpec { max_turns: 4, ..EpisodeSpec::default() }).await;
        if with_demonstration {
            runner.demonstration = demonstration();
        }
        let questions: Vec<Question> = (0..6).map(question).collect();
        let batch = runner.run(&RandomPolicy::new(3), &questions).await.unwrap();
        for e in &batch.episodes {
            let what = format!("demonstration {with_demonstration}, {}", e.question.id);
            assert_eq!(e.turns.len(), 2, "{what}: {:?}", e.turns);
            assert_eq!(e.turns[0].action, TurnAction::Program, "{what}");
            assert_eq!(e.turns[1].action, TurnAction::Answer, "{what}");
            assert!(matches!(e.outcome, EpisodeOutcome::Correct | EpisodeOutcome::WrongAnswer), "{what}: {:?}", e.outcome);
            let tools: Vec<&str> = e.tool_calls().map(|c| c.tool.as_str()).collect();
            assert_eq!(tools, ["search_pages", "view_sections", "read_section"], "{what}");
            let read = e.turns[0].observation.as_deref().expect("the program printed a section");
            let answer = e.final_answer.as_deref().expect("an answer");
            assert!(!answer.is_empty() && read.contains(answer), "{what}: `{answer}` is not a span of `{read}`");
            assert!(!"Secker & Warburg George Orwell".contains(answer), "{what}: answered from the demonstration");
        }
    }
}
