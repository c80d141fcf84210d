//! Who reads (part two): a page's markdown cut into sections that `read_section` returns.
//!
//! Rules, in order:
//! - the first line `# Title` is the page title, not a section heading;
//! - every other markdown heading (`#`..`######`) starts a section titled by the heading; text before the
//!   first sub-heading is the page's `intro`;
//! - a section longer than [`ChunkParams::max_chars`] is cut into groups of whole paragraphs of at most
//!   about that length (a single paragraph longer than that is cut at sentence ends), titled by their
//!   first words — the 48 long articles, which have no sub-headings, become ~45 chunks each, most of
//!   them one paragraph.
//!
//! Ids are `page_id:slug`: the heading's slug, `intro`, or the slug of a chunk's first words, with `-2`,
//! `-3`... on a collision inside the page. The same page always gives the same ids.

use serde::{Deserialize, Serialize};

/// How long sections are cut into chunks; recorded in the manifest, since it changes every id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkParams {
    /// A section longer than this (in characters) is split into paragraph groups of at most this size.
    pub max_chars: usize,
    /// How many leading words name a chunk (its title and its slug).
    pub title_words: usize,
}

/// Why 800: about one paragraph of the long articles (SQuAD's unit), so the section a search names is
/// the passage that matched, not its neighbours too. Measured on 1,000 train questions (the top hit's
/// best section read whole): a gold answer in 72.1% of them at 500 characters (380 printed on
/// average), 74.9% at 800 (625), 73.2% at 1,500 (1,068) and 65.4% at 3,000; page recall@1 0.911 at
/// 800 against 0.868 at 1,500.
impl Default for ChunkParams {
    fn default() -> Self {
        ChunkParams { max_chars: 800, title_words: 8 }
    }
}

/// One section of a page: what `view_sections` lists and `read_section` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// `page_id:slug`, stable for the same input.
    pub id: String,
    /// The heading, `Introduction`, or the chunk's first words followed by `…`.
    pub title: String,
    /// The section's text (markdown, without its heading line).
    pub text: String,
}

/// Split one page's markdown into sections (see the module doc for the rules).
pub fn split_page(page_id: &str, page_title: &str, content: &str, params: &ChunkParams) -> Vec<Section> {
    // 1. Cut at headings.
    let mut blocks: Vec<(Option<String>, String)> = Vec::new(); // (heading, body)
    let mut heading: Option<String> = None;
    let mut body = String::new();
    let mut first_content_line = true;
    for line in content.lines() {
        let trimmed = line.trim_end();
        if let Some(h) = heading_text(trimmed) {
            // The leading `# Title` is the page title.
            if first_content_line && trimmed.starts_with("# ") {
                first_content_line = false;
                continue;
            }
            first_content_line = false;
            blocks.push((heading.take(), std::mem::take(&mut body)));
            heading = Some(h.to_string());
            continue;
        }
        if !trimmed.trim().is_empty() {
            first_content_line = false;
        }
        body.push_str(trimmed);
        body.push('\n');
    }
    blocks.push((heading, body));

    // 2. Cut long blocks into paragraph groups, name everything.
    let mut out: Vec<Section> = Vec::new();
    let mut used: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (heading, body) in blocks {
        let body = body.trim();
        if body.is_empty() && heading.is_none() {
            continue;
        }
        let chunks = chunk_paragraphs(body, params.max_chars);
        let single = chunks.len() <= 1;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let (title, slug_base) = match (&heading, single, i) {
                (Some(h), true, _) => (h.clone(), slugify(h)),
                (Some(h), false, 0) => (h.clone(), slugify(h)),
                (Some(h), false, _) => {
                    let fw = first_words(&chunk, params.title_words);
                    (format!("{h}: {fw}"), format!("{}-{}", slugify(h), slugify(&fw)))
                }
                (None, true, _) => ("Introduction".to_string(), "intro".to_string()),
                (None, false, _) => {
                    let fw = first_words(&chunk, params.title_words);
                    (fw.clone(), slugify(&fw))
                }
            };
            let slug_base = if slug_base.is_empty() { "section".to_string() } else { slug_base };
            let mut slug = slug_base.clone();
            let mut n = 2;
            while used.contains(&slug) {
                slug = format!("{slug_base}-{n}");
                n += 1;
            }
            used.insert(slug.clone());
            out.push(Section { id: format!("{page_id}:{slug}"), title, text: chunk });
        }
    }
    if out.is_empty() {
        // A page with no text at all still has one (empty) section, so view_sections never returns nothing.
        out.push(Section { id: format!("{page_id}:intro"), title: page_title.to_string(), text: String::new() });
    }
    out
}

/// The text of a markdown ATX heading line (`## Foo` → `Foo`), or None.
fn heading_text(line: &str) -> Option<&str> {
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    if hashes == 0 || hashes > 6 {
        return None;
    }
    let rest = &line[hashes..];
    if !rest.starts_with(' ') && !rest.is_empty() {
        return None;
    }
    let text = rest.trim().trim_end_matches('#').trim();
    if text.is_empty() {
        None
    } else {
        Some(text)
    }
}

