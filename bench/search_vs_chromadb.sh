#!/usr/bin/env bash
# search_pages latency and index build time: agentrt (tantivy + our int8 MiniLM) against the seed's stack
# (chromadb + sentence-transformers all-MiniLM-L6-v2), side by side in one run, on the same sections
# and the same 200 dev questions.
#
# Usage: bench/search_vs_chromadb.sh [N_QUERIES]   (from the repository root; needs network for pip once)
# Env:   AGENTRT=path/to/agentrt (default: target/release/agentrt, built if missing; the crate's example
#        driver, target/release/examples/wiki, takes the same arguments)
#        INDEX_DIR=existing index (skip our build)   FULL=1 (chroma re-embeds every section itself)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
WORK=bench/.work
VENV=bench/.venv
mkdir -p "$WORK"
AGENTRT=${AGENTRT:-target/release/agentrt}
[ -x "$AGENTRT" ] || cargo build --release --bin agentrt

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import chromadb, sentence_transformers" 2>/dev/null; then
  echo "== installing chromadb + sentence-transformers into $VENV (PyPI; large: torch)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q chromadb sentence-transformers
fi

# The first N dev questions.
python3 - "$N" > "$WORK/queries.txt" <<'PY'
import json, sys
n = int(sys.argv[1]); out = []
for l in open("data/wiki/questions.jsonl"):
    q = json.loads(l)
    if q["split"] == "dev":
        out.append(q["question"].replace("\n", " "))
print("\n".join(out[:n]))
PY

# Ours: a fresh build (timed), then the queries. INDEX_DIR=an existing index skips the build and takes
# the build time its manifest recorded.
if [ -n "${INDEX_DIR:-}" ]; then
  IDX="$INDEX_DIR"
  OURS_BUILD=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['build_seconds'])" "$IDX/$(cat "$IDX/CURRENT")/manifest.json")
else
  IDX="$WORK/agentrt-index"
  rm -rf "$IDX"
  t0=$(date +%s.%N)
  "$AGENTRT" index --index-dir "$IDX" >&2
  sync  # flushed and counted, as on chroma's side, so that no writeback runs under the timed queries
  t1=$(date +%s.%N)
  OURS_BUILD=$(python3 -c "print(round($t1 - $t0, 1))")
fi
OURS=$("$AGENTRT" search --index-dir "$IDX" --queries "$WORK/queries.txt" --timings --json)

# Theirs, on exactly the sections our index holds, with the same model files.
MODEL_DIR=${MODEL_DIR:-${AGENTRT_CACHE:-$HOME/.cache/agentrt}/assets/all-minilm-l6-v2}
GEN="$IDX/$(cat "$IDX/CURRENT")"
rm -rf "$WORK/chroma"
# FULL=1 re-embeds every section with sentence-transformers; the default reuses our vectors for the
# collection and scales a 512-section embedding sample to estimate that part of the build time.
VEC_ARG="$GEN/vectors.f32"; [ "${FULL:-0}" = 1 ] && VEC_ARG=""
THEIRS=$(HF_HUB_OFFLINE=1 "$VENV/bin/python" bench/chroma_bench.py "$GEN/sections.json" "$WORK/queries.txt" "$MODEL_DIR" "$WORK/chroma" $VEC_ARG)

python3 - "$OURS" "$THEIRS" "$OURS_BUILD" <<'PY'
import json, sys
ours, theirs, ours_build = json.loads(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])
print(f"search_pages over {ours['queries']} dev questions, same sections, same model (all-MiniLM-L6-v2)")
print(f"{ours['kernels']}\n")
print(f"{'':34} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9} {'build s':>9}")
print(f"{'agentrt (tantivy + int8 MiniLM, hybrid)':34} {ours['p50_ms']:>9.2f} {ours['p99_ms']:>9.2f} {ours['mean_ms']:>9.2f} {ours_build:>9.1f}")
print(f"{'seed (chromadb + sent.-transformers)':34} {theirs['p50_ms']:>9.2f} {theirs['p99_ms']:>9.2f} {theirs['mean_ms']:>9.2f} {theirs['build_s']:>9.1f}")
print(f"\nratio (seed / agentrt): p50 {theirs['p50_ms']/ours['p50_ms']:.1f}x, p99 {theirs['p99_ms']/ours['p99_ms']:.1f}x, "
      f"build {theirs['build_s']/ours_build:.2f}x")
PY
