//! End-to-end tests on a small fixture corpus with the real all-MiniLM-L6-v2 model and a real tantivy
//! index: rankings, splitting, round trips of ids, corrupt-index detection, bad input.

// A test crate: its helpers unwrap as its tests do (clippy.toml allows unwrap in tests, not in their helpers).
#![allow(clippy::unwrap_used)]

use agentrt_search::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pages.jsonl")
}

fn opts() -> BuildOptions {
    // Small chunks so that the fixture's long article is cut into several paragraph groups.
    BuildOptions { chunking: ChunkParams { max_chars: 600, title_words: 8 }, ..BuildOptions::default() }
}

fn build(dir: &Path) -> BuildOutcome {
    build_index(&fixture(), dir, &opts(), &mut |_| {}).expect("build")
}

/// One index shared by the read-only tests (building takes a few seconds).
fn shared() -> &'static WikiIndex {
    static DIR: OnceLock<(tempfile::TempDir, WikiIndex)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path());
        let idx = WikiIndex::open(dir.path()).expect("open");
        (dir, idx)
    })
    .1
}

/// Page titles and their pages.
const TITLES: [(&str, &str); 7] = [
    ("Paris", "paris"),
    ("Photosynthesis", "photosynthesis"),
    ("Jupiter", "jupiter"),
    ("Violin", "violin"),
    ("Honey bee", "honey_bee"),
    ("Chess", "chess"),
    ("Amazon rainforest", "amazon_rainforest"),
];

#[test]
fn gold_page_first_for_its_title() {
    let idx = shared();
    for (query, gold) in TITLES {
        for mode in [SearchMode::Bm25, SearchMode::Vector, SearchMode::Hybrid] {
            let hits = idx.search_pages_with(query, 3, mode).unwrap();
            assert_eq!(hits[0].page_id, gold, "{mode:?} {query:?}: {hits:?}");
        }
    }
}

#[test]
fn questions_find_their_page() {
    let idx = shared();
    for (query, gold) in [
        ("Which planet has a Great Red Spot?", "jupiter"),
        ("Who built the most prized string instruments in Cremona?", "violin"),
        ("How do worker bees tell others where flowers are?", "honey_bee"),
        ("What percentage of the rainforest is in Peru?", "amazon_rainforest"),
        ("Who was the first official world champion of the board game?", "chess"),
    ] {
        let hits = idx.search_pages(query, 3).unwrap();
        assert_eq!(hits[0].page_id, gold, "{query:?}: {hits:?}");
        // Every hit names a section of its own page, which reads back.
        for h in &hits {
            assert!(h.section_id.starts_with(&format!("{}:", h.page_id)), "{query:?}: {h:?}");
            idx.read_section(&h.section_id).unwrap();
        }
    }
    // The best section is the passage that matched, not the page's first.
    let hits = idx.search_pages("Who was the first official world champion of the board game?", 1).unwrap();
    assert_eq!(hits[0].section_id, "chess:world-champions", "{hits:?}");
    // Semantic match without shared words: vectors alone should still find it in the top 3.
    let hits = idx.search_pages_with("giant gas world with many moons", 3, SearchMode::Vector).unwrap();
    assert_eq!(hits[0].page_id, "jupiter", "{hits:?}");
}

#[test]
fn passages_are_the_sentences_that_answer() {
    let idx = shared();
    // Within one page: the sentence holding the question's rare words, with its section, first.
    let q = "What percentage of the rainforest is in Peru?";
    let passages = idx.search_passages(q, Some("amazon_rainforest"), 3).unwrap();
    assert!(passages[0].text.contains("followed by Peru with 13%"), "{passages:?}");
    assert!(passages[0].text.len() < 300, "one sentence, not the section: {passages:?}");
    assert!(idx.read_section(&passages[0].section_id).unwrap().contains(&passages[0].text));
    assert!(passages.iter().all(|p| p.page_id == "amazon_rainforest") && passages.len() <= 3);
    assert!(passages.windows(2).all(|w| w[0].score >= w[1].score), "{passages:?}");
    // Without a page: pooled over the best pages, the answering sentence still first.
    let q = "Who was the first official world champion of the board game?";
    let passages = idx.search_passages(q, None, 5).unwrap();
    assert_eq!(passages[0].text, "Wilhelm Steinitz was the first official World Chess Champion, in 1886.", "{passages:?}");
    assert_eq!((passages[0].page_id.as_str(), passages[0].section_id.as_str()), ("chess", "chess:world-champions"));
    // Bad input is the same typed error as for the other tools.
    assert!(matches!(idx.search_passages("chess", Some("no_such_page"), 3).unwrap_err(), SearchError::UnknownPage(_)));
    assert!(matches!(idx.search_passages("  ", None, 3).unwrap_err(), SearchError::EmptyQuery));
    // A query of stop words only finds nothing, rather than arbitrary sentences.
    assert!(idx.search_passages("what is the", Some("chess"), 3).unwrap().is_empty());
}

