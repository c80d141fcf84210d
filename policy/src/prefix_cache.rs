//! Keys and values computed once, reused by every sequence that starts with the same tokens.
//!
//! The rollouts of a step all begin with the same system prompt and demonstration, the G rollouts of a
//! question with the same question too, and each later turn of an episode with everything the episode has
//! said so far. [`crate::ContinuousBatch`] looks every prompt up here, prefills only what follows the longest
//! cached prefix, and stores each finished sequence's keys and values for the episode's next turn. Nothing is
//! copied either way: an entry holds the segments the sequence read and wrote ([`SharedKv`]), and a sequence
//! that starts from an entry reads those segments in place.
//!
//! An entry serves any prompt that shares a prefix with it, not only prompts that extend all of it (the keys
//! and values at position i depend on tokens 0..=i alone), so no tree is needed: an entry whose tokens are a
//! prefix of a newer entry's serves nothing the newer one does not, and is dropped when that one is stored.
//! Past `max_bytes` the least recently used entries go.
//!
//! Keys and values depend on the adapters' weights: a cache must not outlive an update (the trainer makes
//! one per sampling pass, inside the rollout policy).

use crate::model::kv_cache::first_positions;
use crate::model::SharedKv;
use serde::{Deserialize, Serialize};

/// Where a sampling pass's prompt tokens came from, and how many tokens it sampled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    /// Prompt tokens run through the model.
    pub prefilled: usize,
    /// Prompt tokens whose keys and values came from a shared prefix instead: a cached entry, or another row
    /// of the same batch with the same prompt. `prefilled + reused` is every row's prompt length summed.
    pub reused: usize,
    /// Tokens sampled.
    pub sampled: usize,
    /// Forward passes of the batch (each reads every live sequence's next tokens).
    #[serde(default)]
    pub steps: usize,
    /// Microseconds those forward passes took (the rest of sampling: picking tokens, stop strings).
    #[serde(default)]
    pub forward_us: u64,
}

impl TokenCounts {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: TokenCounts) {
        self.prefilled += other.prefilled;
        self.reused += other.reused;
        self.sampled += other.sampled;
        self.steps += other.steps;
        self.forward_us += other.forward_us;
    }
}

struct Entry {
    ids: Vec<u32>,
    /// The keys and values of `ids`, segment after segment (shared with the sequences that made them and
    /// with other entries: nothing is copied in or out).
    segments: Vec<SharedKv>,
    bytes: usize,
    last_used: u64,
}

/// A bounded set of computed prefixes (see the module's page).
pub struct PrefixCache {
    entries: Vec<Entry>,
    max_bytes: usize,
    clock: u64,
    counts: TokenCounts,
}

/// The default bound: room for the live episodes of a default training step many times over.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 2 << 30;

/// A cached prefix of a prompt: which entry, and how many of its leading tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrefixMatch {
    pub entry: usize,
    pub len: usize,
}

