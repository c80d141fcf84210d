//! A task's `check(candidate)` cut into separate tests, so each runs as its own sandboxed program and a
//! crash or an endless loop in one costs only that one.
//!
//! The body of `check` is read as a list of top-level statements (a statement runs on over lines inside
//! brackets, after a backslash, or in a deeper-indented block). A statement that holds `assert` is a
//! test; any other (an import, a helper variable, a docstring) is set-up that every later test repeats,
//! in order. Test `i`'s program is then: what precedes `def check`, `def check(candidate):` with the
//! set-up before test `i` and test `i` alone, what follows `check`, and `check(entry_point)`. A test
//! code without separable asserts is one test: the whole `check`.

/// The pieces of a task's test code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestCases {
    /// The code before `def check(...)`: imports, `METADATA`, helpers.
    prelude: String,
    /// The `def check(...):` line.
    header: String,
    /// The top-level statements of check's body, in order, with whether each is a test.
    statements: Vec<(String, bool)>,
    /// The code after check's body.
    epilogue: String,
}

impl TestCases {
    /// Cuts `test` (which must define `check`); `None` when it has no `def check(` at the start of a line.
    pub fn parse(test: &str) -> Option<TestCases> {
        let lines: Vec<&str> = test.split_inclusive('\n').collect();
        let start = lines.iter().position(|l| l.starts_with("def check("))?;
        let prelude: String = lines[..start].concat();
        let header = lines[start].to_string();
        // The body: every line after the header until a non-blank, non-comment line at column 0 that is
        // not inside an open statement.
        let mut scanner = Scanner::default();
        let mut statements: Vec<(String, bool)> = Vec::new();
        let mut body_indent: Option<usize> = None;
        let mut end = lines.len();
        for (i, line) in lines.iter().enumerate().skip(start + 1) {
            let trimmed = line.trim_start();
            let blank = trimmed.is_empty() || trimmed.starts_with('#');
            let indent = line.len() - trimmed.len();
            if scanner.open() {
                statements.last_mut().expect("an open statement").0.push_str(line);
                scanner.feed(line);
                continue;
            }
            if blank {
                if let Some(last) = statements.last_mut() {
                    last.0.push_str(line);
                }
                continue;
            }
            if indent == 0 {
                end = i;
                break;
            }
            let base = *body_indent.get_or_insert(indent);
            if indent > base && !statements.is_empty() {
                statements.last_mut().expect("checked").0.push_str(line);
            } else {
                statements.push((line.to_string(), false));
            }
            scanner.feed(line);
        }
        let epilogue: String = lines[end..].concat();
        for (text, is_test) in &mut statements {
            *is_test = holds_assert(text);
        }
        Some(TestCases { prelude, header, statements, epilogue })
    }

    /// Tests found (at least 1: a `check` without separable asserts is one test).
    pub fn len(&self) -> usize {
        self.statements.iter().filter(|(_, t)| *t).count().max(1)
    }

    /// Never true: see [`TestCases::len`].
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The program that runs test `index` on `solution` (the task's code, defining `entry_point`).
    pub fn program(&self, solution: &str, entry_point: &str, index: usize) -> String {
        let mut body = String::new();
        let mut tests_seen = 0;
        let separable = self.statements.iter().any(|(_, t)| *t);
        for (text, is_test) in &self.statements {
            if !separable {
                body.push_str(text);
            } else if *is_test {
                if tests_seen == index {
                    body.push_str(text);
                    break;
                }
                tests_seen += 1;
            } else {
                body.push_str(text);
            }
        }
        if !body.ends_with('\n') {
            body.push('\n');
        }
        format!("{solution}\n{}{}{body}{}\ncheck({entry_point})\n", self.prelude, self.header, self.epilogue)
    }
}

/// `assert` as a keyword, outside strings and comments.
fn holds_assert(code: &str) -> bool {
    let mut scanner = Scanner::default();
    for line in code.split_inclusive('\n') {
        let mut words = String::new();
        for c in line.chars() {
            let in_code = scanner.quote.is_none() && !scanner.comment;
            scanner.step(c);
            let still_code = scanner.quote.is_none() && !scanner.comment;
            words.push(if in_code && still_code && (c.is_alphanumeric() || c == '_') { c } else { ' ' });
        }
        scanner.comment = false;
        if words.split_whitespace().any(|w| w == "assert") {
            return true;
        }
    }
    false
}

/// Tracks brackets, strings (single, triple, escapes) and comments across lines.
#[derive(Default)]
struct Scanner {
    depth: usize,
    /// The open string's quote character and whether it is triple.
    quote: Option<(char, bool)>,
    escaped: bool,
    comment: bool,
    continued: bool,
    /// The last two characters, to see a triple quote.
    recent: [char; 2],
    /// Quotes seen in a row at a triple string's end.
    closing: usize,
}

impl Scanner {
    /// Inside brackets, a triple-quoted string, or after a line-ending backslash.
    fn open(&self) -> bool {
        self.depth > 0 || self.quote.is_some_and(|(_, triple)| triple) || self.continued
    }

