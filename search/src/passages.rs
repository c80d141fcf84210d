//! Who matches (part five): the passages of one page that answer a query, for `search_passages`.
//!
//! A page search finds the right page for nine questions in ten, but on a long article the words that
//! picked the page (its own name, "Luther", "Kenya") are in every section, so they cannot pick the
//! section. Inside a page the words that matter are the ones the page uses rarely. A passage is one
//! sentence, and its score is the sum over the query's distinct terms it holds of
//! `idf_corpus(t) · idf_page(t)`: the corpus's BM25 idf (rare in the language) times the same formula
//! over the page's sections (rare in this page), so "born" outweighs "Tesla" on Tesla's page; a term of
//! the page's title keeps half its weight ([`TITLE_TERM_SHARE`]: "Nikola" is rare in Tesla's page, which
//! calls him Tesla, yet picks no sentence). A sentence
//! also earns a quarter of its neighbours' own scores in the same section ([`NEIGHBOUR_SHARE`]): the
//! answer is often the sentence after the one that repeats the question.
//!
//! Without a page, `search_passages` pools the passages of the fifteen best pages of `search_pages`, each
//! passage's score times its page's score to the 4th (`WikiIndex::search_passages`): a tenth of the
//! questions' gold page is not the top hit, and many of those are questions a reader cannot place
//! without their article ("What are the two official languages?").
//!
//! Measured as the share of the 8,313 train and dev questions whose gold answer is printed by the find
//! program (`trajectories synth --style find`: the pooled passages, best first, as many as fit in 1,500
//! characters): 92.2%, against 79.2% for the scan program that prints the top hit's best section whole
//! and reads on in the next hits (bench/search_results.md). With ten pages: title terms at full weight
//! 92.2% (but Tesla's birth year unprinted), at half 92.1%, at a fifth 91.9%. While choosing, a prototype
//! of the ranking over the same questions measured the parts: the top page alone in 1,500 characters 86.7%; its best
//! passages in 1,100 and the second page's in 400, 88.4%, 89.4% with the neighbours' share and 85.7%
//! with corpus idf alone (no page idf); pooled over 3 pages 91.3%, 5 pages 92.0%, 10 pages 92.5%
//! (page score to the 4th; to the 2nd or 8th within half a point). Every choice was made on these
//! questions; there is no held-out set of questions for them.
//!
//! Sentences are cut at `.`, `!` or `?` followed by white space and a capital, a digit or an opening
//! quote, unless the word before is a known abbreviation or a single letter ("St. Johns", "U.S. 510",
//! "Pierce v. Society"), and at line breaks.

use std::collections::{HashMap, HashSet};

/// The part of each neighbouring sentence's own score a sentence earns.
pub const NEIGHBOUR_SHARE: f32 = 0.25;

/// The weight left to a query term that is in the page's title: the page's name picks the page, not the
/// sentence ("Nikola" is rare in Tesla's page, which calls him Tesla, yet says nothing about his birth).
pub const TITLE_TERM_SHARE: f32 = 0.5;

/// Words after which a full stop does not end a sentence (compared lowercased, without the stop).
const ABBREVIATIONS: &[&str] = &[
    "st", "mr", "mrs", "ms", "dr", "jr", "sr", "vs", "v", "no", "u.s", "u.k", "e.g", "i.e", "c", "ca", "mt", "ft", "gen", "gov", "col", "lt", "sgt", "rev",
    "inc", "co", "corp", "ltd", "jan", "feb", "mar", "apr", "aug", "sept", "sep", "oct", "nov", "dec", "etc", "al", "approx", "fig", "vol", "pp",
];

/// One sentence of a page that holds some of the query's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    /// The section's index among the page's sections given to [`AnalyzedPage::new`].
    pub section: usize,
    /// The sentence, trimmed.
    pub text: String,
    /// Higher is better: weighted query terms held, plus the neighbours' share.
    pub score: f32,
}

