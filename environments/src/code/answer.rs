//! The code in a reply, and the program a test runs it in.

use crate::code::tasks::CodeTask;

/// Finds the code of a reply. Plain format: the first fenced block (```` ```python ```` or ```` ``` ````;
/// an unclosed one runs to the end), else the inside of `<answer>`, else the whole reply when it defines
/// something. Reasoning format: the reply must be `<reasoning>…</reasoning>` then `<answer>…</answer>`
/// (the closing tag may be cut by a stop string), and the code is read from inside the answer. `Err`
/// says what the reply lacks.
pub fn extract_code(reply: &str, reasoning_format: bool) -> Result<String, String> {
    if reasoning_format {
        let r_open = reply.find("<reasoning>").ok_or("no <reasoning> block")?;
        let r_close = reply[r_open..].find("</reasoning>").map(|i| r_open + i).ok_or("<reasoning> is not closed")?;
        let after = &reply[r_close + "</reasoning>".len()..];
        let a_open = after.find("<answer>").ok_or("no <answer> after </reasoning>")?;
        let inside = &after[a_open + "<answer>".len()..];
        let inside = inside.find("</answer>").map_or(inside, |end| &inside[..end]);
        let code = fenced(inside).unwrap_or(inside);
        return nonempty(code);
    }
    if let Some(code) = fenced(reply) {
        return nonempty(code);
    }
    if let Some(open) = reply.find("<answer>") {
        let inside = &reply[open + "<answer>".len()..];
        return nonempty(inside.find("</answer>").map_or(inside, |end| &inside[..end]));
    }
    if reply.contains("def ") || reply.contains("return ") {
        return nonempty(reply);
    }
    Err("no code block in the reply".into())
}

fn nonempty(code: &str) -> Result<String, String> {
    if code.trim().is_empty() {
        Err("the code block is empty".into())
    } else {
        Ok(code.trim_matches('\n').to_string())
    }
}

/// The inside of the first fenced block.
fn fenced(text: &str) -> Option<&str> {
    let open = text.find("```")?;
    let rest = &text[open + 3..];
    let body_start = rest.find('\n').map_or(rest.len(), |i| i + 1);
    let body = &rest[body_start..];
    Some(body.find("```").map_or(body, |end| &body[..end]))
}

/// The task's solution from the model's code: the prompt (its imports, helpers and the signature with
/// only its docstring, a valid function) then the model's code, which redefines the entry point when it
/// holds the whole function; code without `def entry_point` is taken as the body and indented under the
/// prompt's signature.
pub fn solution(task: &CodeTask, code: &str) -> String {
    if code.contains(&format!("def {}(", task.entry_point)) {
        return format!("{}\n{}\n", task.prompt, code);
    }
    let indented = code.lines().all(|l| l.trim().is_empty() || l.starts_with(' ') || l.starts_with('\t'));
    let body = if indented {
        code.to_string()
    } else {
        code.lines().map(|l| if l.trim().is_empty() { String::new() } else { format!("    {l}") }).collect::<Vec<_>>().join("\n")
    };
    format!("{}{}\n", task.prompt, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_comes_from_the_first_fence_or_the_answer() {
        assert_eq!(extract_code("Here:\n```python\ndef f():\n    return 1\n```\nDone.", false).unwrap(), "def f():\n    return 1");
        assert_eq!(extract_code("```python\ndef f():\n    return 1\n", false).unwrap(), "def f():\n    return 1");
        assert_eq!(extract_code("<answer>\ndef f(): return 2\n</answer>", false).unwrap(), "def f(): return 2");
        assert!(extract_code("I don't know.", false).is_err());
    }

    #[test]
    fn the_reasoning_format_is_checked() {
        let good = "<reasoning>sum them</reasoning>\n<answer>\n```python\ndef f(xs):\n    return sum(xs)\n```\n</answer>";
        assert_eq!(extract_code(good, true).unwrap(), "def f(xs):\n    return sum(xs)");
        assert_eq!(extract_code("<reasoning>r</reasoning><answer>def f(): return 1", true).unwrap(), "def f(): return 1");
        assert_eq!(extract_code("```python\ndef f(): return 1\n```", true).unwrap_err(), "no <reasoning> block");
        assert_eq!(extract_code("<answer>def f(): return 1</answer><reasoning>r</reasoning>", true).unwrap_err(), "no <answer> after </reasoning>");
    }

    #[test]
    fn a_body_goes_under_the_signature() {
        let task = CodeTask {
            id: "t/0".into(),
            prompt: "def f(x):\n    \"\"\"Double.\"\"\"\n".into(),
            test: String::new(),
            entry_point: "f".into(),
            canonical_solution: None,
            split: "train".into(),
        };
        assert_eq!(solution(&task, "return 2 * x"), "def f(x):\n    \"\"\"Double.\"\"\"\n    return 2 * x\n");
        assert!(solution(&task, "def f(x):\n    return x + x").ends_with("\ndef f(x):\n    return x + x\n"));
    }
}
