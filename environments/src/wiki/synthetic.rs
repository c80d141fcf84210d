//! Synthesised trajectories: a policy that plays each training question through the real sandbox the
//! way we want the model to, writing only what it could have written from what it has seen.
//!
//! Five styles ([`SynthStyle`]), or a program of the user's ([`SynthesizingPolicy::with_program`]: one
//! program, then the first gold answer it printed). **Find** (the default; [`FIND_PROGRAM`]): one program
//! that prints the best passages `search_passages` finds for the question, as many as fit in the
//! observation limit; then the answer as printed (one tool call). **Scan** ([`SCAN_PROGRAM`]): one program
//! that prints the top hit's best section and, when it lacks more than a third of the question's words,
//! the sentences richest in them from the next two hits' sections, within the observation limit; then
//! the answer as printed (two or four tool calls). **Read** (the previous recipe): a program that searches with the
//! question and prints the top hit's best section whole; then the answer as the section spells it, or,
//! when the section holds none or lacks the question's key word (its first name or number, else its
//! longest word: a cue the model can see), a second program that prints the next two hits' sections,
//! then the answer. Two tool calls, or five with the second program; whether the section holds an
//! answer is judged by the look-ahead as rejection sampling would (the episodes that answer after the
//! first read are those whose read held the answer). Measured on the 952 dev questions: the first read
//! holds a gold answer in 83.1% of them, either read in 87.3%. Every answer is the shortest gold alias
//! the output holds (SQuAD's own spans, which the rule judge accepts as they are).
//! **Passages**: one program that searches with the
//! question itself, reads the best-matching section of each of the top three hits (`hit["section_id"]`),
//! scores every sentence by how many of the question's words it holds and prints the best three; then
//! the answer as those sentences spell it. Four tool calls, two replies, and the program is the same for
//! every question but the question it quotes, so a small model learns it by copying. **Browse**: the
//! step-by-step form below, three programs and three tool calls, each choosing an id it was shown.
//!
//! The design of the browse style in three parts:
//! - **what it writes**: at most three short programs, then the answer. First a search with words of the
//!   question (never a word the question lacks) that prints each hit's id and title; then, on the gold
//!   page among those hits, either its first section (when that holds the answer) or the list of its
//!   sections' ids and titles; then one listed section, whole up to 1,200 characters or a window around a
//!   word of the question; then `<answer>…</answer>` with the answer as the episode's own tool output
//!   spells it. Three tool calls at most, four replies at most.
//! - **how it chooses**: the gold page and answer only choose among what the episode can see, as rejection
//!   sampling would by playing every branch and keeping one that ends correct. A look-ahead over the same
//!   tools the sandbox serves ([`ToolHost`]) tries the question's candidate queries and the gold page's
//!   sections before the episode commits to one; nothing the look-ahead returns is written into a program
//!   unless the episode's own last tool output shows it, and the policy answers only when an answer alias
//!   is in text this episode read from the gold page. Otherwise it gives up (`<answer></answer>`), the
//!   judge marks the episode wrong and it is dropped.
//! - **how that is checked**: [`check_visible`] walks every program of an episode and refuses a string
//!   literal that is neither a key the tools define, nor made of the question's words, nor text of an
//!   earlier tool output of the same episode, and an answer that no tool output of the episode holds.
//!   `agentrt trajectories synth` keeps an episode only when the judge marks it correct and this check
//!   passes.

use super::reply::parse_reply;
use agentrt_rollout::{find_word_ci, Conversation, Episode, Question, ReplyAction, RolloutError};
use agentrt_rollout::{Reply, TurnPolicy};
use agentrt_runtime::ToolHost;
use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Hits `search_pages` returns when a program does not say (the interpreter's default).
const SEARCH_K: usize = 5;
/// The characters of the first section printed with the section list's first read.
const FIRST_SECTION_CHARS: usize = 1000;
/// The characters of a chosen section printed from its start.
const SECTION_HEAD_CHARS: usize = 1200;
/// A window around a question word: this many characters before it and after its start.
const WINDOW_BEFORE: usize = 200;
const WINDOW_AFTER: usize = 1000;
/// Tool output longer than this is cut by the episode runner (its default `max_observation_chars`).
const OBSERVATION_CHARS: usize = 1500;

/// String literals any program may hold: the tools' own keys, the print separator and the sentence
/// separator.
const TOOL_KEYS: &[&str] = &["page_id", "title", "score", "section_id", "|", ". "];

/// Hits whose best section a passages program reads.
const PASSAGE_HITS: usize = 3;
/// The hits (after the first) whose sections a read-style second program prints.
const READ_MORE_HITS: std::ops::Range<usize> = 1..3;
/// Sentences a passages program prints.
const PASSAGE_SENTENCES: usize = 3;

/// How the synthesising policy plays (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SynthStyle {
    /// One program that prints the best passages for the question, across the best pages, as many as fit
    /// in the observation limit ([`FIND_PROGRAM`]); then the answer. The default.
    #[default]
    Find,
    /// One program that reads on by itself: the top hit's best section whole, then, when it lacks more
    /// than a third of the question's words, the sentences of the next two hits' best sections holding
    /// the most of them, within the observation limit ([`SCAN_PROGRAM`]); then the answer.
    Scan,
    /// Search with the question and print the top hit's best section; answer from it, or print the next
    /// two hits' sections when it holds no answer, then answer.
    Read,
    /// One program: search with the question, read each top hit's best section, print the sentences
    /// holding most of the question's words; then answer.
    Passages,
    /// Search, list a page's sections, read one, answer: three programs.
    Browse,
}