/// The sentences of `text`, in order, trimmed, empty ones dropped (see the module's documentation).
pub fn split_sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        let bytes = line.as_bytes();
        let mut start = 0;
        let mut i = 0;
        while i < bytes.len() {
            if matches!(bytes[i], b'.' | b'!' | b'?') {
                // Closing quotes and brackets stay with the sentence they close.
                let mut end = i + 1;
                while end < bytes.len() && matches!(bytes[end], b'"' | b')' | b'\'') {
                    end += 1;
                }
                if line[end..].starts_with("\u{201d}") {
                    end += "\u{201d}".len();
                }
                let rest = &line[end..];
                let next = rest.trim_start();
                let spaced = rest.len() > next.len();
                let opens = next.chars().next().is_some_and(|c| c.is_uppercase() || c.is_ascii_digit() || matches!(c, '"' | '(' | '\u{201c}' | '\''));
                if spaced && opens && !(bytes[i] == b'.' && ends_with_abbreviation(&line[start..i])) {
                    out.push(line[start..end].trim());
                    start = end;
                }
                i = end;
            } else {
                i += 1;
            }
        }
        out.push(line[start..].trim());
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Whether the word before a full stop is an abbreviation: a known one, a single letter (an initial), or
/// one with stops inside ("U.S", "O.S", "e.g").
fn ends_with_abbreviation(before_stop: &str) -> bool {
    let word = before_stop.rsplit(|c: char| c.is_whitespace() || matches!(c, '(' | '[' | '"' | '\'')).next().unwrap_or("");
    let word = word.to_lowercase();
    (word.chars().count() == 1 && word.chars().all(char::is_alphabetic)) || word.contains('.') || ABBREVIATIONS.contains(&word.as_str())
}

