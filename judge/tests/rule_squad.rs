//! The rule judge against the official SQuAD v1.1 definitions (`evaluate-v1.1.py`).
//!
//! Expected values in the table were produced by running the official `normalize_answer`,
//! `exact_match_score` and `f1_score` (Python 3) on each pair.

use agentrt_judge::{exact_match_score, f1_score, judge_batch, normalize_answer, JudgeInput, JudgeSpec, RuleJudge, VerdictLabel, DEFAULT_F1_THRESHOLD};

/// (prediction, ground truth, normalized prediction, normalized ground truth, EM, F1)
const SQUAD_CASES: &[(&str, &str, &str, &str, bool, f64)] = &[
    ("the Denver Broncos", "Denver Broncos", "denver broncos", "denver broncos", true, 1.0),
    ("Denver Broncos", "Denver Broncos", "denver broncos", "denver broncos", true, 1.0),
    ("Broncos", "Denver Broncos", "broncos", "denver broncos", false, 0.6666666666666666),
    ("Denver Broncos football team", "Denver Broncos", "denver broncos football team", "denver broncos", false, 0.6666666666666666),
    ("The answer is Denver Broncos", "Denver Broncos", "answer is denver broncos", "denver broncos", false, 0.6666666666666666),
    ("Carolina Panthers", "Denver Broncos", "carolina panthers", "denver broncos", false, 0.0),
    ("Santa Clara, California", "Santa Clara", "santa clara california", "santa clara", false, 0.8),
    ("Levi's Stadium", "Levis Stadium", "levis stadium", "levis stadium", true, 1.0),
    ("U.S.A.", "usa", "usa", "usa", true, 1.0),
    ("An apple a day", "apple day", "apple day", "apple day", true, 1.0),
    ("theatre", "the atre", "theatre", "atre", false, 0.0),
    ("Anne and the man", "anne man", "anne and man", "anne man", false, 0.8),
    ("a", "the", "", "", true, 0.0),
    ("", "", "", "", true, 0.0),
    ("", "Paris", "", "paris", false, 0.0),
    ("the the the cat", "cat cat", "cat", "cat cat", false, 0.6666666666666666),
    ("cat cat dog", "cat dog dog", "cat cat dog", "cat dog dog", false, 0.6666666666666666),
    ("1,000 people", "1000 people", "1000 people", "1000 people", true, 1.0),
    ("$5.50", "550", "550", "550", true, 1.0),
    ("  Paris\n\tFrance ", "paris france", "paris france", "paris france", true, 1.0),
    ("snake_case", "snakecase", "snakecase", "snakecase", true, 1.0),
    ("Éire", "éire", "éire", "éire", true, 1.0),
    ("l'école", "lécole", "lécole", "lécole", true, 1.0),
    ("naïve a—the end", "naïve end", "naïve — end", "naïve end", false, 0.8),
    ("«the» war", "« » war", "« » war", "« » war", true, 1.0),
    ("A.", "a", "", "", true, 0.0),
    ("the-end", "end", "theend", "end", false, 0.0),
    ("Nikola Tesla was born in 1856", "1856", "nikola tesla was born in 1856", "1856", false, 0.2857142857142857),
    ("July 10, 1856", "10 July 1856", "july 10 1856", "10 july 1856", false, 1.0),
    ("new york city", "New York", "new york city", "new york", false, 0.8),
];

#[test]
fn matches_the_official_squad_definitions() {
    for &(pred, gold, norm_pred, norm_gold, em, f1) in SQUAD_CASES {
        assert_eq!(normalize_answer(pred), norm_pred, "normalize_answer({pred:?})");
        assert_eq!(normalize_answer(gold), norm_gold, "normalize_answer({gold:?})");
        assert_eq!(exact_match_score(pred, gold), em, "EM({pred:?}, {gold:?})");
        let got = f1_score(pred, gold);
        assert!((got - f1).abs() < 1e-9, "F1({pred:?}, {gold:?}) = {got}, want {f1}");
    }
}

fn input(answers: &[&str], response: &str) -> JudgeInput {
    JudgeInput::new("Which team won Super Bowl 50?", answers.iter().copied(), response)
}

