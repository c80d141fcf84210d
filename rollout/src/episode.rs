//! The episode loop shared by training and evaluation.

use crate::conversation::Conversation;
use crate::episode_spec::EpisodeSpec;
use crate::error::RolloutError;
use crate::grading::{Grade, Grader, TestRun};
use crate::questions::Question;
use crate::reply_grammar::{ReplyAction, ReplyGrammar};
use crate::turn_policy::{Finish, Reply, TurnPolicy};
use agentrt_judge::Verdict;
use agentrt_policy::Message;
use agentrt_runtime::{RunReport, Sandbox};
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

/// What a reply did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnAction {
    /// It held a program, which ran.
    Program,
    /// It gave an `<answer>`.
    Answer,
    /// Neither: the whole reply is taken as the final answer.
    Other,
}

/// One tool call, as the transcript keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallRecord {
    /// The tool called: `search_pages`, `view_sections` or `read_section`.
    pub tool: String,
    /// Its arguments, as JSON.
    pub args: serde_json::Value,
    /// The tool's error, when the call failed.
    pub error: Option<String>,
    /// The page ids (search_pages) or section ids (view_sections) it returned, in order; search quality is read from them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub returned_ids: Vec<String>,
    /// How long the call took, in microseconds.
    pub micros: u64,
}

/// One reply and what came of it.
#[derive(Debug, Clone, Serialize)]
pub struct TurnRecord {
    /// The reply's text as the policy wrote it.
    pub reply: String,
    /// Why the reply ended.
    pub finish: Finish,
    /// Whether it ran a program, answered, or neither.
    pub action: TurnAction,
    /// Tokens the model wrote in this reply: the ids sampled, or a server's `usage.completion_tokens` (0 for
    /// a policy that counts neither: a server that sends no usage, which the `openai:` policy warns of).
    pub reply_tokens: usize,
    /// The program it held, when it held one.
    pub program: Option<String>,
    /// What the program's run gave back (output, last value, error), cut at `max_observation_chars`.
    pub observation: Option<String>,
    /// The program's error kind (`syntax`, `exception:ValueError`, `limit-exceeded:fuel`, …) when it failed.
    pub program_error: Option<String>,
    /// The tool calls the program made, in order.
    pub tool_calls: Vec<ToolCallRecord>,
}

/// How an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeOutcome {
    /// The final answer (tagged or not) was graded correct.
    Correct,
    /// An answer was given and judged wrong.
    WrongAnswer,
    /// The last reply had neither a program nor an `<answer>` (graded as it stands, and wrong).
    NoAnswer,
    /// `max_turns` replies, the last still a program.
    MaxTurns,
}

/// One finished episode.
#[derive(Debug, Clone, Serialize)]
pub struct Episode {
    /// The question the episode answered.
    pub question: Question,
    /// Every reply in order, with what came of it.
    pub turns: Vec<TurnRecord>,
    /// The graded text (the inside of `<answer>`, or the last reply when it had no tag).
    pub final_answer: Option<String>,
    /// The grade's reward (0 when no answer was graded, i.e. on `max_turns`).
    pub reward: f32,
    /// The parts `reward` adds up from, by name, as the grader gave them (training adds its shaping).
    pub reward_components: Vec<(String, f32)>,
    /// The grade's partial credit ([`Grade::partial_credit`]); none when no answer was graded.
    #[serde(skip)]
    pub partial_credit: Option<f64>,
    /// The grade's [`Grade::well_formed`]; false when no answer was graded.
    #[serde(skip)]
    pub well_formed: bool,
    /// The judge's verdict, when a judge graded the answer.
    pub verdict: Option<Verdict>,
    /// Each test's result, when the environment grades with tests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests: Option<TestRun>,
    /// Why the grader gave no grade ([`crate::Grade::grader_error`]); the reward is then 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grader_error: Option<String>,
    /// How the episode ended.
    pub outcome: EpisodeOutcome,
    /// The whole dialogue, with the token trace for a local policy: training and trajectory exports read it; reports skip it.
    #[serde(skip)]
    pub conversation: Conversation,
}