    fn feed(&mut self, line: &str) {
        self.continued = false;
        for c in line.chars() {
            self.step(c);
        }
        self.comment = false;
        // A single-quoted string cannot run past its line.
        if self.quote.is_some_and(|(_, triple)| !triple) {
            self.quote = None;
        }
        self.continued = line.trim_end_matches(['\n', '\r']).ends_with('\\') && self.quote.is_none();
    }

    fn step(&mut self, c: char) {
        if self.comment {
            if c == '\n' {
                self.comment = false;
            }
            return;
        }
        match self.quote {
            Some((q, triple)) => {
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == q {
                    if triple {
                        self.closing += 1;
                        if self.closing == 3 {
                            self.quote = None;
                            self.closing = 0;
                        }
                    } else {
                        self.quote = None;
                    }
                } else {
                    self.closing = 0;
                }
                if c != q {
                    self.closing = 0;
                }
            }
            None => match c {
                '#' => self.comment = true,
                '"' | '\'' => {
                    if self.recent == [c, c] {
                        // The third quote of `"""`: the two before opened and closed an empty string.
                        self.quote = Some((c, true));
                        self.closing = 0;
                        self.recent = [' ', ' '];
                        return;
                    }
                    self.quote = Some((c, false));
                }
                '(' | '[' | '{' => self.depth += 1,
                ')' | ']' | '}' => self.depth = self.depth.saturating_sub(1),
                _ => {}
            },
        }
        self.recent = [self.recent[1], c];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: &str = "\n\nMETADATA = {'author': 'x'}\n\n\ndef check(candidate):\n    import math\n    assert candidate([1, 2,\n                      3]) == 6\n    assert candidate([]) == 0, \"empty # not a comment\"\n    xs = [1]\n    for x in xs:\n        assert candidate([x]) == x\n    assert True, '''multi\nline'''\n\n";

    #[test]
    fn each_assert_is_a_test_with_the_set_up_before_it() {
        let cases = TestCases::parse(TEST).unwrap();
        assert_eq!(cases.len(), 4);
        let p0 = cases.program("def f(xs):\n    return sum(xs)\n", "f", 0);
        assert!(p0.contains("import math\n    assert candidate([1, 2,\n                      3]) == 6\n"), "{p0}");
        assert!(!p0.contains("candidate([])"), "{p0}");
        assert!(p0.ends_with("check(f)\n") && p0.contains("METADATA"), "{p0}");
        let p2 = cases.program("", "f", 2);
        assert!(p2.contains("import math") && p2.contains("xs = [1]\n    for x in xs:\n        assert candidate([x]) == x\n"), "{p2}");
        assert!(!p2.contains("candidate([]) == 0") && !p2.contains("candidate([1, 2,"), "{p2}");
        let p3 = cases.program("", "f", 3);
        assert!(p3.contains("'''multi\nline'''"), "{p3}");
    }

    #[test]
    fn asserts_in_strings_and_comments_are_not_tests() {
        let cases = TestCases::parse("def check(candidate):\n    s = 'assert'  # assert\n    assert candidate(s)\n").unwrap();
        assert_eq!(cases.statements.iter().map(|(_, t)| *t).collect::<Vec<_>>(), vec![false, true]);
    }

    #[test]
    fn a_check_without_asserts_is_one_test() {
        let cases = TestCases::parse("def check(candidate):\n    if candidate(1) != 2:\n        raise ValueError\n").unwrap();
        assert_eq!(cases.len(), 1);
        assert!(cases.program("", "f", 0).contains("raise ValueError"));
        assert!(TestCases::parse("x = 1\n").is_none());
    }
}
