//! The tokenizer, from a `tokenizer.json` or rebuilt from a GGUF's own metadata (so a GGUF alone suffices).
//!
//! Both default models use GPT-2 style byte-level BPE (`tokenizer.ggml.model = "gpt2"`); they differ in the
//! pre-tokenizer (`tokenizer.ggml.pre`): SmolLM2 splits digits one by one before the GPT-2 regex, Qwen2 uses
//! its own split regex and NFC. Control and user-defined tokens become added tokens so that `<|im_start|>`
//! and friends are never split.

use crate::error::{PolicyError, Result};
use crate::model::gguf::GgufFile;
use std::path::Path;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// Qwen2's pre-tokenizer regex (from its `tokenizer.json`).
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A tokenizer plus the ids that end a turn.
#[derive(Clone)]
pub struct PolicyTokenizer {
    /// The Hugging Face tokenizer doing the encoding and decoding.
    pub inner: Tokenizer,
    /// Tokens that end generation (the model's eos, `<|im_end|>`, `<|endoftext|>` when present).
    pub eos_ids: Vec<u32>,
    /// The model's beginning-of-sequence token text, handed to the chat template.
    pub bos_token: Option<String>,
    /// The model's end-of-sequence token text, handed to the chat template.
    pub eos_token: Option<String>,
}

fn tok_err(e: impl std::fmt::Display) -> PolicyError {
    PolicyError::Tokenizer(e.to_string())
}

impl PolicyTokenizer {
    /// Loads a Hugging Face `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<PolicyTokenizer> {
        let inner = Tokenizer::from_file(path).map_err(|e| PolicyError::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Self::finish(inner, None, None))
    }

    fn finish(inner: Tokenizer, eos: Option<String>, bos: Option<String>) -> PolicyTokenizer {
        let mut eos_ids = Vec::new();
        for name in eos.iter().map(String::as_str).chain(["<|im_end|>", "<|endoftext|>", "<|eot_id|>"]) {
            if let Some(id) = inner.token_to_id(name) {
                if !eos_ids.contains(&id) {
                    eos_ids.push(id);
                }
            }
        }
        PolicyTokenizer { inner, eos_ids, bos_token: bos, eos_token: eos }
    }

    /// Rebuilds the tokenizer from GGUF metadata (`tokenizer.ggml.*`).
    pub fn from_gguf(g: &GgufFile) -> Result<PolicyTokenizer> {
        let model = g.meta_str("tokenizer.ggml.model").unwrap_or_default();
        if model != "gpt2" {
            return Err(PolicyError::Tokenizer(format!("{}: tokenizer model `{model}` is not supported (only byte-level BPE, `gpt2`)", g.path.display())));
        }
        let tokens = g.meta_strings("tokenizer.ggml.tokens")?;
        let merges = g.meta_strings("tokenizer.ggml.merges")?;
        let types = g.meta_ints("tokenizer.ggml.token_type").unwrap_or_default();
        let pre = g.meta_str("tokenizer.ggml.pre").unwrap_or_else(|| "gpt2".into());
        let vocab: tokenizers::models::bpe::Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let merges: Vec<(String, String)> = merges.iter().filter_map(|m| m.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string()))).collect();
        let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().map_err(tok_err)?;
        let mut tk = Tokenizer::new(bpe);
        let byte_level = ByteLevel::new(false, false, true);
        let pre_tok: PreTokenizerWrapper = match pre.as_str() {
            "qwen2" | "qwen35" => {
                tk.with_normalizer(Some(NFC));
                let split = Split::new(SplitPattern::Regex(QWEN2_PATTERN.into()), SplitDelimiterBehavior::Isolated, false).map_err(tok_err)?;
                Sequence::new(vec![split.into(), ByteLevel::new(false, false, false).into()]).into()
            }
            "smollm" => Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into(),
            _ => byte_level.into(),
        };
        tk.with_pre_tokenizer(Some(pre_tok));
        tk.with_decoder(Some(ByteLevelDecoder::default()));
        // GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
        let mut special = Vec::new();
        let mut user = Vec::new();
        for (i, t) in types.iter().enumerate() {
            match t {
                3 => special.push(AddedToken::from(tokens[i].clone(), true)),
                4 => user.push(AddedToken::from(tokens[i].clone(), false)),
                _ => {}
            }
        }
        tk.add_special_tokens(&special);
        tk.add_tokens(&user);
        let name = |key: &str| g.meta_u32(key).and_then(|id| tokens.get(id as usize).cloned());
        Ok(Self::finish(tk, name("tokenizer.ggml.eos_token_id"), name("tokenizer.ggml.bos_token_id")))
    }

    /// Token ids of `text`; special tokens written in the text (`<|im_start|>`) are recognised.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.inner.encode(text, false).map_err(tok_err)?.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens included (the caller decides what to strip).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(tok_err)
    }

    /// Number of distinct ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token string.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

impl PolicyTokenizer {
    /// A byte-level BPE with the 256 byte tokens, no merges, and the given special tokens after them
    /// (tiny test models use it).
    pub fn bytes_only(specials: &[&str]) -> Result<PolicyTokenizer> {
        let bytes = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet();
        let mut chars: Vec<char> = bytes.into_iter().collect();
        chars.sort();
        let vocab: tokenizers::models::bpe::Vocab = chars.iter().enumerate().map(|(i, c)| (c.to_string(), i as u32)).collect();
        let bpe = BPE::builder().vocab_and_merges(vocab, vec![]).build().map_err(tok_err)?;
        let mut tk = Tokenizer::new(bpe);
        tk.with_pre_tokenizer(Some(ByteLevel::new(false, false, true)));
        tk.with_decoder(Some(ByteLevelDecoder::default()));
        let sp: Vec<AddedToken> = specials.iter().map(|s| AddedToken::from(s.to_string(), true)).collect();
        tk.add_special_tokens(&sp);
        Ok(Self::finish(tk, specials.get(1).map(|s| s.to_string()), None))
    }
}