impl Episode {
    /// Tool calls over all turns.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCallRecord> {
        self.turns.iter().flat_map(|t| t.tool_calls.iter())
    }

    /// Tokens the model wrote over all turns.
    pub fn model_tokens(&self) -> usize {
        self.turns.iter().map(|t| t.reply_tokens).sum()
    }

    /// The best SQuAD token F1 of the final answer against the gold answers (0 without an answer): the
    /// partial credit that the reward's `f1_weight` pays and `agentrt eval` reports.
    pub fn answer_f1(&self) -> f64 {
        self.final_answer.as_deref().map_or(0.0, |answer| agentrt_judge::best_f1(answer, &self.question.answers))
    }

    /// The page ids the first search returned, in rank order: a `search_pages` call's hits, or the pages of
    /// a `search_passages` call's passages in the order of each page's best one (a passage's id is its
    /// section's, `{page_id}:{slug}`).
    pub fn first_search_hits(&self) -> Option<Vec<String>> {
        let call = self.tool_calls().find(|c| (c.tool == "search_pages" || c.tool == "search_passages") && c.error.is_none())?;
        if call.tool == "search_pages" {
            return Some(call.returned_ids.clone());
        }
        let mut pages: Vec<String> = Vec::new();
        for id in &call.returned_ids {
            let page = id.rsplit_once(':').map_or(id.as_str(), |(page, _)| page);
            if !pages.iter().any(|p| p == page) {
                pages.push(page.to_string());
            }
        }
        Some(pages)
    }
}

/// Seconds spent per phase over a batch.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PhaseTimes {
    /// Seconds waiting for the policy's replies.
    pub generate_s: f64,
    /// Seconds waiting for the replies' programs in the sandbox after sampling: a program runs beside the
    /// next sampling step, and only what it takes past that step shows here.
    pub tools_s: f64,
    /// Seconds grading the final answers (judge or tests).
    pub judge_s: f64,
}

/// Episodes in the order of the questions given, and where the time went.
#[derive(Debug)]
pub struct RolloutBatch {
    /// One episode per question given, in that order.
    pub episodes: Vec<Episode>,
    /// Seconds per phase over the whole batch.
    pub times: PhaseTimes,
}

/// Runs episodes: policy replies, sandboxed programs, tool turns, grading.
pub struct EpisodeRunner {
    /// Runs every program; shared by the concurrent episodes.
    pub sandbox: Arc<Sandbox>,
    /// Turns each final answer into a reward.
    pub grader: Arc<dyn Grader>,
    /// The first message of every conversation.
    pub system_prompt: String,
    /// Earlier turns shown after the system prompt and before every question (few-shot); may be empty.
    pub demonstration: Vec<Message>,
    /// Turn budget, observation cut and sandbox bounds (the sampling keys are the policy's to use).
    pub spec: EpisodeSpec,
    /// How a reply is read: the environment's grammar.
    pub reply_grammar: Arc<dyn ReplyGrammar>,
}

struct Live {
    conversation: Conversation,
    turns: Vec<TurnRecord>,
    final_answer: Option<(String, bool)>,
    done: bool,
}

impl EpisodeRunner {
    /// One episode per entry of `questions` (repeat a question for several rollouts of it). Replies come
    /// from the policy's [`TurnPolicy::stream`]; every program runs on a task of its own, concurrently with
    /// the others and with sampling.
    pub async fn run(&self, policy: &dyn TurnPolicy, questions: &[Question]) -> Result<RolloutBatch, RolloutError> {
        self.run_observed(policy, questions, &mut |_| {}).await
    }

