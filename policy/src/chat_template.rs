//! Chat templates: the model's own Jinja template (from the GGUF's `tokenizer.chat_template` or a HF
//! `tokenizer_config.json`) rendered with minijinja, as transformers renders it (`trim_blocks`,
//! `lstrip_blocks`, Python string methods). Rendering the model's own template, rather than a hand-written
//! ChatML formatter, keeps each model's quirks (SmolLM2's default system prompt, Qwen's tool syntax) exact.
//! A ChatML template is the fallback for models that ship none.

use crate::error::{PolicyError, Result};
use serde::{Deserialize, Serialize};

/// ChatML, used when a model carries no template.
pub const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks: `system`, `user`, `assistant` (or a role the template knows, such as `tool`).
    pub role: String,
    /// The message text, rendered verbatim into the template.
    pub content: String,
}

impl Message {
    /// A message with the given role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message { role: role.into(), content: content.into() }
    }
    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Message {
        Message::new("system", content)
    }
    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Message {
        Message::new("user", content)
    }
    /// An `assistant` message.
    pub fn assistant(content: impl Into<String>) -> Message {
        Message::new("assistant", content)
    }
}

/// A model's chat template.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    /// The Jinja source, kept so merge-and-export can write it back to `tokenizer_config.json`.
    pub source: String,
    /// The text the template sees as `bos_token` (empty when the model names none).
    pub bos_token: String,
    /// The text the template sees as `eos_token` (empty when the model names none).
    pub eos_token: String,
}

impl ChatTemplate {
    /// A template from Jinja source; it is parsed now so that a broken template fails at load time.
    pub fn new(source: impl Into<String>, bos_token: Option<String>, eos_token: Option<String>) -> Result<ChatTemplate> {
        let t = ChatTemplate { source: source.into(), bos_token: bos_token.unwrap_or_default(), eos_token: eos_token.unwrap_or_default() };
        t.render(&[Message::user("x")], true)?;
        Ok(t)
    }

    /// The prompt text for `messages`; with `add_generation_prompt` it ends where the assistant begins.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        let tmpl = env.template_from_str(&self.source).map_err(|e| PolicyError::ChatTemplate(e.to_string()))?;
        tmpl.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| PolicyError::ChatTemplate(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_fallback_renders_turns_and_generation_prompt() {
        let t = ChatTemplate::new(CHATML, None, None).unwrap();
        let s = t.render(&[Message::system("S"), Message::user("hi")], true).unwrap();
        assert_eq!(s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    }

    #[test]
    fn python_methods_and_trim_blocks_work() {
        let src = "{% for m in messages %}\n{{ m.content.strip() }}|{% endfor %}";
        let t = ChatTemplate::new(src, None, None).unwrap();
        assert_eq!(t.render(&[Message::user("  a "), Message::user("b")], false).unwrap(), "a|b|");
    }
}
