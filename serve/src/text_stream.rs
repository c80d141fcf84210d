//! A choice's text as its tokens arrive. Decoding a growing id list and sending only what is new would
//! send half a UTF-8 character (the tokenizer decodes a byte-level piece as U+FFFD until the character is
//! whole) and would send the start of a stop string that the final text leaves out. `TextStream` holds back
//! both, so that the streamed deltas always concatenate to [`final_text`].

use agentrt_policy::{FinishReason, PolicyTokenizer};

/// The reply's text as the client gets it: the sampler's text, cut at the stop string that ended it (kept
/// when `include_stop`, as vLLM's `include_stop_str_in_output`).
pub fn final_text(text: &str, reason: &FinishReason, include_stop: bool) -> String {
    match reason {
        FinishReason::Stop(s) => match text.find(s.as_str()) {
            Some(at) if include_stop => text[..at + s.len()].to_string(),
            Some(at) => text[..at].to_string(),
            None => text.to_string(),
        },
        _ => text.to_string(),
    }
}

/// The text of one choice, sent piece by piece.
pub struct TextStream {
    ids: Vec<u32>,
    sent: String,
    stops: Vec<String>,
    include_stop: bool,
}

impl TextStream {
    /// A new stream that cuts the text at the first of `stops` (kept when `include_stop`).
    pub fn new(stops: Vec<String>, include_stop: bool) -> TextStream {
        TextStream { ids: Vec::new(), sent: String::new(), stops, include_stop }
    }

    /// Takes the next sampled id; returns the text that can be sent now (often empty).
    pub fn push(&mut self, id: u32, tokenizer: &PolicyTokenizer) -> String {
        if tokenizer.eos_ids.contains(&id) {
            return String::new();
        }
        self.ids.push(id);
        let Ok(text) = tokenizer.decode(&self.ids) else { return String::new() };
        let matched = self.stops.iter().filter_map(|s| text.find(s.as_str()).map(|at| (at, s))).min();
        let safe = match matched {
            Some((at, s)) => &text[..if self.include_stop { at + s.len() } else { at }],
            None => {
                let mut end = text.len();
                if text.ends_with('\u{FFFD}') {
                    end -= '\u{FFFD}'.len_utf8();
                }
                let hold = self.held_back(&text[..end]);
                &text[..end - hold]
            }
        };
        self.advance(safe)
    }

    /// The rest of the text once the choice has ended, given its final text.
    pub fn finish(&mut self, final_text: &str) -> String {
        self.advance(final_text)
    }

    /// Everything sent so far.
    pub fn sent(&self) -> &str {
        &self.sent
    }

    /// Bytes at the end of `text` that are the start of some stop string, and so may not be sent yet.
    fn held_back(&self, text: &str) -> usize {
        let mut hold = 0;
        for s in &self.stops {
            for (at, _) in text.char_indices() {
                let tail = &text[at..];
                if tail.len() > hold && s.starts_with(tail) {
                    hold = tail.len();
                    break;
                }
            }
        }
        hold
    }

    fn advance(&mut self, safe: &str) -> String {
        // The decoded text can change behind what was sent only if a tokenizer rewrote earlier characters;
        // then nothing more is sent until it agrees again (never a retraction).
        if safe.len() > self.sent.len() && safe.starts_with(self.sent.as_str()) {
            let delta = safe[self.sent.len()..].to_string();
            self.sent = safe.to_string();
            delta
        } else {
            String::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_tokenizer() -> PolicyTokenizer {
        PolicyTokenizer::bytes_only(&["<|im_end|>"]).unwrap()
    }

    fn stream_all(text: &str, stops: &[&str], include: bool) -> (String, String) {
        let tok = bytes_tokenizer();
        let ids = tok.encode(text).unwrap();
        let mut s = TextStream::new(stops.iter().map(|s| s.to_string()).collect(), include);
        let mut streamed = String::new();
        let mut reason = FinishReason::Length;
        for (i, &id) in ids.iter().enumerate() {
            streamed.push_str(&s.push(id, &tok));
            let so_far = tok.decode(&ids[..=i]).unwrap();
            if let Some(stop) = stops.iter().find(|st| so_far.contains(**st)) {
                reason = FinishReason::Stop(stop.to_string());
                break;
            }
        }
        let full = final_text(&tok.decode(&ids).unwrap(), &reason, include);
        streamed.push_str(&s.finish(&full));
        (streamed, full)
    }

    #[test]
    fn streamed_pieces_add_up_to_the_final_text_with_and_without_the_stop_string() {
        for include in [false, true] {
            let (streamed, full) = stream_all("print(1)</tool> and more", &["</tool>"], include);
            assert_eq!(streamed, full);
            assert_eq!(full, if include { "print(1)</tool>" } else { "print(1)" });
        }
    }

    #[test]
    fn a_partial_stop_string_is_held_until_it_is_known_not_to_be_one() {
        let tok = bytes_tokenizer();
        let mut s = TextStream::new(vec!["</tool>".into()], false);
        let mut out = String::new();
        for id in tok.encode("a</to").unwrap() {
            out.push_str(&s.push(id, &tok));
        }
        assert_eq!(out, "a");
        for id in tok.encode("x").unwrap() {
            out.push_str(&s.push(id, &tok));
        }
        assert_eq!(out, "a</tox");
    }

    #[test]
    fn a_multibyte_character_is_sent_whole() {
        let tok = bytes_tokenizer();
        let mut s = TextStream::new(vec![], false);
        let ids = tok.encode("é").unwrap();
        assert_eq!(ids.len(), 2, "the byte tokenizer splits é into two bytes");
        assert_eq!(s.push(ids[0], &tok), "");
        assert_eq!(s.push(ids[1], &tok), "é");
        assert_eq!(s.sent(), "é");
    }
}
