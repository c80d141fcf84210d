//! Which encoder embeds a query. Sections are embedded once, at index time, by the full six-layer
//! all-MiniLM-L6-v2. A query is embedded on every search, and its encoding is most of the search's
//! latency. So by default a query goes through a distilled encoder of half the depth, trained to put
//! a query where the full model puts it: it costs half the multiply-adds.
//!
//! The distilled encoder is `models/minilm-l6-v2-queries-l3` (its README says how it was made and what
//! it costs in recall). It ships inside the binary, as three encoder layers in f16; it shares the full
//! model's tokenizer and embeddings, which are read from the fetched all-MiniLM-L6-v2.

use crate::error::SearchError;
use crate::int8_bert::{Int8Bert, WordRows};
use agentrt_kernels::int8::WeightReach;
use candle_core::Tensor;
use std::collections::HashMap;

/// The encoder that embeds queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryEncoder {
    /// The three-layer encoder distilled from all-MiniLM-L6-v2 for queries (the default).
    #[default]
    Distilled,
    /// The six-layer all-MiniLM-L6-v2 that embedded the sections.
    Full,
}

impl std::str::FromStr for QueryEncoder {
    type Err = SearchError;
    fn from_str(s: &str) -> Result<Self, SearchError> {
        match s {
            "distilled" => Ok(QueryEncoder::Distilled),
            "full" => Ok(QueryEncoder::Full),
            other => Err(SearchError::Embedder(format!("query encoder {other:?}: expected \"distilled\" or \"full\""))),
        }
    }
}

impl std::fmt::Display for QueryEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QueryEncoder::Distilled => "distilled",
            QueryEncoder::Full => "full",
        })
    }
}

/// The distilled encoder's name (its directory under `models/`), as errors give it.
const DISTILLED_NAME: &str = "minilm-l6-v2-queries-l3";
const DISTILLED_CONFIG: &str = include_str!("../../models/minilm-l6-v2-queries-l3/config.json");
const DISTILLED_LAYERS: &[u8] = include_bytes!("../../models/minilm-l6-v2-queries-l3/model.safetensors");

/// The distilled query encoder over all-MiniLM-L6-v2's embeddings: its word table read per token from
/// `words`, the other embedding tensors from `base`.
pub(crate) fn load_distilled(base: &HashMap<String, Tensor>, words: WordRows) -> Result<Int8Bert, SearchError> {
    let origin = format!("{DISTILLED_NAME} (built in)");
    let layers = candle_core::safetensors::load_buffer(DISTILLED_LAYERS, &candle_core::Device::Cpu)
        .map_err(|e| SearchError::Embedder(format!("{origin}: model.safetensors: {e}")))?;
    if layers.keys().any(|k| k.contains("embeddings.")) {
        return Err(SearchError::Embedder(format!("{origin}: carries embeddings; it must share the base model's")));
    }
    let embeddings = base.iter().filter(|(k, _)| k.contains("embeddings.")).map(|(k, t)| (k.clone(), t.clone())).collect();
    // ±64 weights: a query's vector keeps the precision its latency does not need to give up.
    Int8Bert::from_tensors(&origin, DISTILLED_CONFIG, layers, embeddings, Some(words), WeightReach::Narrow)
}

#[cfg(test)]
mod tests {
    use super::QueryEncoder;

    #[test]
    fn names_parse_back_and_a_wrong_one_is_named() {
        for e in [QueryEncoder::Distilled, QueryEncoder::Full] {
            assert_eq!(e.to_string().parse::<QueryEncoder>().unwrap(), e);
        }
        assert_eq!(QueryEncoder::default(), QueryEncoder::Distilled);
        let err = "fast".parse::<QueryEncoder>().unwrap_err().to_string();
        assert!(err.contains("\"fast\"") && err.contains("distilled") && err.contains("full"), "{err}");
    }

    #[test]
    fn word_rows_read_from_the_file_encode_as_the_table_in_memory() {
        use crate::int8_bert::{Int8Bert, Scratch, WordRows};
        let dir = agentrt_assets::fetch(&agentrt_assets::ALL_MINILM_L6_V2).unwrap();
        let path = dir.join("model.safetensors");
        let keep = |n: &str| n.starts_with("embeddings.") && (n.ends_with(".weight") || n.ends_with(".bias"));
        let (rows, small) = WordRows::open(&path, "embeddings.word_embeddings.weight", keep).unwrap();
        assert!(!small.contains_key("embeddings.word_embeddings.weight") && small.contains_key("embeddings.position_embeddings.weight"));
        let on_disk = super::load_distilled(&small, rows).unwrap();
        let all = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
        let embeddings = all.into_iter().filter(|(k, _)| keep(k)).collect();
        let layers = candle_core::safetensors::load_buffer(super::DISTILLED_LAYERS, &candle_core::Device::Cpu).unwrap();
        let in_memory = Int8Bert::from_tensors("test", super::DISTILLED_CONFIG, layers, embeddings, None, agentrt_kernels::int8::WeightReach::Narrow).unwrap();
        for ids in [vec![101u32, 2054, 2003, 1996, 3007, 1997, 2605, 102], vec![101, 30521, 102]] {
            let a = on_disk.encode(&ids, &mut Scratch::default(), false).unwrap();
            let b = in_memory.encode(&ids, &mut Scratch::default(), false).unwrap();
            assert_eq!(a, b, "{ids:?}");
        }
        let err = on_disk.encode(&[101, 30522, 102], &mut Scratch::default(), false).unwrap_err().to_string();
        assert!(err.contains("30522") && err.contains("vocabulary"), "{err}");
        // A file that is no safetensors is named.
        let bad = std::env::temp_dir().join(format!("agentrt-not-safetensors-{}", std::process::id()));
        std::fs::write(&bad, b"\xff\xff\xff\xff\xff\xff\xff\xffjunk").unwrap();
        let err = WordRows::open(&bad, "x", keep).err().unwrap().to_string();
        std::fs::remove_file(&bad).unwrap();
        assert!(err.contains("not a safetensors file") && err.contains("agentrt-not-safetensors"), "{err}");
    }

    #[test]
    fn the_built_in_layers_are_three_and_carry_no_embeddings() {
        let layers = candle_core::safetensors::load_buffer(super::DISTILLED_LAYERS, &candle_core::Device::Cpu).unwrap();
        let mut depth: Vec<usize> = layers.keys().filter_map(|k| k.strip_prefix("encoder.layer.")?.split('.').next()?.parse().ok()).collect();
        depth.sort_unstable();
        depth.dedup();
        assert_eq!(depth, [0, 1, 2]);
        assert!(layers.keys().all(|k| k.starts_with("encoder.layer.")), "{:?}", layers.keys().collect::<Vec<_>>());
        assert!(super::DISTILLED_CONFIG.contains("\"num_hidden_layers\": 3"));
    }
}
