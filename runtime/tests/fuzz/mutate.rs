//! Real programs, mutated: the repository's example programs, the HumanEval solutions with their tests
//! (`data/humaneval`), the programs a model wrote for them (`bench/humaneval/*/samples.jsonl`, whose
//! replies are also mutated whole and read by the reply parser), and the shapes of the wiki programs
//! the trajectories hold. Mutations work on tokens (delete, duplicate, swap, insert, replace), on lines
//! (duplicate, delete, re-indent, splice from another program) and on bytes (flip, insert, delete,
//! truncate).

use crate::programs;
use crate::rng::Rng;
use std::path::Path;

/// The programs and replies mutations start from.
pub struct Corpus {
    pub programs: Vec<String>,
    pub replies: Vec<String>,
}

/// Wiki programs in the shapes the trajectories and the system prompt's demonstration use.
const WIKI_PROGRAMS: &[&str] = &[
    "hits = search_pages(\"Who won Super Bowl 50?\")\nfor h in hits:\n    print(h[\"page_id\"], \"|\", h[\"title\"])\n",
    "hits = search_pages(\"capital of France\")\nprint(read_section(hits[0][\"section_id\"]))\n",
    "for hit in search_pages(\"discovered oxygen 1770s\")[:2]:\n    print(read_section(hit[\"section_id\"]))\n",
    "hits = search_pages(\"Paris\")\npage = hits[min(1, len(hits) - 1)][\"page_id\"]\nsections = view_sections(page)\nprint(read_section(sections[1 % len(sections)][\"section_id\"]))\n",
    "hits = search_pages(\"capital of France\")\nsections = view_sections(hits[0][\"page_id\"])\nprint(read_section(sections[0][\"section_id\"]))\n",
    "try:\n    text = read_section(\"no-such-page:intro\")\nexcept Exception as e:\n    print(\"read_section failed:\", e)\n",
    "text = read_section(view_sections(search_pages(\"Paris\")[0][\"page_id\"])[0][\"section_id\"])\nprint(word_count(text), \"words\")\nprint(summarize(text))\ntop_words(text, n=5)\n",
    "print(search_pages(\"Carl Wilhelm Scheele\"))\n",
    "hits = search_pages(\"Denver Broncos\", 2)\nprint([ (h['title'], round(h['score'], 2)) for h in hits ])\n",
];

impl Corpus {
    /// Reads the corpus from the repository (`root` is the workspace root). Missing files are skipped,
    /// so the fuzzer also runs from a partial checkout; the built-in wiki programs are always there.
    pub fn load(root: &Path) -> Corpus {
        let mut programs: Vec<String> = WIKI_PROGRAMS.iter().map(|p| p.to_string()).collect();
        let mut replies = Vec::new();
        if let Ok(dir) = std::fs::read_dir(root.join("examples/programs")) {
            let mut paths: Vec<_> = dir.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "py")).collect();
            paths.sort();
            for path in paths {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    programs.push(text);
                }
            }
        }
        let mut tests = std::collections::HashMap::new();
        if let Ok(text) = std::fs::read_to_string(root.join("data/humaneval/HumanEval.jsonl")) {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let Ok(task) = serde_json::from_str::<serde_json::Value>(line) else { continue };
                let field = |k: &str| task[k].as_str().unwrap_or_default().to_string();
                let check = format!("{}\ncheck({})\n", field("test"), field("entry_point"));
                programs.push(format!("{}{}\n{check}", field("prompt"), field("canonical_solution")));
                tests.insert(field("task_id"), check);
            }
        }
        if let Ok(text) = std::fs::read_to_string(root.join("bench/humaneval/qwen2.5-coder-0.5b/samples.jsonl")) {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let Ok(sample) = serde_json::from_str::<serde_json::Value>(line) else { continue };
                let check = tests.get(sample["task_id"].as_str().unwrap_or_default()).cloned().unwrap_or_default();
                if let Some(solution) = sample["solution"].as_str() {
                    programs.push(format!("{solution}\n{check}"));
                }
                if let Some(reply) = sample["reply"].as_str() {
                    replies.push(reply.to_string());
                }
            }
        }
        for program in WIKI_PROGRAMS {
            replies.push(format!("```python\n{program}```"));
            replies.push(format!("<tool>{}</tool>", program.lines().next().unwrap_or_default()));
        }
        replies.push("<answer>Paris</answer>".into());
        Corpus { programs, replies }
    }
}

/// Splits Python text into tokens: whitespace runs, words (names, numbers, dotted), string literals
/// (to the closing quote on the same line) and single punctuation characters. Joining them gives the
/// text back.
fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                i += 1;
            }
        } else if c == '"' || c == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != c && chars[i] != '\n' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(chars.len());
        } else {
            i += 1;
        }
        out.push(chars[start..i].iter().collect());
    }
    out
}