/// Group blank-line paragraphs into chunks of at most `max_chars` (a longer paragraph is cut at sentences).
fn chunk_paragraphs(body: &str, max_chars: usize) -> Vec<String> {
    if body.chars().count() <= max_chars {
        return if body.is_empty() { Vec::new() } else { vec![body.to_string()] };
    }
    let mut pieces: Vec<String> = Vec::new();
    for para in body.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        if para.chars().count() <= max_chars {
            pieces.push(para.to_string());
        } else {
            pieces.extend(split_sentences(para, max_chars));
        }
    }
    let mut chunks: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut cur_len = 0usize;
    for p in pieces {
        let len = p.chars().count();
        if cur_len > 0 && cur_len + 2 + len > max_chars {
            chunks.push(std::mem::take(&mut cur));
            cur_len = 0;
        }
        if cur_len > 0 {
            cur.push_str("\n\n");
            cur_len += 2;
        }
        cur.push_str(&p);
        cur_len += len;
    }
    if !cur.is_empty() {
        chunks.push(cur);
    }
    chunks
}

/// Cut one over-long paragraph at sentence ends (". "), and hard at `max_chars` if a sentence is longer.
fn split_sentences(para: &str, max_chars: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut cur_len = 0usize;
    let mut sentences: Vec<&str> = Vec::new();
    let mut start = 0;
    for (i, _) in para.match_indices(". ") {
        sentences.push(&para[start..i + 1]);
        start = i + 2;
    }
    sentences.push(&para[start..]);
    for s in sentences {
        let len = s.chars().count();
        if cur_len > 0 && cur_len + 1 + len > max_chars {
            out.push(std::mem::take(&mut cur));
            cur_len = 0;
        }
        if len > max_chars {
            // One enormous sentence: hard cut on char boundaries.
            let chars: Vec<char> = s.chars().collect();
            for piece in chars.chunks(max_chars) {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                cur = piece.iter().collect();
                cur_len = piece.len();
            }
            continue;
        }
        if cur_len > 0 {
            cur.push(' ');
            cur_len += 1;
        }
        cur.push_str(s);
        cur_len += len;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The first `n` words of a text, with `…` when there is more.
fn first_words(text: &str, n: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut s = words.iter().take(n).copied().collect::<Vec<_>>().join(" ");
    if words.len() > n {
        s.push('…');
    }
    s
}

/// Lowercase ASCII slug: letters and digits kept, runs of anything else become one `-`; at most 60 chars.
pub fn slugify(text: &str) -> String {
    let mut s = String::new();
    let mut dash = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            for l in c.to_lowercase() {
                if l.is_ascii_alphanumeric() {
                    s.push(l);
                    dash = false;
                } else if !dash && !s.is_empty() {
                    s.push('-');
                    dash = true;
                }
            }
        } else if !dash && !s.is_empty() {
            s.push('-');
            dash = true;
        }
        if s.len() >= 60 {
            break;
        }
    }
    s.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> ChunkParams {
        ChunkParams { max_chars: 100, title_words: 4 }
    }

    #[test]
    fn slugs_are_readable() {
        assert_eq!(slugify("The 1973 Oil Crisis!"), "the-1973-oil-crisis");
        assert_eq!(slugify("  --Hello,   world--  "), "hello-world");
        assert_eq!(slugify("Café"), "caf");
    }

    #[test]
    fn lead_page_is_one_intro_section() {
        let s = split_page("paris", "Paris", "# Paris\n\nParis is the capital of France.\n", &p());
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].id, "paris:intro");
        assert_eq!(s[0].title, "Introduction");
        assert_eq!(s[0].text, "Paris is the capital of France.");
    }

    #[test]
    fn headings_make_sections() {
        let md = "# Paris\n\nLead text.\n\n## History\n\nOld.\n\n## Geography\n\nFlat.\n\n### History\n\nAgain.\n";
        let s = split_page("paris", "Paris", md, &p());
        let ids: Vec<&str> = s.iter().map(|x| x.id.as_str()).collect();
        assert_eq!(ids, ["paris:intro", "paris:history", "paris:geography", "paris:history-2"]);
        assert_eq!(s[1].title, "History");
        assert_eq!(s[1].text, "Old.");
    }

    #[test]
    fn long_text_is_grouped_by_paragraphs() {
        let para = |w: &str| format!("{w} {}", "word ".repeat(8).trim()); // ~45 chars
        let md = format!("# T\n\n{}\n\n{}\n\n{}\n\n{}\n", para("Alpha"), para("Beta"), para("Gamma"), para("Delta"));
        let s = split_page("t", "T", &md, &p());
        assert_eq!(s.len(), 2, "{s:#?}");
        assert!(s.iter().all(|x| x.text.chars().count() <= 100));
        assert_eq!(s[0].id, "t:alpha-word-word-word");
        assert_eq!(s[0].title, "Alpha word word word…");
        assert!(s[0].text.contains("Beta"));
        assert!(s[1].text.starts_with("Gamma"));
        // Same input, same ids.
        assert_eq!(s, split_page("t", "T", &md, &p()));
    }

    #[test]
    fn long_paragraph_is_cut_at_sentences() {
        let sentence = "This sentence has exactly forty chars. ";
        let md = format!("# T\n\n{}\n", sentence.repeat(6).trim());
        let s = split_page("t", "T", &md, &p());
        assert!(s.len() >= 3);
        assert!(s.iter().all(|x| x.text.chars().count() <= 100), "{s:#?}");
        let ids: std::collections::HashSet<_> = s.iter().map(|x| &x.id).collect();
        assert_eq!(ids.len(), s.len(), "ids are unique");
        assert!(s[1].id.starts_with("t:this-sentence-has-exactly"));
    }

    #[test]
    fn empty_page_still_has_a_section() {
        let s = split_page("e", "Empty", "# Empty\n", &p());
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].id, "e:intro");
    }
}