    /// [`EpisodeRunner::run`], calling `finished(i)` when episode `i` (an index into `questions`) has
    /// played its last turn, so that a command can show progress while a batch plays rather than after it
    /// (a batch of a few served episodes ran for half a minute with nothing shown). The episode is graded
    /// later, with the whole batch. The call only observes: it runs between the loop's steps and changes
    /// nothing of their order, so a seeded run plays the same with it or without.
    pub async fn run_observed(
        &self,
        policy: &dyn TurnPolicy,
        questions: &[Question],
        finished: &mut (dyn FnMut(usize) + Send),
    ) -> Result<RolloutBatch, RolloutError> {
        if self.spec.max_turns == 0 {
            return Err(RolloutError::Invalid("max_turns must be at least 1".into()));
        }
        let mut times = PhaseTimes::default();
        let mut live = Vec::with_capacity(questions.len());
        for q in questions {
            let mut messages = Vec::with_capacity(self.demonstration.len() + 2);
            messages.push(Message::system(self.system_prompt.clone()));
            messages.extend(self.demonstration.iter().cloned());
            messages.push(Message::user(q.question.clone()));
            let mut conversation = Conversation::new(q.id.clone(), messages);
            policy.begin(&mut conversation)?;
            live.push(Live { conversation, turns: Vec::new(), final_answer: None, done: false });
        }
        // Continuous batching: each conversation asks for its next reply as soon as its program has run,
        // and the stream samples whichever conversations are waiting. A program starts as soon as its reply
        // ends and runs beside the next sampling step; its episode's next turn joins the step after that
        // (a fixed point, so a seeded run repeats whatever the programs' timing).
        let mut stream = policy.stream();
        for (i, l) in live.iter().enumerate() {
            stream.submit(i, &l.conversation)?;
        }
        let mut running: Vec<(usize, tokio::task::JoinHandle<RunReport>)> = Vec::new();
        while !stream.is_empty() || !running.is_empty() {
            let started = Instant::now();
            let replies = if stream.is_empty() { Vec::new() } else { stream.step().await? };
            times.generate_s += started.elapsed().as_secs_f64();
            let started = Instant::now();
            for (i, task) in std::mem::take(&mut running) {
                let report = task.await.map_err(|e| RolloutError::Invalid(format!("a sandbox task failed: {e}")))?;
                let l = &mut live[i];
                self.record_run(l, &report);
                if l.turns.len() == self.spec.max_turns {
                    l.done = true;
                    finished(i);
                } else {
                    let observation = l.turns.last().and_then(|t| t.observation.clone()).unwrap_or_default();
                    policy.push_tool_turn(&mut l.conversation, &observation)?;
                    stream.submit(i, &l.conversation)?;
                }
            }
            times.tools_s += started.elapsed().as_secs_f64();
            for (i, reply) in replies {
                let l = live
                    .get_mut(i)
                    .ok_or_else(|| RolloutError::Invalid(format!("policy `{}` replied to conversation {i} of {}", policy.name(), questions.len())))?;
                if l.done || l.turns.len() >= self.spec.max_turns {
                    return Err(RolloutError::Invalid(format!("policy `{}` replied to conversation {i}, which was not waiting for a reply", policy.name())));
                }
                match self.take_reply(policy, l, &reply)? {
                    Some(code) => {
                        let (sandbox, limits) = (self.sandbox.clone(), self.spec.limits());
                        running.push((i, tokio::spawn(async move { sandbox.run_with_limits(&code, limits).await })));
                    }
                    None => finished(i),
                }
            }
        }
        if let Some(i) = live.iter().position(|l| !l.done) {
            return Err(RolloutError::Invalid(format!("policy `{}` never replied to conversation {i}", policy.name())));
        }

        let started = Instant::now();
        let to_grade: Vec<(usize, (&Question, &str))> =
            live.iter().enumerate().filter_map(|(i, l)| l.final_answer.as_ref().map(|(a, _)| (i, (&questions[i], a.as_str())))).collect();
        let items: Vec<(&Question, &str)> = to_grade.iter().map(|(_, x)| *x).collect();
        let grades = self.grader.grade(&items).await?;
        if grades.len() != items.len() {
            return Err(RolloutError::Invalid(format!("grader `{}` gave {} grades for {} answers", self.grader.name(), grades.len(), items.len())));
        }
        times.judge_s += started.elapsed().as_secs_f64();
        let mut by_episode: Vec<Option<Grade>> = vec![None; live.len()];
        for ((i, _), g) in to_grade.iter().zip(grades) {
            by_episode[*i] = Some(g);
        }

        let episodes = live
            .into_iter()
            .zip(questions)
            .zip(by_episode)
            .map(|((l, q), grade)| {
                let outcome = match (&l.final_answer, grade.as_ref().is_some_and(|g| g.correct)) {
                    (None, _) => EpisodeOutcome::MaxTurns,
                    (Some(_), true) => EpisodeOutcome::Correct,
                    (Some((_, true)), false) => EpisodeOutcome::WrongAnswer,
                    (Some((_, false)), false) => EpisodeOutcome::NoAnswer,
                };
                let (reward, reward_components, partial_credit, well_formed, verdict, tests, grader_error) = match grade {
                    Some(g) => (g.reward, g.components, g.partial_credit, g.well_formed, g.verdict, g.tests, g.grader_error),
                    None => (0.0, Vec::new(), None, false, None, None, None),
                };
                if let Some(why) = &grader_error {
                    tracing::warn!("question {}: no grade: {why}", q.id);
                }
                Episode {
                    question: q.clone(),
                    turns: l.turns,
                    final_answer: l.final_answer.map(|(a, _)| a),
                    reward,
                    reward_components,
                    partial_credit,
                    well_formed,
                    verdict,
                    tests,
                    grader_error,
                    outcome,
                    conversation: l.conversation,
                }
            })
            .collect();
        Ok(RolloutBatch { episodes, times })
    }

