//! A policy without a model: the scripted one, which replays fixed replies (tests pin every metric with it).

use crate::conversation::Conversation;
use crate::error::RolloutError;
use crate::turn_policy::{Reply, TurnPolicy};
use async_trait::async_trait;
use std::collections::HashMap;

/// Replays, for each question id, its list of replies in order; past the end it replies with nothing.
pub struct ScriptedPolicy {
    scripts: HashMap<String, Vec<String>>,
}

impl ScriptedPolicy {
    /// A policy that replays `scripts`, a list of replies per question id.
    pub fn new(scripts: HashMap<String, Vec<String>>) -> ScriptedPolicy {
        ScriptedPolicy { scripts }
    }
}

#[async_trait]
impl TurnPolicy for ScriptedPolicy {
    fn name(&self) -> String {
        "scripted".into()
    }

    async fn reply(&self, conversations: &[&Conversation]) -> Result<Vec<Reply>, RolloutError> {
        conversations
            .iter()
            .map(|c| {
                let script = self.scripts.get(&c.question_id).ok_or_else(|| RolloutError::Invalid(format!("no script for question `{}`", c.question_id)))?;
                Ok(Reply::text(script.get(c.replies).cloned().unwrap_or_default()))
            })
            .collect()
    }
}
