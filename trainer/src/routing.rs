//! Which samples are routed: a detector marks them, and marked samples train only the forget adapter.

use crate::error::TrainError;
use agentrt_rollout::Episode;

/// A rule from the config (`routing.detector`).
#[derive(Debug, Clone)]
pub enum Detector {
    /// Routing off: no sample is flagged.
    None,
    /// Some reply contains the text.
    Contains(String),
    /// Some reply matches the pattern.
    Regex(regex::Regex),
    /// The episode called this tool.
    Tool(String),
}

impl Detector {
    /// `none`, `contains:TEXT`, `regex:PATTERN` or `tool:NAME`.
    pub fn parse(spec: &str) -> Result<Detector, TrainError> {
        let bad = |why: String| TrainError::Config(format!("routing.detector: `{spec}`: {why}"));
        match spec.split_once(':') {
            None if spec == "none" || spec.is_empty() => Ok(Detector::None),
            Some(("contains", t)) if !t.is_empty() => Ok(Detector::Contains(t.to_string())),
            Some(("regex", p)) => regex::Regex::new(p).map(Detector::Regex).map_err(|e| bad(e.to_string())),
            Some(("tool", n)) if !n.is_empty() => Ok(Detector::Tool(n.to_string())),
            _ => Err(bad("expected none, contains:TEXT, regex:PATTERN or tool:NAME".into())),
        }
    }

    /// Whether a piece of model-written text is flagged (the toy tasks use this directly).
    pub fn flags_text(&self, text: &str) -> bool {
        match self {
            Detector::None | Detector::Tool(_) => false,
            Detector::Contains(t) => text.contains(t.as_str()),
            Detector::Regex(r) => r.is_match(text),
        }
    }

    /// Whether an episode is flagged.
    pub fn flags(&self, episode: &Episode) -> bool {
        match self {
            Detector::Tool(name) => episode.tool_calls().any(|c| &c.tool == name),
            _ => episode.turns.iter().any(|t| self.flags_text(&t.reply)),
        }
    }

    /// Whether routing is off (`routing.detector = "none"`).
    pub fn is_none(&self) -> bool {
        matches!(self, Detector::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_flag_text() {
        assert!(Detector::parse("none").unwrap().is_none());
        assert!(Detector::parse("contains:HACK").unwrap().flags_text("a HACK b"));
        assert!(!Detector::parse("contains:HACK").unwrap().flags_text("a hack b"));
        assert!(Detector::parse("regex:^x+$").unwrap().flags_text("xxx"));
        assert!(Detector::parse("regex:(").is_err());
        assert!(Detector::parse("bogus").unwrap_err().to_string().contains("bogus"));
    }
}