/// Tokens worth inserting: the language's keywords and punctuation, the tools, numbers at the edges.
const TOKEN_POOL: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ":",
    ",",
    ".",
    "=",
    "==",
    "+",
    "-",
    "*",
    "**",
    "/",
    "//",
    "%",
    "<",
    ">",
    "<<",
    "@",
    "\\",
    "#",
    ";",
    "\n",
    "\n    ",
    "    ",
    "\t",
    " ",
    "if",
    "else",
    "elif",
    "for",
    "while",
    "True",
    "False",
    "None",
    "in",
    "not",
    "and",
    "or",
    "def",
    "return",
    "lambda",
    "yield",
    "class",
    "try",
    "except",
    "finally",
    "raise",
    "import",
    "from",
    "as",
    "with",
    "global",
    "del",
    "pass",
    "break",
    "continue",
    "assert",
    "async",
    "await",
    "print",
    "len",
    "range",
    "search_pages",
    "view_sections",
    "read_section",
    "word_count",
    "top_words",
    "0",
    "1",
    "-1",
    "10**9",
    "2**64",
    "1e308",
    "''",
    "'x' * 10**8",
    "\"\"\"",
    "'",
    "\"",
    "f'{",
    "}'",
    "__import__",
    "__class__",
    "while True:",
    "x",
    "_",
    "é",
    "\u{0}",
    "\u{feff}",
    "\r",
];

/// One mutation of `program`.
pub fn mutate(rng: &mut Rng, program: &str, corpus: &Corpus) -> String {
    let rounds = *rng.pick(&[1usize, 1, 1, 1, 2, 2, 3, 8]);
    let mut text = program.to_string();
    for _ in 0..rounds {
        text = match rng.below(10) {
            0..=4 => mutate_tokens(rng, &text),
            5..=7 => mutate_lines(rng, &text, corpus),
            _ => mutate_bytes(rng, &text),
        };
    }
    text
}

fn mutate_tokens(rng: &mut Rng, text: &str) -> String {
    let mut t = tokens(text);
    if t.is_empty() {
        return rng.pick(TOKEN_POOL).to_string();
    }
    let i = rng.below(t.len());
    match rng.below(6) {
        0 => {
            t.remove(i);
        }
        1 => {
            let copy = t[i].clone();
            t.insert(i, copy);
        }
        2 => {
            let j = rng.below(t.len());
            t.swap(i, j);
        }
        3 => t.insert(i, rng.pick(TOKEN_POOL).to_string()),
        4 => t[i] = rng.pick(TOKEN_POOL).to_string(),
        _ => {
            // A number, a string or a name made extreme.
            let numbers: Vec<usize> = (0..t.len()).filter(|&k| t[k].chars().next().is_some_and(|c| c.is_ascii_digit())).collect();
            if let Some(&k) = numbers.get(rng.below(numbers.len().max(1))) {
                t[k] = rng.pick(&["0", "-1", "10**9", "2**63", "10**100", "999999999999"]).to_string();
            } else {
                t[i] = rng.pick(&["'x' * 10**7", "[0] * 10**7", "range(10**9)"]).to_string();
            }
        }
    }
    t.concat()
}

fn mutate_lines(rng: &mut Rng, text: &str, corpus: &Corpus) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let i = rng.below(lines.len());
    match rng.below(7) {
        0 => {
            lines.remove(i);
        }
        1 => {
            let copy = lines[i].clone();
            let n = *rng.pick(&[1usize, 2, 10, 1000]);
            for _ in 0..n {
                lines.insert(i, copy.clone());
            }
        }
        2 => {
            let j = rng.below(lines.len());
            lines.swap(i, j);
        }
        3 => lines[i] = format!("{}{}", rng.pick(&["    ", "  ", "\t", ""]), lines[i].trim_start()),
        4 => {
            let other = &corpus.programs[rng.below(corpus.programs.len())];
            let other: Vec<&str> = other.lines().collect();
            let from = rng.below(other.len().max(1));
            let n = rng.between(1, 8);
            for (k, line) in other.iter().skip(from).take(n).enumerate() {
                lines.insert(i + k, line.to_string());
            }
        }
        5 => {
            let indent: String = lines[i].chars().take_while(|c| c.is_whitespace()).collect();
            let h = programs::hostile(rng);
            let h: Vec<String> = h.lines().map(|l| format!("{indent}{l}")).collect();
            lines.splice(i..i, h);
        }
        _ => {
            let indent: String = lines[i].chars().take_while(|c| c.is_whitespace()).collect();
            lines.insert(i, format!("{indent}{}", programs::tool_call(rng)));
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

fn mutate_bytes(rng: &mut Rng, text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    if bytes.is_empty() {
        bytes.push(rng.byte());
    }
    let i = rng.below(bytes.len());
    match rng.below(6) {
        0 => bytes[i] ^= 1 << rng.below(8),
        1 => {
            bytes.remove(i);
        }
        2 => bytes.insert(i, rng.byte()),
        3 => bytes.truncate(i),
        4 => {
            let end = (i + rng.between(1, 64)).min(bytes.len());
            let copy = bytes[i..end].to_vec();
            bytes.splice(i..i, copy);
        }
        _ => bytes[i] = *rng.pick(b"()[]{}:'\"\\\n\t #=,."),
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_join_back_to_the_text() {
        let text = "def f(x):\n    return x['a'] + \"b\\\"c\" # done\n";
        assert_eq!(tokens(text).concat(), text);
    }
}
