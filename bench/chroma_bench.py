"""The seed's search stack, timed: chromadb + sentence-transformers (all-MiniLM-L6-v2).

Reads the sections agentrt's index holds (so both stacks search the same text), builds a chromadb
collection over them with sentence-transformers embeddings, then times `search_pages` the way the seed
ran it: embed the query, query the collection for the nearest sections, group them into pages.
Prints one JSON object on stdout.

Usage: chroma_bench.py SECTIONS_JSON QUERIES_TXT MODEL_DIR WORK_DIR [VECTORS_F32]

With VECTORS_F32 (agentrt's section vectors, same model, same texts) the collection is filled with those
vectors instead of re-embedding every section (on a 2-core machine that alone takes many minutes):
the build time is then chroma's insertion time plus sentence-transformers' embedding time measured on a
512-section sample and scaled to the whole corpus, and says so ("build_estimated": true). Query latency
is always measured in full: sentence-transformers embeds each query, chroma searches its HNSW index.
"""
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import chromadb  # noqa: E402
from chromadb.utils import embedding_functions  # noqa: E402


def main():
    sections_json, queries_txt, model_dir, work_dir = sys.argv[1:5]
    vectors_f32 = sys.argv[5] if len(sys.argv) > 5 else None
    cat = json.load(open(sections_json))
    pages = cat["pages"]
    secs = cat["sections"]
    queries = [l.rstrip("\n") for l in open(queries_txt) if l.strip()]

    t0 = time.perf_counter()
    ef = embedding_functions.SentenceTransformerEmbeddingFunction(model_name=model_dir, device="cpu")
    # Sections are embedded truncated at 128 word pieces on both sides (agentrt's SECTION_TOKENS).
    if hasattr(ef, "_model"):
        ef._model.max_seq_length = 128
    docs = [pages[s["page"]]["title"] + "\n" + s["text"] for s in secs]
    vecs = None
    embed_est = 0.0
    if vectors_f32:
        import numpy as np
        vecs = np.fromfile(vectors_f32, dtype="<f4").reshape(len(secs), -1)
        sample = docs[:: max(1, len(docs) // 512)][:512]
        ef(sample[:8])  # load
        t = time.perf_counter()
        ef(sample)
        embed_est = (time.perf_counter() - t) * len(docs) / len(sample)
        t0 = time.perf_counter()
    client = chromadb.PersistentClient(path=work_dir)
    try:
        client.delete_collection("wiki")
    except Exception:
        pass
    col = client.create_collection("wiki", embedding_function=ef, metadata={"hnsw:space": "cosine"})
    batch = 256
    for i in range(0, len(secs), batch):
        part = secs[i : i + batch]
        col.add(
            ids=[s["id"] for s in part],
            documents=docs[i : i + batch],
            metadatas=[{"page_id": pages[s["page"]]["id"]} for s in part],
            **({"embeddings": vecs[i : i + batch].tolist()} if vecs is not None else {}),
        )
        print(f"chroma: {min(i + batch, len(secs))}/{len(secs)} sections", file=sys.stderr, flush=True)
    # Both sides' builds end with their writes flushed (and counted), so that no writeback runs under the
    # timed queries.
    os.sync()
    build_s = time.perf_counter() - t0 + embed_est

    def search_pages(q, k=10):
        res = col.query(query_texts=[q], n_results=50, include=["metadatas", "distances"])
        seen, out = set(), []
        for md, d in zip(res["metadatas"][0], res["distances"][0]):
            pid = md["page_id"]
            if pid not in seen:
                seen.add(pid)
                out.append((pid, 1.0 - d))
            if len(out) == k:
                break
        return out

    for q in queries[:5]:  # warm-up, not timed
        search_pages(q + " warm up")
    lat = []
    for q in queries:
        t = time.perf_counter()
        search_pages(q)
        lat.append((time.perf_counter() - t) * 1000.0)
    lat.sort()

    def pct(p):
        return lat[min(len(lat) - 1, int(round(p / 100.0 * (len(lat) - 1))))]

    print(json.dumps({"stack": "chromadb+sentence-transformers", "build_s": build_s,
                      "build_estimated": vecs is not None, "embed_estimate_s": embed_est, "queries": len(lat),
                      "p50_ms": pct(50), "p99_ms": pct(99), "mean_ms": sum(lat) / len(lat)}))


if __name__ == "__main__":
    main()