#[test]
fn sections_are_split_and_every_id_reads_back() {
    let idx = shared();
    let chess = idx.view_sections("chess").unwrap();
    let ids: Vec<&str> = chess.iter().map(|s| s.section_id.as_str()).collect();
    assert_eq!(ids, ["chess:intro", "chess:rules", "chess:history", "chess:world-champions"]);
    assert_eq!(chess[3].title, "World champions");
    assert!(idx.read_section("chess:world-champions").unwrap().contains("Steinitz"));

    let amazon = idx.view_sections("amazon_rainforest").unwrap();
    assert!(amazon.len() >= 3, "long article cut into paragraph groups: {amazon:?}");
    assert_eq!(amazon[0].section_id, "amazon_rainforest:the-amazon-rainforest-is-a-moist-broadleaf-tropical");
    assert!(amazon[0].title.starts_with("The Amazon rainforest is"));

    let mut total = 0;
    for page in ["paris", "photosynthesis", "jupiter", "violin", "honey_bee", "chess", "amazon_rainforest"] {
        for s in idx.view_sections(page).unwrap() {
            let text = idx.read_section(&s.section_id).unwrap();
            assert!(!text.is_empty(), "{}", s.section_id);
            assert!(text.chars().count() <= 600, "{} is {} chars", s.section_id, text.chars().count());
            assert!(s.section_id.starts_with(&format!("{page}:")));
            total += 1;
        }
    }
    assert_eq!(total, idx.num_sections());
}

#[test]
fn unknown_ids_are_typed_errors_naming_the_id() {
    let idx = shared();
    let e = idx.view_sections("no_such_page").unwrap_err();
    assert!(matches!(e, SearchError::UnknownPage(ref id) if id == "no_such_page"));
    assert!(e.to_string().contains("no_such_page"));
    let e = idx.read_section("chess:nope").unwrap_err();
    assert!(matches!(e, SearchError::UnknownSection(_)));
    assert!(e.to_string().contains("chess:nope"));
}

#[test]
fn an_empty_query_is_refused_in_every_mode() {
    // `agentrt search ""` printed arbitrary hits and exited 0 while `search_pages("")` in the sandbox
    // refused: the index itself refuses now, so every caller does.
    let idx = shared();
    for query in ["", "   ", "\n\t"] {
        for mode in [SearchMode::Hybrid, SearchMode::Bm25, SearchMode::Vector] {
            let e = idx.search_pages_with(query, 5, mode).unwrap_err();
            assert!(matches!(e, SearchError::EmptyQuery), "{query:?} {mode:?}: {e}");
        }
    }
    assert!(!idx.search_pages("chess", 5).unwrap().is_empty());
}

#[test]
fn rebuild_is_a_noop_then_changes_are_named_and_corruption_detected() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(build(dir.path()), BuildOutcome::Built { ref reason, .. } if reason == "no index yet"));
    assert_eq!(build(dir.path()), BuildOutcome::UpToDate);

    // A changed corpus is named.
    let changed = dir.path().join("pages.jsonl");
    let mut text = std::fs::read_to_string(fixture()).unwrap();
    text.push_str("{\"id\":\"extra\",\"title\":\"Extra\",\"content\":\"# Extra\\n\\nAn extra page.\"}\n");
    std::fs::write(&changed, text).unwrap();
    match build_index(&changed, dir.path(), &opts(), &mut |_| {}).unwrap() {
        BuildOutcome::Built { reason, pages, .. } => {
            assert!(reason.starts_with("corpus changed"), "{reason}");
            assert_eq!(pages, 8);
        }
        other => panic!("{other:?}"),
    }
    let idx = WikiIndex::open(dir.path()).unwrap();
    assert_eq!(idx.view_sections("extra").unwrap().len(), 1);
    drop(idx);
    // Exactly one generation is left.
    let gens = std::fs::read_dir(dir.path()).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("gen-")).count();
    assert_eq!(gens, 1);

    let gen = dir.path().join(std::fs::read_to_string(dir.path().join("CURRENT")).unwrap().trim());

    // Truncated vectors.
    let vectors = gen.join("vectors.f32");
    let bytes = std::fs::read(&vectors).unwrap();
    std::fs::write(&vectors, &bytes[..bytes.len() - 100]).unwrap();
    let e = WikiIndex::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("vectors.f32") && e.contains("re-run `agentrt index`"), "{e}");
    // ... which a re-run repairs.
    match build_index(&changed, dir.path(), &opts(), &mut |_| {}).unwrap() {
        BuildOutcome::Built { reason, .. } => assert!(reason.contains("unusable"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(WikiIndex::open(dir.path()).is_ok());

    // Garbled manifest.
    let gen = dir.path().join(std::fs::read_to_string(dir.path().join("CURRENT")).unwrap().trim());
    std::fs::write(gen.join("manifest.json"), b"{\"inputs\": 3").unwrap();
    let e = WikiIndex::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("manifest.json is garbled") && e.contains("re-run `agentrt index`"), "{e}");

    // Flipped byte in the catalog.
    build_index(&changed, dir.path(), &opts(), &mut |_| {}).unwrap();
    let gen = dir.path().join(std::fs::read_to_string(dir.path().join("CURRENT")).unwrap().trim());
    let cat = gen.join("sections.json");
    let mut bytes = std::fs::read(&cat).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&cat, &bytes).unwrap();
    let e = WikiIndex::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("sha256") && e.contains("agentrt index"), "{e}");
}

