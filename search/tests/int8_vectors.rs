//! The int8 encoder's vectors against candle's f32 BERT (the reference implementation), on
//! the real all-MiniLM-L6-v2 weights and real questions from the bundled data.

use agentrt_search::{Embedder, QueryEncoder};
use std::path::Path;

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>()
}

#[test]
fn int8_query_vectors_point_where_the_f32_vectors_do() {
    let embedder = Embedder::minilm().expect("all-MiniLM-L6-v2");
    let questions = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/wiki/questions.jsonl");
    let mut texts: Vec<String> = agentrt_search::read_questions(&questions, Some("dev")).expect("questions").into_iter().take(60).map(|q| q.question).collect();
    texts.extend(["Paris", "a", "Ünïcödé, emoji 🦀 and punctuation?!", &"long query ".repeat(120)].map(String::from));
    let mut worst = (1.0f32, String::new());
    let mut total = 0.0;
    for text in &texts {
        let fast = embedder.embed_one(text).unwrap();
        let exact = embedder.embed_one_f32(text).unwrap();
        assert_eq!(fast.len(), exact.len());
        let norm = cosine(&fast, &fast).sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{text:?}: norm {norm}");
        let c = cosine(&fast, &exact);
        total += c;
        if c < worst.0 {
            worst = (c, text.clone());
        }
    }
    let mean = total / texts.len() as f32;
    eprintln!("cosine int8 vs f32 over {} texts: mean {mean:.5}, worst {:.5} ({:?})", texts.len(), worst.0, worst.1);
    // The full encoder is the sections': its weights are quantised to ±32 (`SECTION_WEIGHTS`), which
    // measured mean 0.9931, worst 0.9804 ("a") here (at ±64: 0.9966 and 0.9920), with train and dev
    // recall unchanged (bench/search_results.md).
    assert!(worst.0 >= 0.975, "worst cosine {:.5} for {:?}", worst.0, worst.1);
    assert!(mean >= 0.99, "mean cosine {mean:.5}");
}

/// The whole encoder (int8 layers, and the f32 loops between them compiled once per path) gives the same
/// vector, bit for bit, on every kernel path this CPU runs: the integer sums are exact everywhere and
/// the f32 loops fuse a multiply into an add only through `mul_add`, which rounds once on every path.
#[test]
fn every_kernel_path_gives_the_same_vector() {
    let embedder = Embedder::minilm().expect("all-MiniLM-L6-v2");
    let paths = agentrt_kernels::KernelPath::supported();
    eprintln!("{}; comparing {paths:?}", agentrt_kernels::describe());
    for text in ["Who wrote the novel Nineteen Eighty-Four?", "a", &"a long section of text ".repeat(30)] {
        let reference = embedder.embed_one_on(agentrt_kernels::KernelPath::Generic, text).unwrap();
        for &path in &paths {
            assert_eq!(embedder.embed_one_on(path, text).unwrap(), reference, "{path} on {text:?}");
        }
    }
}

/// The index embeds several sections in one pass (`Int8Bert::encode_together`: their word pieces are
/// rows of the same products); each still gets the bits it gets alone, whatever shares its pass.
#[test]
fn sections_embedded_together_get_the_vectors_they_get_alone() {
    let embedder = Embedder::minilm().expect("all-MiniLM-L6-v2");
    let texts: Vec<String> =
        ["Paris\nThe capital of France.", "a", &"a long section of text ".repeat(40), "Rust: History\nGraydon Hoare began it in 2006.", "x y"]
            .map(String::from)
            .to_vec();
    let together = embedder.embed_many(&texts, 3, &mut |_| ()).unwrap();
    assert_eq!(together.len(), texts.len());
    for (text, vector) in texts.iter().zip(&together) {
        assert_eq!(vector, &embedder.embed_one(text).unwrap(), "{text:?}");
    }
}

/// The distilled query encoder (the default for queries) puts a question near where the full model
/// puts it: the sections were embedded by the full model, so this is what its recall rests on. Measured
/// when it was made: mean cosine 0.887 over the 952 dev questions, 5th percentile 0.818.
#[test]
fn distilled_query_vectors_point_near_the_full_models() {
    let embedder = Embedder::minilm().expect("all-MiniLM-L6-v2");
    assert_eq!(embedder.query_encoder(), QueryEncoder::Distilled);
    let full = Embedder::minilm_with(QueryEncoder::Full).expect("all-MiniLM-L6-v2");
    assert_eq!(full.query_encoder(), QueryEncoder::Full);
    let questions = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/wiki/questions.jsonl");
    let texts: Vec<String> = agentrt_search::read_questions(&questions, Some("dev")).expect("questions").into_iter().take(100).map(|q| q.question).collect();
    let mut cosines = Vec::new();
    for text in &texts {
        let distilled = embedder.embed_query(text).unwrap();
        assert_eq!(full.embed_query(text).unwrap(), embedder.embed_one(text).unwrap(), "the full query encoder is the sections' encoder");
        let norm = cosine(&distilled, &distilled).sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{text:?}: norm {norm}");
        cosines.push(cosine(&distilled, &embedder.embed_one(text).unwrap()));
    }
    cosines.sort_by(f32::total_cmp);
    let mean = cosines.iter().sum::<f32>() / cosines.len() as f32;
    eprintln!("cosine distilled vs full over {} dev questions: mean {mean:.4}, worst {:.4}, 5th percentile {:.4}", texts.len(), cosines[0], cosines[5]);
    assert!(mean >= 0.86, "mean cosine {mean:.4}");
    assert!(cosines[5] >= 0.78, "5th percentile cosine {:.4}", cosines[5]);
}