#[test]
fn verdicts_take_the_best_alias_and_the_threshold() {
    let judge = RuleJudge::default();
    assert_eq!(DEFAULT_F1_THRESHOLD, 0.8);

    let v = judge.score(&input(&["Denver Broncos", "Broncos"], "the Denver Broncos")).unwrap();
    assert_eq!((v.reward, v.label), (1.0, VerdictLabel::ExactMatch));

    // EM against the second alias wins over partial overlap with the first.
    let v = judge.score(&input(&["Denver Broncos", "Broncos"], "Broncos!")).unwrap();
    assert_eq!((v.reward, v.label), (1.0, VerdictLabel::ExactMatch));
    assert!(v.raw.contains("alias=\"Broncos\""), "{}", v.raw);

    // F1 exactly at the threshold counts.
    let v = judge.score(&input(&["Santa Clara"], "Santa Clara, California")).unwrap();
    assert_eq!((v.reward, v.label), (1.0, VerdictLabel::F1Match));
    assert!(v.raw.contains("f1=0.800"), "{}", v.raw);

    // Half answers and padded answers fall below it.
    let v = judge.score(&input(&["Denver Broncos"], "The answer is Denver Broncos")).unwrap();
    assert_eq!((v.reward, v.label), (0.0, VerdictLabel::NoMatch));
    assert!(v.raw.contains("f1=0.667"), "{}", v.raw);

    // A lower threshold accepts them.
    let lenient = RuleJudge::new(0.5).unwrap();
    let v = lenient.score(&input(&["Denver Broncos"], "The answer is Denver Broncos")).unwrap();
    assert_eq!((v.reward, v.label), (1.0, VerdictLabel::F1Match));

    let v = judge.score(&input(&["Denver Broncos"], "Carolina Panthers")).unwrap();
    assert_eq!((v.reward, v.label), (0.0, VerdictLabel::NoMatch));
}

#[test]
fn grades_the_answer_tag_when_there_is_one() {
    let judge = RuleJudge::default();
    let response = "I searched the wiki.\n<answer>Denver Broncos</answer>\nThey beat the Carolina Panthers.";
    let v = judge.score(&input(&["Denver Broncos"], response)).unwrap();
    assert_eq!((v.reward, v.label), (1.0, VerdictLabel::ExactMatch));
    // Without the tag the whole response is graded.
    let v = judge.score(&input(&["Denver Broncos"], "I searched the wiki. Denver Broncos beat the Carolina Panthers.")).unwrap();
    assert_eq!(v.reward, 0.0);
}

#[test]
fn no_gold_answers_is_an_error() {
    let err = RuleJudge::default().score(&input(&[], "x")).unwrap_err();
    assert!(err.to_string().contains("no gold answers"), "{err}");
}

#[test]
fn rule_spec_builds_a_judge_that_works_in_batches() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let judge = "rule:0.5".parse::<JudgeSpec>().unwrap().build(&Default::default()).unwrap();
    assert_eq!(judge.name(), "rule(f1>=0.5)");
    let items = vec![input(&["Denver Broncos"], "Denver Broncos"), input(&["Denver Broncos"], "Panthers"), input(&["Denver Broncos"], "Broncos")];
    let verdicts = rt.block_on(judge_batch(judge.as_ref(), &items, 2));
    let rewards: Vec<f32> = verdicts.into_iter().map(|v| v.unwrap().reward).collect();
    assert_eq!(rewards, vec![1.0, 0.0, 1.0]);
}

/// The precision-weighted F-score ranks near misses as a reader would and does not pay for length: at
/// beta 0.5 the whole answer above most of it above a fragment, and a span around the answer with as
/// many words again below the shorter part (F1 ties those two); at beta 1 it is SQuAD's F1 exactly.
#[test]
fn f_beta_below_one_ranks_parts_of_the_answer_above_longer_spans_around_it() {
    use agentrt_judge::{best_f_beta, f_beta_score};
    let gold = "up to 3 pence";
    let f = |p: &str| f_beta_score(p, gold, 0.5);
    let (whole, most, fragment, around) = (f("up to 3 pence"), f("3 pence"), f("pence"), f("prices went up to 3 pence per pound of tea"));
    assert_eq!(whole, 1.0);
    assert!((most - 0.8333).abs() < 1e-3 && (fragment - 0.625).abs() < 1e-3 && (around - 0.4545).abs() < 1e-3, "{most} {fragment} {around}");
    assert!(whole > most && most > fragment && fragment > around);
    // A span around the answer with as many words again: F1 ties it with `3 pence`; beta 0.5 does not.
    let twice = "prices went up to 3 pence per pound";
    assert!((f1_score(twice, gold) - f1_score("3 pence", gold)).abs() < 1e-12);
    assert!(f(twice) < most && (f(twice) - 0.5556).abs() < 1e-3, "{}", f(twice));
    for &(pred, gold, _, _, _, f1) in SQUAD_CASES {
        assert_eq!(f_beta_score(pred, gold, 1.0).to_bits(), f1_score(pred, gold).to_bits(), "F1({pred:?}, {gold:?}) = {f1}");
    }
    let aliases = ["three pence".to_string(), gold.to_string()];
    assert_eq!(best_f_beta("<answer>3 pence</answer>", &aliases, 0.5), most, "the closest alias, inside the answer tag");
    assert_eq!(best_f_beta("no overlap", &aliases, 0.5), 0.0);
}