#[test]
fn a_killed_build_leaves_the_previous_index_usable() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    // What a build killed midway leaves behind: a partial directory from a dead process.
    let partial = dir.path().join(".building-999999999");
    std::fs::create_dir_all(partial.join("tantivy")).unwrap();
    std::fs::write(partial.join("vectors.f32"), b"half").unwrap();
    let idx = WikiIndex::open(dir.path()).unwrap();
    assert_eq!(idx.search_pages_with("Chess", 1, SearchMode::Bm25).unwrap()[0].page_id, "chess");
    // The next full build sweeps it.
    build_index(&fixture(), dir.path(), &BuildOptions { force: true, ..opts() }, &mut |_| {}).unwrap();
    assert!(!partial.exists());
}

#[test]
fn missing_index_says_to_run_agentrt_index() {
    let dir = tempfile::tempdir().unwrap();
    let e = WikiIndex::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("no index has been built") && e.contains("re-run `agentrt index`"), "{e}");
}

#[test]
fn bad_pages_file_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("bad.jsonl");
    std::fs::write(&pages, "{\"id\":\"a\",\"title\":\"A\",\"content\":\"x\"}\n{\"id\":\"b\",\"title\":\"B\",\"content\":\"y\"\n").unwrap();
    let e = build_index(&pages, &dir.path().join("idx"), &opts(), &mut |_| {}).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}:2: malformed JSON", pages.display())), "{e}");

    std::fs::write(&pages, "{\"id\":\"a\",\"title\":\"A\"}\n").unwrap();
    let e = build_index(&pages, &dir.path().join("idx"), &opts(), &mut |_| {}).unwrap_err().to_string();
    assert_eq!(e, format!("{}:1: missing field \"content\"", pages.display()));
    assert!(!dir.path().join("idx").join("CURRENT").exists());
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_pages_are_read() {
    use arrow_array::{RecordBatch, StringArray};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pages.parquet");
    let batch = RecordBatch::try_from_iter(vec![
        ("id", Arc::new(StringArray::from(vec!["a", "b"])) as _),
        ("title", Arc::new(StringArray::from(vec!["A", "B"])) as _),
        ("content", Arc::new(StringArray::from(vec![Some("# A\n\nalpha"), None])) as _),
    ])
    .unwrap();
    let file = std::fs::File::create(&path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let e = read_pages(&path).unwrap_err().to_string();
    assert!(e.contains("pages.parquet:2") && e.contains("missing field \"content\""), "{e}");

    let batch = RecordBatch::try_from_iter(vec![
        ("id", Arc::new(StringArray::from(vec!["a"])) as _),
        ("title", Arc::new(StringArray::from(vec!["A"])) as _),
        ("content", Arc::new(StringArray::from(vec!["# A\n\nalpha"])) as _),
    ])
    .unwrap();
    let file = std::fs::File::create(&path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let corpus = read_pages(&path).unwrap();
    assert_eq!(corpus.pages, vec![Page { id: "a".into(), title: "A".into(), content: "# A\n\nalpha".into() }]);
}

/// A query, and a query's encoding asked for on its own, do not wait for rayon's global pool. A process
/// that samples from a model holds every one of that pool's threads for each forward pass, and a program
/// searching meanwhile must not wait for it (a query queued behind a prefill chunk ran past the sandbox's
/// wall-time limit). Here the global pool's
/// threads are all held until the search has answered, or for a minute if it never does.
#[test]
fn a_query_and_its_encoding_answer_while_the_global_pool_is_held() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    let idx = shared();
    // The encoder loads on the first query: load it before the pool is held.
    assert_eq!(idx.search_pages("Chess", 1).unwrap()[0].page_id, "chess");
    let (held, left, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let holder = {
        let (held, left, release) = (held.clone(), left.clone(), release.clone());
        std::thread::spawn(move || {
            rayon::broadcast(|_| {
                held.fetch_add(1, Ordering::SeqCst);
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                while !release.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                left.fetch_add(1, Ordering::SeqCst);
            })
        })
    };
    while held.load(Ordering::SeqCst) < rayon::current_num_threads() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let hits = idx.search_pages("the planet Jupiter", 3).unwrap();
    // A query's encoding asked for on its own (retrieval evaluation) runs on the query threads too.
    let alone = idx.embed_query("a question nobody asked before").unwrap();
    let many = idx.embed_queries(&["two more".to_string(), "queries".to_string()]).unwrap();
    let answered_while_held = left.load(Ordering::SeqCst) == 0;
    release.store(true, Ordering::SeqCst);
    holder.join().unwrap();
    assert!(answered_while_held, "the search waited for the global pool to be released");
    assert_eq!(hits[0].page_id, "jupiter", "{hits:?}");
    assert!(alone.len() == 384 && many.len() == 2 && many.iter().all(|v| v.len() == 384));
}