/// How many leading tokens `a` and `b` share.
pub(crate) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    /// An empty cache holding at most `max_bytes` of keys and values.
    pub fn new(max_bytes: usize) -> PrefixCache {
        PrefixCache { entries: Vec::new(), max_bytes, clock: 0, counts: TokenCounts::default() }
    }

    /// What the sampling passes that used this cache prefilled, reused and sampled, in all.
    pub fn counts(&self) -> TokenCounts {
        self.counts
    }

    pub(crate) fn count(&mut self, c: TokenCounts) {
        self.counts.add(c);
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    /// The longest cached prefix of `prompt[..at_most]`, if any token of it is cached.
    pub(crate) fn longest(&mut self, prompt: &[u32], at_most: usize) -> Option<PrefixMatch> {
        let want = &prompt[..at_most.min(prompt.len())];
        let best = self.entries.iter().enumerate().map(|(i, e)| PrefixMatch { entry: i, len: common_prefix(&e.ids, want) }).max_by_key(|m| m.len)?;
        if best.len == 0 {
            return None;
        }
        self.clock += 1;
        self.entries[best.entry].last_used = self.clock;
        Some(best)
    }

    /// The keys and values of the first `m.len` tokens of entry `m.entry`, as the segments a sequence
    /// reads in place (the entry may be dropped from the cache while a sequence still reads them).
    pub(crate) fn segments(&self, m: PrefixMatch) -> candle_core::Result<Vec<SharedKv>> {
        first_positions(&self.entries[m.entry].segments, m.len)
    }

    /// Stores the keys and values of `ids` (segments covering exactly `ids.len()` positions), dropping the
    /// entries it makes redundant, then the oldest while over the bound. Segments shared by several
    /// entries count in each: the bound is conservative.
    pub(crate) fn insert(&mut self, ids: Vec<u32>, segments: Vec<SharedKv>) -> candle_core::Result<()> {
        let held: usize = segments.iter().map(SharedKv::len).sum();
        if held != ids.len() {
            candle_core::bail!("a prefix of {} tokens stored with keys and values of {held} positions", ids.len());
        }
        if ids.is_empty() || self.entries.iter().any(|e| e.ids.starts_with(&ids)) {
            return Ok(());
        }
        self.entries.retain(|e| !ids.starts_with(&e.ids));
        let bytes = segments.iter().map(SharedKv::bytes).sum();
        self.clock += 1;
        self.entries.push(Entry { ids, segments, bytes, last_used: self.clock });
        while self.bytes() > self.max_bytes && !self.entries.is_empty() {
            let oldest = self.entries.iter().enumerate().min_by_key(|(_, e)| e.last_used).map(|(i, _)| i).expect("not empty");
            self.entries.swap_remove(oldest);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    fn kv(n: usize) -> Vec<SharedKv> {
        let t = Tensor::zeros((1, 1, n, 2), candle_core::DType::F32, &Device::Cpu).unwrap();
        vec![SharedKv::new(vec![(t.clone(), t)]).unwrap()]
    }

    #[test]
    fn the_longest_shared_prefix_wins_and_a_prefix_of_a_newer_entry_is_dropped() {
        let mut c = PrefixCache::new(1 << 20);
        c.insert(vec![1, 2, 3], kv(3)).unwrap();
        c.insert(vec![1, 2, 9, 9], kv(4)).unwrap();
        assert_eq!(c.longest(&[1, 2, 9, 5], 4).map(|m| m.len), Some(3));
        assert_eq!(c.longest(&[1, 2, 3, 4], 4).map(|m| m.len), Some(3));
        assert_eq!(c.longest(&[1, 2, 3, 4], 2).map(|m| m.len), Some(2), "capped");
        assert_eq!(c.longest(&[7], 1), None);
        c.insert(vec![1, 2, 3, 4, 5], kv(5)).unwrap();
        assert_eq!(c.len(), 2, "[1,2,3] is a prefix of the new entry");
        c.insert(vec![1, 2], kv(2)).unwrap();
        assert_eq!(c.len(), 2, "[1,2] is already served");
    }

    #[test]
    fn past_the_bound_the_least_recently_used_go() {
        let one = 3 * 2 * 2 * 4; // an entry of 3 tokens: keys and values, 2 floats a token
        let mut c = PrefixCache::new(2 * one);
        c.insert(vec![1, 1, 1], kv(3)).unwrap();
        c.insert(vec![2, 2, 2], kv(3)).unwrap();
        c.longest(&[1, 1, 1], 3).unwrap();
        c.insert(vec![3, 3, 3], kv(3)).unwrap();
        assert_eq!(c.len(), 2);
        assert!(c.longest(&[2, 2, 2], 3).is_none(), "the least recently used entry went");
        assert_eq!(c.longest(&[1, 1, 1], 3).map(|m| m.len), Some(3));
    }

    #[test]
    fn keys_of_the_wrong_length_are_refused() {
        let mut c = PrefixCache::new(1 << 20);
        assert!(c.insert(vec![1, 2], kv(3)).is_err());
    }
}