    /// Records a reply in its episode; returns the program to run, if it held one (else the episode is done).
    fn take_reply(&self, policy: &dyn TurnPolicy, l: &mut Live, reply: &Reply) -> Result<Option<String>, RolloutError> {
        policy.push_reply(&mut l.conversation, reply)?;
        let action = self.reply_grammar.read(&reply.text);
        let record = |action, program| TurnRecord {
            reply: reply.text.clone(),
            finish: reply.finish.clone(),
            action,
            reply_tokens: reply.tokens(),
            program,
            observation: None,
            program_error: None,
            tool_calls: vec![],
        };
        Ok(match action {
            ReplyAction::Program(code) => {
                l.turns.push(record(TurnAction::Program, Some(code.clone())));
                Some(code)
            }
            ReplyAction::Answer(a) => {
                l.turns.push(record(TurnAction::Answer, None));
                l.final_answer = Some((a, true));
                l.done = true;
                None
            }
            ReplyAction::Nothing => {
                l.turns.push(record(TurnAction::Other, None));
                l.final_answer = Some((reply.text.trim().to_string(), false));
                l.done = true;
                None
            }
        })
    }

    /// Records what a program's run gave back in its turn.
    fn record_run(&self, l: &mut Live, report: &RunReport) {
        let rec = l.turns.last_mut().expect("a program's turn is recorded before it runs");
        rec.program_error = report.result.as_ref().err().map(|e| e.kind_name());
        rec.tool_calls = report
            .host_calls
            .iter()
            .map(|c| ToolCallRecord {
                tool: c.tool.clone(),
                args: c.args.clone(),
                error: c.error.clone(),
                returned_ids: c.returned_ids.clone(),
                micros: c.duration.as_micros() as u64,
            })
            .collect();
        rec.observation = Some(truncate(&report.observation(), self.spec.max_observation_chars));
    }
}

/// `text` cut to at most `max_chars` characters, with a note of how much was left out. The cut falls at
/// the end of a line when one ends in the last third of what fits, else after a word near its end,
/// so a listing or a sentence is not cut mid-word (a page's thousands of section titles once were).
fn truncate(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_string();
    }
    let fits: String = text.chars().take(max_chars).collect();
    let len = fits.len();
    let after = |c: char, within: usize| fits.char_indices().filter(|&(i, x)| x == c && i + within >= len).map(|(i, _)| i).next_back();
    let cut = match after('\n', len / 3).or_else(|| after(' ', (len / 10).max(16).min(len / 3))) {
        Some(i) => fits[..i].trim_end(),
        None => fits.as_str(),
    };
    format!("{cut}\n[output truncated: {} of {total} characters shown]", cut.chars().count())
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn long_observations_are_cut_at_a_line_or_word_and_say_so() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("abcdef", 3), "abc\n[output truncated: 3 of 6 characters shown]");
        // A listing loses its last partial line, not half a title.
        let listing = "p:1 | One\np:2 | Two\np:3 | Three\n";
        assert_eq!(truncate(listing, 25), "p:1 | One\np:2 | Two\n[output truncated: 19 of 32 characters shown]");
        // Prose is cut after a word.
        assert_eq!(truncate("the steam engine was an important component", 30), "the steam engine was an\n[output truncated: 23 of 43 characters shown]");
    }
}