/// BM25's idf: `ln(1 + (n − df + ½) / (df + ½))`, for a term in `df` of `n` documents.
pub fn idf(n: usize, df: usize) -> f32 {
    let (n, df) = (n as f32, df as f32);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// A page's sentences, analysed once: what [`AnalyzedPage::rank`] scores for every query.
#[derive(Debug)]
pub struct AnalyzedPage {
    /// The title's terms.
    title: HashSet<String>,
    /// Each section's distinct terms.
    sections: Vec<HashSet<String>>,
    /// Each sentence: its section, its text, its distinct terms.
    sentences: Vec<(usize, String, HashSet<String>)>,
}

impl AnalyzedPage {
    /// Cut a page's section texts (in order) into sentences and analyse them, and its title, with
    /// `analyze` (the terms of a text, analysed as queries are).
    pub fn new(title: &str, sections: &[&str], analyze: impl Fn(&str) -> HashSet<String>) -> Self {
        let mut sentences = Vec::new();
        let mut section_terms = Vec::with_capacity(sections.len());
        for (s, text) in sections.iter().enumerate() {
            // Sentences are cut at white space, so a section's terms are its sentences' together: each
            // text is analysed once.
            let mut held = HashSet::new();
            for sentence in split_sentences(text) {
                let terms = analyze(sentence);
                held.extend(terms.iter().cloned());
                sentences.push((s, sentence.to_string(), terms));
            }
            section_terms.push(held);
        }
        AnalyzedPage { title: analyze(title), sections: section_terms, sentences }
    }

    /// The page's passages for a query, best first (ties in reading order), those holding none of its
    /// terms left out. `terms` are the query's analysed terms (distinct); `corpus_idf` a term's idf over
    /// the whole corpus.
    pub fn rank(&self, terms: &[String], corpus_idf: impl Fn(&str) -> f32) -> Vec<Passage> {
        if terms.is_empty() {
            return Vec::new();
        }
        let weight: HashMap<&str, f32> = terms
            .iter()
            .map(|t| {
                let in_page = idf(self.sections.len(), self.sections.iter().filter(|held| held.contains(t)).count());
                let title = if self.title.contains(t) { TITLE_TERM_SHARE } else { 1.0 };
                (t.as_str(), corpus_idf(t) * in_page * title)
            })
            .collect();
        let own: Vec<f32> = self.sentences.iter().map(|(_, _, held)| terms.iter().filter(|t| held.contains(*t)).map(|t| weight[t.as_str()]).sum()).collect();
        let same_section = |i: usize, j: usize| self.sentences.get(j).is_some_and(|n| n.0 == self.sentences[i].0);
        let mut scored: Vec<(f32, usize)> = own
            .iter()
            .enumerate()
            .filter(|&(_, &o)| o > 0.0)
            .map(|(i, &o)| {
                let around: f32 = [i.wrapping_sub(1), i + 1].into_iter().filter(|&j| same_section(i, j)).map(|j| own[j]).sum();
                (o + NEIGHBOUR_SHARE * around, i)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().map(|(score, i)| Passage { section: self.sentences[i].0, text: self.sentences[i].1.clone(), score }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> HashSet<String> {
        text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
    }

    #[test]
    fn sentences_end_at_stops_before_capitals_not_at_abbreviations() {
        let text = "Jacksonville lies on the St. Johns River. See Pierce v. Society of Sisters, 268 U.S. 510 (1925). It rains!\n\"Quoted.\" Then 1964 came.";
        assert_eq!(
            split_sentences(text),
            vec![
                "Jacksonville lies on the St. Johns River.",
                "See Pierce v. Society of Sisters, 268 U.S. 510 (1925).",
                "It rains!",
                "\"Quoted.\"",
                "Then 1964 came."
            ]
        );
        assert_eq!(split_sentences("Version 2.5 is out. J. R. R. Tolkien wrote."), vec!["Version 2.5 is out.", "J. R. R. Tolkien wrote."]);
        assert_eq!(
            split_sentences("Tesla was born on 10 July [O.S. 28 June] 1856. He died."),
            vec!["Tesla was born on 10 July [O.S. 28 June] 1856.", "He died."]
        );
        assert!(split_sentences(" \n\n ").is_empty());
    }

    #[test]
    fn words_rare_in_the_page_decide() {
        // "tesla" is in every section, so it weighs nothing inside the page; "born" picks the sentence.
        let sections = ["Tesla wrote many articles. Tesla also wrote books.", "Tesla was born in 1856 in Smiljan. He studied in Graz.", "Tesla died in 1943."];
        let terms: Vec<String> = ["tesla", "born"].iter().map(|t| t.to_string()).collect();
        let ranked = AnalyzedPage::new("Tesla", &sections, words).rank(&terms, |_| 1.0);
        assert_eq!(ranked[0].text, "Tesla was born in 1856 in Smiljan.");
        assert_eq!(ranked[0].section, 1);
        // The sentence after it holds no term: left out; the others hold only "tesla", weighed near zero.
        assert!(ranked.iter().all(|p| p.text != "He studied in Graz."));
        assert!(ranked[1..].iter().all(|p| p.score < ranked[0].score / 2.0), "{ranked:?}");
    }

    #[test]
    fn the_page_name_weighs_half() {
        // "nikola" is in one section of two, as "born" is; but it is the page's name.
        let sections = ["Nikola won a prize that year.", "Tesla was born in 1856."];
        let terms: Vec<String> = ["year", "nikola", "born"].iter().map(|t| t.to_string()).collect();
        let idf_of = |t: &str| if t == "year" { 0.5 } else { 2.0 };
        let ranked = AnalyzedPage::new("Nikola Tesla", &sections, words).rank(&terms, idf_of);
        assert_eq!(ranked[0].text, "Tesla was born in 1856.", "{ranked:?}");
        let untitled = AnalyzedPage::new("Inventors", &sections, words).rank(&terms, idf_of);
        assert_eq!(untitled[0].text, "Nikola won a prize that year.", "{untitled:?}");
    }

    #[test]
    fn neighbours_lend_a_quarter_and_ties_keep_reading_order() {
        let sections = ["Alpha one. Beta two. Gamma three.", "Beta again."];
        let terms: Vec<String> = ["alpha", "beta"].iter().map(|t| t.to_string()).collect();
        let page = AnalyzedPage::new("Letters", &sections, words);
        let ranked = page.rank(&terms, |_| 1.0);
        let w_alpha = idf(2, 1);
        let w_beta = idf(2, 2);
        let by_text = |t: &str| ranked.iter().find(|p| p.text == t).unwrap().score;
        assert!((by_text("Alpha one.") - (w_alpha + NEIGHBOUR_SHARE * w_beta)).abs() < 1e-6);
        assert!((by_text("Beta two.") - (w_beta + NEIGHBOUR_SHARE * w_alpha)).abs() < 1e-6);
        // "Beta again." is alone in its section: no neighbour across the section boundary.
        assert!((by_text("Beta again.") - w_beta).abs() < 1e-6);
        assert_eq!(ranked.len(), 3, "gamma holds no term");
        assert!(page.rank(&[], |_| 1.0).is_empty());
    }
}