impl std::str::FromStr for SynthStyle {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "read" => Ok(SynthStyle::Read),
            "passages" => Ok(SynthStyle::Passages),
            "browse" => Ok(SynthStyle::Browse),
            "scan" => Ok(SynthStyle::Scan),
            "find" => Ok(SynthStyle::Find),
            other => Err(format!("unknown synth style {other:?}: expected `find`, `scan`, `read`, `passages` or `browse`")),
        }
    }
}

/// The passages program for a question: the question quoted once, everything else fixed.
pub fn passages_program(question: &str) -> String {
    program(&format!(
        "question = {}
words = [w for w in question.lower().split() if len(w) > 3]
found = []
for hit in search_pages(question)[:{PASSAGE_HITS}]:
    for sentence in read_section(hit[\"section_id\"]).split(\". \"):
        found.append((len([w for w in words if w in sentence.lower()]), sentence))
found.sort(key=lambda f: -f[0])
for n, sentence in found[:{PASSAGE_SENTENCES}]:
    print(sentence)",
        py_str(question.trim())
    ))
}

/// Where a one-program template quotes the question (as a Python string literal).
pub const QUESTION_PLACEHOLDER: &str = "{question}";

/// The find style's program: the question quoted once, everything else fixed. It prints the best
/// passages (sentences) for the question, pooled over the best pages and weighed by each page's score
/// (`search_passages` without a page), best first, each that still fits in the 1,500-character
/// observation. One tool call. Its ceiling (a gold answer printed) over all 8,313 train and dev
/// questions is 92.2% (dev 96.0%), against the scan program's 79.2%, and at least 86.6% on each of the ten
/// longest train articles (bench/search_results.md).
pub const FIND_PROGRAM: &str = "question = {question}
budget = 1500
for passage in search_passages(question, k=20):
    if len(passage[\"text\"]) < budget:
        print(passage[\"text\"])
        budget = budget - len(passage[\"text\"]) - 1";

/// The scan style's program: the question quoted once, everything else fixed. It prints the top hit's
/// best section whole (it holds a gold answer for 83.8% of the dev questions); when that section lacks
/// more than a third of the question's longer words, it reads the next two hits' best sections and
/// prints their sentences holding the most of those words, best first, within the 1,500-character
/// observation: reading on inside the program, where a small model across turns never did. On the 952
/// dev questions its ceiling is 87.4% with 3.1 tool calls (the read style's two programs: 88.4%, 2 or
/// 5 calls), 86.9% on the three longest dev articles. An earlier form that always read the three
/// sections either side on the page and the next three hits reached 91.6%, but with 11.5 tool calls
/// and 1,400-character outputs a Qwen SFT extracted from poorly (bench/learning.md).
pub const SCAN_PROGRAM: &str = "question = {question}
words = [w for w in question.lower().replace(\"?\", \"\").split() if len(w) > 3]
hits = search_pages(question)
best = read_section(hits[0][\"section_id\"])
print(best)
missing = [w for w in words if w not in best.lower()]
if len(missing) * 3 > len(words):
    budget = 1400 - len(best)
    found = []
    for hit in hits[1:3]:
        for sentence in read_section(hit[\"section_id\"]).split(\". \"):
            found.append((len([w for w in words if w in sentence.lower()]), sentence))
    found.sort(key=lambda f: -f[0])
    for n, sentence in found:
        if n > 0 and len(sentence) < budget:
            print(sentence)
            budget = budget - len(sentence) - 1";

/// A one-program template with the question quoted where [`QUESTION_PLACEHOLDER`] stands.
pub fn templated_program(template: &str, question: &str) -> String {
    program(&template.replace(QUESTION_PLACEHOLDER, &py_str(question.trim())))
}

/// The read style's first program: search with the question, print the top hit's best section.
pub fn read_program(question: &str) -> String {
    program(&format!("hits = search_pages({})\nprint(read_section(hits[0][\"section_id\"]))", py_str(question.trim())))
}

/// The read style's second program: the same search, the next hits' sections.
pub fn read_more_program(question: &str) -> String {
    program(&format!(
        "for hit in search_pages({})[{}:{}]:\n    print(read_section(hit[\"section_id\"]))",
        py_str(question.trim()),
        READ_MORE_HITS.start,
        READ_MORE_HITS.end
    ))
}

const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been", "before", "being", "between", "but", "by", "can", "could",
    "did", "do", "does", "during", "for", "from", "had", "has", "have", "he", "her", "his", "how", "i", "if", "in", "into", "is", "it", "its", "many", "much",
    "of", "on", "one", "or", "other", "she", "so", "some", "than", "that", "the", "their", "them", "there", "these", "they", "this", "those", "to", "was",
    "were", "what", "when", "where", "which", "while", "who", "whom", "whose", "why", "will", "with", "would", "you",
];

/// What the episode will do, chosen once per question by the look-ahead.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    query: String,
    page: String,
    read: Read,
}

#[derive(Debug, Clone, PartialEq)]
enum Read {
    /// The first section holds the answer within [`FIRST_SECTION_CHARS`].
    First,
    /// List the sections, then read this one.
    Section { id: String, window: Window },
}

#[derive(Debug, Clone, PartialEq)]
enum Window {
    /// The section's first [`SECTION_HEAD_CHARS`] characters.
    Head,
    /// Around the first occurrence of this word of the question.
    Around(String),
}

/// Plays questions the way the model should (see the module's documentation); `questions` gives each
/// conversation's gold page and answers by question id, `tools` is the look-ahead.
pub struct SynthesizingPolicy {
    style: SynthStyle,
    /// The one program a `--program` template plays instead of the style (see [`SynthesizingPolicy::with_program`]).
    template: Option<String>,
    tools: Arc<dyn ToolHost>,
    questions: HashMap<String, Question>,
    plans: Mutex<HashMap<String, Option<Plan>>>,
}

impl SynthesizingPolicy {
    /// A policy playing `questions` in `style`, looking ahead with `tools` (the same tools the sandbox serves).
    pub fn new(style: SynthStyle, tools: Arc<dyn ToolHost>, questions: &[Question]) -> SynthesizingPolicy {
        SynthesizingPolicy {
            style,
            template: None,
            tools,
            questions: questions.iter().map(|q| (q.id.clone(), q.clone())).collect(),
            plans: Mutex::new(HashMap::new()),
        }
    }

    /// A policy that plays one program of the user's, `template` with the question quoted where
    /// [`QUESTION_PLACEHOLDER`] stands, then answers with the first gold alias it printed (or gives up):
    /// its yield is that program's ceiling. A template without the placeholder is an error.
    pub fn with_program(template: &str, tools: Arc<dyn ToolHost>, questions: &[Question]) -> Result<SynthesizingPolicy, String> {
        if !template.contains(QUESTION_PLACEHOLDER) {
            return Err(format!("the program quotes no question: write {QUESTION_PLACEHOLDER} where it goes (as a string literal)"));
        }
        Ok(SynthesizingPolicy { template: Some(template.to_string()), ..SynthesizingPolicy::new(SynthStyle::Scan, tools, questions) })
    }

    /// The string literals every episode's programs may hold besides the question's words and what the
    /// episode has seen: the fixed ones of the one program this policy plays (the same for every
    /// question, so they carry nothing of the answer), for [`check_visible`].
    pub fn fixed_literals(&self) -> Vec<String> {
        match (&self.template, self.style) {
            (Some(t), _) => string_literals(&t.replace(QUESTION_PLACEHOLDER, "\"\"")),
            (None, SynthStyle::Scan) => string_literals(&SCAN_PROGRAM.replace(QUESTION_PLACEHOLDER, "\"\"")),
            (None, SynthStyle::Find) => string_literals(&FIND_PROGRAM.replace(QUESTION_PLACEHOLDER, "\"\"")),
            _ => Vec::new(),
        }
    }

    async fn plan(&self, q: &Question) -> Option<Plan> {
        if let Some(p) = self.plans.lock().expect("plans lock").get(&q.id) {
            return p.clone();
        }
        let plan = self.make_plan(q).await;
        self.plans.lock().expect("plans lock").insert(q.id.clone(), plan.clone());
        plan
    }

    async fn make_plan(&self, q: &Question) -> Option<Plan> {
        let page = q.page.clone()?;
        let mut query = None;
        for candidate in query_candidates(&q.question) {
            if let Ok(hits) = self.tools.search_pages(&candidate, SEARCH_K).await {
                if hits.iter().any(|h| h.page_id == page) {
                    query = Some(candidate);
                    break;
                }
            }
        }
        let query = query?;
        let sections = self.tools.view_sections(&page).await.ok()?;
        // Sections that hold an answer as a whole word, the evidence first: most of the question's words.
        let mut candidates = Vec::new();
        let mut listing_chars = 0;
        for (i, s) in sections.iter().enumerate() {
            listing_chars += format!("{} | {}\n", s.section_id, s.title).chars().count();
            let Ok(text) = self.tools.read_section(&s.section_id).await else { continue };
            let overlap = question_overlap(&q.question, &text);
            for answer in &q.answers {
                if let Some(at) = find_word_ci(&text, answer) {
                    candidates.push((overlap, i, listing_chars, at, answer.trim().chars().count(), text.clone()));
                    break;
                }
            }
        }
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, i, listing_chars, at, len, text) in candidates {
            let (s, end) = (&sections[i], at + len);
            if i == 0 && end <= FIRST_SECTION_CHARS {
                return Some(Plan { query, page, read: Read::First });
            }
            if listing_chars > OBSERVATION_CHARS {
                continue;
            }
            if end <= SECTION_HEAD_CHARS {
                return Some(Plan { query, page, read: Read::Section { id: s.section_id.clone(), window: Window::Head } });
            }
            for word in content_words(&q.question).into_iter().filter(|w| w.chars().count() >= 4) {
                if let Some(w) = find_chars(&text, &word) {
                    if w.saturating_sub(WINDOW_BEFORE) <= at && end <= w + WINDOW_AFTER {
                        return Some(Plan { query, page, read: Read::Section { id: s.section_id.clone(), window: Window::Around(word) } });
                    }
                }
            }
        }
        None
    }

    /// The passages style: the program while nothing is read (when the gold page is among the hits it
    /// reads), then the shortest answer alias the printed sentences hold as a whole word.
    async fn decide_passages(&self, q: &Question, seen: &[&str]) -> String {
        let give_up = "<answer></answer>".to_string();
        match seen {
            [] => {
                let Some(page) = &q.page else { return give_up };
                match self.tools.search_pages(q.question.trim(), SEARCH_K).await {
                    Ok(hits) if hits.iter().take(PASSAGE_HITS).any(|h| &h.page_id == page) => passages_program(&q.question),
                    _ => give_up,
                }
            }
            [printed] => answer_tag(printed, &q.answers, &q.question).unwrap_or(give_up),
            _ => give_up,
        }
    }

    /// The read style: the first program; then the answer if the section holds one and the question's
    /// key word ([`key_word`]), else the second program; then the answer from what either printed, or
    /// give up.
    fn decide_read(q: &Question, seen: &[&str]) -> String {
        match seen {
            [] => read_program(&q.question),
            [first] => match answer_tag(first, &q.answers, &q.question) {
                Some(answer) if !misses_key_word(first, &q.question) => answer,
                _ => read_more_program(&q.question),
            },
            [first, more] => answer_tag(first, &q.answers, &q.question)
                .or_else(|| answer_tag(more, &q.answers, &q.question))
                .unwrap_or_else(|| "<answer></answer>".to_string()),
            _ => "<answer></answer>".to_string(),
        }
    }

    async fn decide(&self, c: &Conversation) -> Result<String, RolloutError> {
        let q =
            self.questions.get(&c.question_id).ok_or_else(|| RolloutError::Invalid(format!("the synthesising policy has no question `{}`", c.question_id)))?;
        let seen = episode_tool_outputs(c);
        let one_program = |template: &str| match seen[..] {
            [] => templated_program(template, &q.question),
            [printed] => answer_tag(printed, &q.answers, &q.question).unwrap_or_else(|| "<answer></answer>".to_string()),
            _ => "<answer></answer>".to_string(),
        };
        if let Some(t) = &self.template {
            return Ok(one_program(t));
        }
        match self.style {
            SynthStyle::Scan => return Ok(one_program(SCAN_PROGRAM)),
            SynthStyle::Find => return Ok(one_program(FIND_PROGRAM)),
            SynthStyle::Read => return Ok(Self::decide_read(q, &seen)),
            SynthStyle::Passages => return Ok(self.decide_passages(q, &seen).await),
            SynthStyle::Browse => {}
        }
        let give_up = "<answer></answer>".to_string();
        let Some(plan) = self.plan(q).await else { return Ok(give_up) };
        // The answer is taken only from the output that read the gold page's section (never from hit or
        // section titles).
        let read_at = if plan.read == Read::First { 1 } else { 2 };
        if seen.len() > read_at {
            return Ok(answer_as_read(seen[read_at], &q.answers).map_or(give_up, |a| format!("<answer>{a}</answer>")));
        }
        Ok(match (seen.len(), &plan.read) {
            (0, _) => program(&format!("hits = search_pages({})\nfor h in hits:\n    print(h[\"page_id\"], \"|\", h[\"title\"])", py_str(&plan.query))),
            (1, read) if lists(seen[0], &plan.page) => match read {
                Read::First => program(&format!(
                    "sections = view_sections({})\nprint(read_section(sections[0][\"section_id\"])[:{FIRST_SECTION_CHARS}])",
                    py_str(&plan.page)
                )),
                Read::Section { .. } => program(&format!("for s in view_sections({}):\n    print(s[\"section_id\"], \"|\", s[\"title\"])", py_str(&plan.page))),
            },
            (2, Read::Section { id, window }) if lists(seen[1], id) => match window {
                Window::Head => program(&format!("print(read_section({})[:{SECTION_HEAD_CHARS}])", py_str(id))),
                Window::Around(word) => program(&format!(
                    "text = read_section({})\ni = text.find({})\nprint(text[max(0, i - {WINDOW_BEFORE}):i + {WINDOW_AFTER}])",
                    py_str(id),
                    py_str(word)
                )),
            },
            _ => give_up,
        })
    }
}

#[async_trait]
impl TurnPolicy for SynthesizingPolicy {
    fn name(&self) -> String {
        "synthesised".into()
    }

    async fn reply(&self, conversations: &[&Conversation]) -> Result<Vec<Reply>, RolloutError> {
        let mut out = Vec::with_capacity(conversations.len());
        for c in conversations {
            out.push(Reply::text(self.decide(c).await?));
        }
        Ok(out)
    }
}

fn program(code: &str) -> String {
    format!("```python\n{code}\n```")
}

/// A Python string literal (the words and ids written here never hold a quote or a backslash, but a
/// page id might).
fn py_str(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `<answer>…</answer>` with the first answer alias (in the question's order: SQuAD's first annotation
/// first) that `printed` holds as a whole word, spelled as printed. Why the first: every alias is an
/// annotator's span that the rule judge accepts, and the typical one is the length to teach. The longest
/// taught SmolLM2 to overshoot (RL with F1 credit drifted to longer spans); the shortest taught
/// Qwen2.5-Coder one-word answers ("removed" for "removed in a condenser"; bench/learning.md). An alias the
/// question itself holds comes last ("1973" for "When did the 1973 oil crisis begin?" repeats the
/// question; the judge's gold span is elsewhere), except in a question that offers a choice ("compatible
/// or incompatible?"), whose answer is one of its words.
fn answer_tag(printed: &str, answers: &[String], question: &str) -> Option<String> {
    let mut found: Vec<String> =
        answers.iter().filter_map(|a| find_word_ci(printed, a).map(|at| printed.chars().skip(at).take(a.trim().chars().count()).collect())).collect();
    let offers_choice = words(question).iter().any(|w| w.eq_ignore_ascii_case("or"));
    // A stable sort: the annotators' order stands among the aliases the question does not hold.
    found.sort_by_key(|a: &String| !offers_choice && find_word_ci(question, a).is_some());
    found.first().map(|a| format!("<answer>{a}</answer>"))
}

/// The question's word a section about it is least likely to lack by chance, which the model can check
/// in what it printed: the first name or number after the question's first word (capitalised or holding a
/// digit), else its longest content word of four letters or more. `None` for a question with neither.
fn key_word(question: &str) -> Option<String> {
    let content: Vec<String> = content_words(question).into_iter().filter(|w| w.chars().count() >= 4 || w.chars().any(|c| c.is_ascii_digit())).collect();
    let first = words(question).first().map(|w| w.to_lowercase());
    let name = content
        .iter()
        .find(|w| Some(w.to_lowercase()) != first && (w.chars().next().is_some_and(|c| c.is_uppercase()) || w.chars().any(|c| c.is_ascii_digit())));
    name.cloned().or_else(|| content.iter().rev().max_by_key(|w| w.chars().count()).cloned())
}

/// Whether `printed` lacks the question's key word ([`key_word`]; case folded): the visible reason the
/// read style's episodes read on even when the section happens to hold an answer.
fn misses_key_word(printed: &str, question: &str) -> bool {
    key_word(question).is_some_and(|w| !printed.to_lowercase().contains(&w.to_lowercase()))
}

/// Whether a tool output lists `id` as a line `id | title`.
fn lists(output: &str, id: &str) -> bool {
    output.lines().any(|l| l.split(" | ").next() == Some(id))
}

/// The tool outputs of this episode (after the question, never a demonstration's), in order.
fn episode_tool_outputs(c: &Conversation) -> Vec<&str> {
    let start = c.messages.iter().rposition(|m| m.role == "user").map_or(0, |i| i + 1);
    c.messages[start..].iter().filter(|m| m.role == "tool").map(|m| m.content.as_str()).collect()
}

/// The first answer alias found in `output`, spelled as `output` spells it (ASCII case folded).
fn answer_as_read(output: &str, answers: &[String]) -> Option<String> {
    let lower = output.to_ascii_lowercase();
    answers.iter().find_map(|a| {
        let at = lower.find(&a.trim().to_ascii_lowercase())?;
        let a = a.trim();
        (!a.is_empty()).then(|| output[at..at + a.len()].to_string())
    })
}

/// The character (code point) index of `needle` in `hay`, as Python's `str.find` gives it.
fn find_chars(hay: &str, needle: &str) -> Option<usize> {
    hay.find(needle).map(|b| hay[..b].chars().count())
}

/// The question's words: runs of letters and digits, in order.
fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect()
}

/// How many of the question's content words (three letters or more, case folded) `text` holds: how a
/// section that holds an answer is told to be the evidence, by the synthesiser and by the extraction
/// probe alike.
pub fn question_overlap(question: &str, text: &str) -> usize {
    let lower = text.to_lowercase();
    content_words(question).into_iter().map(|w| w.to_lowercase()).filter(|w| w.chars().count() >= 3).filter(|w| lower.contains(w.as_str())).count()
}

/// The question's words without stop words, each once, in order.
fn content_words(question: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    words(question)
        .into_iter()
        .filter(|w| !STOPWORDS.contains(&w.to_lowercase().as_str()))
        .filter(|w| seen.insert(w.to_lowercase()))
        .map(String::from)
        .collect()
}

/// Queries made only of the question's words, most likely first: its content words; its names and
/// numbers (capitalised or digit-bearing content words); all its words.
fn query_candidates(question: &str) -> Vec<String> {
    let content = content_words(question);
    let names: Vec<&String> = content.iter().filter(|w| w.chars().next().is_some_and(|c| c.is_uppercase()) || w.chars().any(|c| c.is_ascii_digit())).collect();
    let mut out: Vec<String> = Vec::new();
    for q in [content.join(" "), names.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" "), words(question).join(" ")] {
        if !q.is_empty() && !out.contains(&q) {
            out.push(q);
        }
    }
    out
}

/// The string literals of a Python program (either quote, backslash escapes kept as written).
fn string_literals(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '"' | '\'' => {
                let mut lit = String::new();
                while let Some(d) = chars.next() {
                    if d == '\\' {
                        if let Some(e) = chars.next() {
                            lit.push(e);
                        }
                    } else if d == c {
                        break;
                    } else {
                        lit.push(d);
                    }
                }
                out.push(lit);
            }
            _ => {}
        }
    }
    out
}

/// Whether an episode's replies use only what the model had seen: every string literal of every program
/// is a tool key, or made of the question's words, or text of an earlier tool output of this episode;
/// no literal holds an answer alias the question does not; the final answer is in a tool output of this
/// episode. `fixed` are literals any program may hold besides (a one-program style's own:
/// [`SynthesizingPolicy::fixed_literals`]). `Err` says which reply broke which rule.
pub fn check_visible(episode: &Episode, fixed: &[String]) -> Result<(), String> {
    let messages = &episode.conversation.messages;
    let start = messages.iter().rposition(|m| m.role == "user").map_or(0, |i| i + 1);
    let question = episode.question.question.to_lowercase();
    let question_words: HashSet<String> = words(&question).into_iter().map(String::from).collect();
    let answers: Vec<String> =
        episode.question.answers.iter().map(|a| a.trim().to_lowercase()).filter(|a| !a.is_empty() && !question.contains(a.as_str())).collect();
    let mut seen = String::new();
    for (n, m) in messages[start..].iter().enumerate() {
        match m.role.as_str() {
            "tool" => {
                seen.push_str(&m.content);
                seen.push('\n');
            }
            "assistant" => match parse_reply(&m.content) {
                ReplyAction::Program(code) => {
                    for lit in string_literals(&code) {
                        let lower = lit.to_lowercase();
                        if let Some(a) = answers.iter().find(|a| lower.contains(a.as_str())) {
                            return Err(format!("reply {n}: the literal {lit:?} holds the answer {a:?}"));
                        }
                        let from_question = {
                            let w = words(&lower);
                            !w.is_empty() && w.iter().all(|w| question_words.contains(*w))
                        };
                        let fixed_here = fixed.contains(&lit);
                        if !(TOOL_KEYS.contains(&lit.as_str()) || fixed_here || from_question || (!lit.is_empty() && seen.contains(&lit))) {
                            return Err(format!(
                                "reply {n}: the literal {lit:?} is neither a tool key, nor the question's words, nor in an earlier tool output"
                            ));
                        }
                    }
                }
                ReplyAction::Answer(a) => {
                    if a.is_empty() || !seen.to_lowercase().contains(&a.to_lowercase()) {
                        return Err(format!("reply {n}: the answer {a:?} is in no tool output of this episode"));
                    }
                }
                ReplyAction::Nothing => return Err(format!("reply {n} holds neither a program nor an answer")),
            },
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixture_runner;
    use agentrt_rollout::{EpisodeOutcome, EpisodeSpec, TrajectorySet};
    use agentrt_runtime::FixtureTools;

    fn q(id: &str, question: &str, answer: &str, page: &str) -> Question {
        Question { id: id.into(), question: question.into(), answers: vec![answer.into()], page: Some(page.into()), split: Some("train".into()) }
    }

    fn fixture_questions() -> Vec<Question> {
        vec![
            q("broncos", "Which team won Super Bowl 50?", "Denver Broncos", "denver_broncos"),
            q("scheele", "Who discovered oxygen in the 1770s?", "Carl Wilhelm Scheele", "oxygen"),
            q("parisii", "Which sub-tribe inhabited the Paris area?", "Parisii", "paris"),
            q("eight", "What is the atomic number of oxygen?", "8", "oxygen"),
            q("eight-again", "What is the atomic number of oxygen?", "8", "oxygen"),
            // The gold page is not in the corpus: never reached.
            q("gold", "What is the melting point of gold?", "1064", "gold"),
            // The answer is on no section of the gold page: never read.
            q("lyon", "What is the capital of France?", "Lyon", "paris"),
        ]
    }

    #[test]
    fn answers_take_the_first_printed_alias_and_the_key_word_is_a_name_or_the_longest_word() {
        let aliases = ["October 1973".to_string(), "1973".to_string(), "October".to_string()];
        assert_eq!(answer_tag("It began in October 1973 with an embargo.", &aliases, "When did it begin?"), Some("<answer>October 1973</answer>".into()));
        assert_eq!(answer_tag("It began in 1973 with an embargo.", &aliases, "When did it begin?"), Some("<answer>1973</answer>".into()));
        assert_eq!(answer_tag("nothing here", &aliases, "When did it begin?"), None);
        // The question's own words are no answer while another alias is printed.
        let crisis = ["1973".to_string(), "October 1973".to_string()];
        let asked = "When did the 1973 oil crisis begin?";
        assert_eq!(answer_tag("The 1973 crisis began in October 1973.", &crisis, asked), Some("<answer>October 1973</answer>".into()));
        assert_eq!(answer_tag("It began in 1973.", &crisis, asked), Some("<answer>1973</answer>".into()));
        let choice = ["incompatible".to_string(), "had to be converted".to_string()];
        let offered = "Was this footage compatible or incompatible with TV formats?";
        assert_eq!(answer_tag("It was incompatible and had to be converted.", &choice, offered), Some("<answer>incompatible</answer>".into()));
        assert_eq!(key_word("What did Watt improve in 1765?").as_deref(), Some("Watt"));
        assert_eq!(key_word("When did the 1973 oil crisis begin?").as_deref(), Some("1973"));
        assert_eq!(key_word("What is the typical working fluid?").as_deref(), Some("typical"));
        assert!(misses_key_word("The steam engine used water.", "What did Watt improve in 1765?"));
        assert!(!misses_key_word("James WATT improved the engine.", "What did Watt improve in 1765?"));
    }

    #[test]
    fn queries_use_only_the_questions_words() {
        let c = query_candidates("Which NFL team represented the AFC at Super Bowl 50?");
        assert_eq!(c, ["NFL team represented AFC Super Bowl 50", "NFL AFC Super Bowl 50", "Which NFL team represented the AFC at Super Bowl 50"]);
        assert_eq!(string_literals("x = f(\"a\\\"b\", 'c') # \"not\"\nprint(\"d\")"), ["a\"b", "c", "d"]);
        assert_eq!(answer_as_read("The BRONCOS won", &["broncos".into()]), Some("BRONCOS".into()));
        assert_eq!(py_str("a\"b"), "\"a\\\"b\"");
    }

    /// Every synthesised episode on the fixture: the reachable questions end correct in few tool calls,
    /// the others are dropped, duplicates are written once, and every id a program names was shown by
    /// an earlier tool output of the same episode, with no answer in any program.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn synthesised_actions_use_only_ids_seen_in_earlier_observations() {
        let runner = fixture_runner(EpisodeSpec { max_turns: 4, ..EpisodeSpec::default() }).await;
        let questions = fixture_questions();
        let policy = SynthesizingPolicy::new(SynthStyle::Browse, Arc::new(FixtureTools::default()), &questions);
        let batch = runner.run(&policy, &questions).await.unwrap();
        let outcomes: Vec<(&str, EpisodeOutcome)> = batch.episodes.iter().map(|e| (e.question.id.as_str(), e.outcome)).collect();
        assert_eq!(
            outcomes,
            [
                ("broncos", EpisodeOutcome::Correct),
                ("scheele", EpisodeOutcome::Correct),
                ("parisii", EpisodeOutcome::Correct),
                ("eight", EpisodeOutcome::Correct),
                ("eight-again", EpisodeOutcome::Correct),
                ("gold", EpisodeOutcome::WrongAnswer),
                ("lyon", EpisodeOutcome::WrongAnswer),
            ]
        );
        for e in &batch.episodes {
            assert!(e.turns.len() <= 4 && e.tool_calls().count() <= 3, "{}: {:?}", e.question.id, e.turns);
            if e.outcome != EpisodeOutcome::Correct {
                continue;
            }
            check_visible(e, &[]).unwrap_or_else(|why| panic!("{}: {why}", e.question.id));
            // Independently of check_visible: every id a tool was called with was returned by an
            // earlier tool output, and no program holds the answer.
            let mut shown = String::new();
            for t in &e.turns {
                if let Some(code) = &t.program {
                    for a in &e.question.answers {
                        assert!(!string_literals(code).iter().any(|l| l.contains(a.as_str())), "{}: {code}", e.question.id);
                    }
                    for call in &t.tool_calls {
                        if call.tool != "search_pages" {
                            let id = call.args.as_object().and_then(|o| o.values().next()).and_then(|v| v.as_str()).unwrap_or_default().to_string();
                            if code.contains(&format!("\"{id}\"")) {
                                assert!(shown.lines().any(|l| l.starts_with(&format!("{id} |"))), "{}: {id} before it was shown", e.question.id);
                            }
                        }
                    }
                }
                shown.push_str(t.observation.as_deref().unwrap_or(""));
                shown.push('\n');
            }
        }
        let scheele = &batch.episodes[1];
        let replies: Vec<&str> = scheele.conversation.messages.iter().filter(|m| m.role == "assistant").map(|m| m.content.as_str()).collect();
        assert_eq!(
            replies,
            [
                "```python\nhits = search_pages(\"discovered oxygen 1770s\")\nfor h in hits:\n    print(h[\"page_id\"], \"|\", h[\"title\"])\n```",
                "```python\nfor s in view_sections(\"oxygen\"):\n    print(s[\"section_id\"], \"|\", s[\"title\"])\n```",
                "```python\nprint(read_section(\"oxygen:discovery\")[:1200])\n```",
                "<answer>Carl Wilhelm Scheele</answer>",
            ]
        );
        let broncos = &batch.episodes[0];
        assert_eq!(broncos.tool_calls().count(), 3);
        assert_eq!(broncos.turns.len(), 3);

        let mut set = TrajectorySet::new("synth");
        for e in &batch.episodes {
            set.offer(e, |e| check_visible(e, &[]));
        }
        let counts = set.counts();
        assert_eq!((counts.played, counts.kept, counts.rejected_by_judge, counts.rejected_by_check, counts.duplicates_dropped), (7, 4, 2, 0, 1));
    }

    /// The passages style on the fixture: one program quoting the question (four tool calls), then the
    /// answer as printed; the check passes; a question whose gold page is not among the hits gives up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passages_episodes_read_the_hits_best_sections_then_answer() {
        let runner = fixture_runner(EpisodeSpec { max_turns: 2, ..EpisodeSpec::default() }).await;
        let mut questions = fixture_questions();
        questions[0] = q("broncos", "Who did the Broncos defeat in Super Bowl 50?", "Carolina Panthers", "denver_broncos");
        let policy = SynthesizingPolicy::new(SynthStyle::Passages, Arc::new(FixtureTools::default()), &questions);
        let batch = runner.run(&policy, &questions).await.unwrap();
        let broncos = &batch.episodes[0];
        assert_eq!(broncos.outcome, EpisodeOutcome::Correct, "{:?}", broncos.turns);
        let replies: Vec<&str> = broncos.conversation.messages.iter().filter(|m| m.role == "assistant").map(|m| m.content.as_str()).collect();
        assert_eq!(replies, [passages_program("Who did the Broncos defeat in Super Bowl 50?").as_str(), "<answer>Carolina Panthers</answer>"]);
        assert!(replies[0].contains("question = \"Who did the Broncos defeat in Super Bowl 50?\"\n"), "{}", replies[0]);
        assert!(broncos.tool_calls().count() <= 1 + PASSAGE_HITS);
        assert_eq!(broncos.tool_calls().next().map(|c| c.tool.as_str()), Some("search_pages"));
        assert!(broncos.tool_calls().skip(1).all(|c| c.tool == "read_section"));
        let gold = batch.episodes.iter().find(|e| e.question.id == "gold").unwrap();
        assert_eq!(gold.outcome, EpisodeOutcome::WrongAnswer);
        assert_eq!(gold.tool_calls().count(), 0, "a question whose gold page is not reached is not played");
        for e in batch.episodes.iter().filter(|e| e.outcome == EpisodeOutcome::Correct) {
            check_visible(e, &[]).unwrap_or_else(|why| panic!("{}: {why}", e.question.id));
            assert_eq!(e.turns.len(), 2, "{}", e.question.id);
        }
        assert!(batch.episodes.iter().filter(|e| e.outcome == EpisodeOutcome::Correct).count() >= 3);
    }

    /// The read style on the fixture: a question whose answer and key word are in the top hit's section
    /// answers after one program (two tool calls); one whose answer is only in a later hit's section, or
    /// whose key word the section lacks, goes on to the second program (five); one whose answer is
    /// nowhere printed gives up; every kept episode passes the check.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn read_episodes_go_on_when_the_first_section_holds_no_answer_or_lacks_the_key_word() {
        let runner = fixture_runner(EpisodeSpec { max_turns: 3, ..EpisodeSpec::default() }).await;
        let tools = Arc::new(FixtureTools::default());
        let questions = fixture_questions();
        let policy = SynthesizingPolicy::new(SynthStyle::Read, tools.clone(), &questions);
        let batch = runner.run(&policy, &questions).await.unwrap();
        let mut went_on = 0;
        for e in &batch.episodes {
            let replies: Vec<&str> = e.conversation.messages.iter().filter(|m| m.role == "assistant").map(|m| m.content.as_str()).collect();
            assert_eq!(replies[0], read_program(&e.question.question), "{}", e.question.id);
            let first = e.turns[0].observation.as_deref().unwrap_or_default();
            if e.question.answered_in(first) && !misses_key_word(first, &e.question.question) {
                assert_eq!(e.outcome, EpisodeOutcome::Correct, "{}: {:?}", e.question.id, e.turns);
                assert_eq!((e.turns.len(), e.tool_calls().count()), (2, 2), "{}", e.question.id);
            } else {
                assert_eq!(replies[1], read_more_program(&e.question.question), "{}", e.question.id);
                assert_eq!(e.turns.len(), 3, "{}", e.question.id);
                went_on += 1;
            }
            if e.outcome == EpisodeOutcome::Correct {
                check_visible(e, &[]).unwrap_or_else(|why| panic!("{}: {why}", e.question.id));
            }
        }
        let by_id = |id: &str| batch.episodes.iter().find(|e| e.question.id == id).unwrap();
        assert_eq!(by_id("gold").outcome, EpisodeOutcome::WrongAnswer);
        assert!(went_on >= 1, "no fixture question needed the second program");
        assert!(batch.episodes.iter().filter(|e| e.outcome == EpisodeOutcome::Correct).count() >= 3);
    }

    /// The scan style on the fixture: one program (the same for every question but the question it quotes)
    /// that runs in the sandbox, prints the top hit's best section first and stays under the observation
    /// limit; then the answer when the output holds one. Its literals are its own fixed ones or the
    /// question's, so every kept episode passes the check, and a program of one's own plays the same way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scan_episodes_read_on_inside_one_program() {
        let runner = fixture_runner(EpisodeSpec { max_turns: 2, ..EpisodeSpec::default() }).await;
        let tools = Arc::new(FixtureTools::default());
        let questions = fixture_questions();
        let policy = SynthesizingPolicy::new(SynthStyle::Scan, tools.clone(), &questions);
        let fixed = policy.fixed_literals();
        assert!(fixed.contains(&"section_id".to_string()) && fixed.contains(&". ".to_string()), "{fixed:?}");
        let batch = runner.run(&policy, &questions).await.unwrap();
        for e in &batch.episodes {
            let first = &e.conversation.messages.iter().find(|m| m.role == "assistant").unwrap().content;
            assert_eq!(first, &templated_program(SCAN_PROGRAM, &e.question.question), "{}", e.question.id);
            let printed = e.turns[0].observation.as_deref().unwrap_or_default();
            let calls = e.turns[0].tool_calls.len();
            assert!((calls == 2 || calls == 4) && printed.chars().count() <= 1500, "{}: {:?}", e.question.id, e.turns[0]);
            match e.outcome {
                EpisodeOutcome::Correct => check_visible(e, &fixed).unwrap_or_else(|why| panic!("{}: {why}", e.question.id)),
                _ => assert!(!e.question.answered_in(printed), "{}: gave up on a printed answer", e.question.id),
            }
        }
        assert!(batch.episodes.iter().filter(|e| e.outcome == EpisodeOutcome::Correct).count() >= 3);
        // Without the check's fixed literals, the program's own strings would be refused.
        let correct = batch.episodes.iter().find(|e| e.outcome == EpisodeOutcome::Correct).unwrap();
        assert!(check_visible(correct, &[]).unwrap_err().contains("neither a tool key"));
        // A program of one's own: the same play, its literals fixed; one without the question is refused.
        let own = SynthesizingPolicy::with_program("print(search_pages({question})[0][\"title\"])", tools.clone(), &questions).unwrap();
        assert_eq!(own.fixed_literals(), vec!["".to_string(), "title".to_string()]);
        assert!(SynthesizingPolicy::with_program("print(1)", tools, &questions).err().unwrap().contains("{question}"));
    }

    /// The check refuses an id the episode had not been shown, an answer in a program, and an answer
    /// that was never read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_check_refuses_ids_and_answers_not_seen() {
        let runner = fixture_runner(EpisodeSpec { max_turns: 4, ..EpisodeSpec::default() }).await;
        let question = q("scheele", "Who discovered oxygen?", "Carl Wilhelm Scheele", "oxygen");
        let play = |replies: Vec<&str>| {
            let scripts = [("scheele".to_string(), replies.into_iter().map(String::from).collect())].into_iter().collect();
            let runner = &runner;
            let question = question.clone();
            async move { runner.run(&agentrt_rollout::ScriptedPolicy::new(scripts), &[question]).await.unwrap().episodes.remove(0) }
        };
        let leaked = play(vec!["```python\nprint(read_section(\"oxygen:discovery\"))\n```", "<answer>Carl Wilhelm Scheele</answer>"]).await;
        assert_eq!(leaked.outcome, EpisodeOutcome::Correct);
        assert!(check_visible(&leaked, &[]).unwrap_err().contains("oxygen:discovery"));
        let in_program = play(vec!["```python\nprint(search_pages(\"Carl Wilhelm Scheele\"))\n```", "<answer>Carl Wilhelm Scheele</answer>"]).await;
        assert!(check_visible(&in_program, &[]).unwrap_err().contains("holds the answer"));
        let unread = play(vec!["<answer>Carl Wilhelm Scheele</answer>"]).await;
        assert!(check_visible(&unread, &[]).unwrap_err().contains("in no tool output"));
    }
}
