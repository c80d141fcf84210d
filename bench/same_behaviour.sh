#!/usr/bin/env bash
# Whether two builds of agentrt play and train the same: a refactor must leave episodes and metrics as
# they were. Runs, with each binary, the committed adapter's 50-question greedy evaluation and a 3-step
# seeded training from it (F1 shaping on, so its groups differ and the adapters update), then compares
# the transcripts and metrics line by line, timing fields aside.
#
#   bench/same_behaviour.sh BEFORE_BINARY AFTER_BINARY [OUT_DIR]
#
# Needs the search index (`agentrt index`) and the repository root as the working directory. Exit status 0
# when both runs match, 1 otherwise (the first difference is printed).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BINARY AFTER_BINARY [OUT_DIR]" >&2; exit 2; }
out=${3:-$(mktemp -d)}
for side in before after; do
  bin=$1; [ "$side" = after ] && bin=$2
  mkdir -p "$out/$side"
  echo "$side: $bin" >&2
  "$bin" eval --adapter models/smollm2-135m-wiki-read --num-samples 50 --output-dir "$out/$side/eval" > "$out/$side/eval.log" 2>&1
  "$bin" train --init-adapter models/smollm2-135m-wiki-read --max-steps 3 --seed 7 --no-progress --output-dir "$out/$side/runs" \
    --run-name r --set algorithm.f1_weight=1.0 > "$out/$side/train.log" 2>&1
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
TIMING = {"seconds", "micros"}
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x
ok = True
for name in ["eval/transcripts.jsonl", "runs/r/transcripts.jsonl", "runs/r/metrics.jsonl"]:
    a = [strip(json.loads(l)) for l in open(f"{out}/before/{name}")]
    b = [strip(json.loads(l)) for l in open(f"{out}/after/{name}")]
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    same = len(a) == len(b) and not diff
    print(f"{name}: {len(a)} / {len(b)} lines, {'the same' if same else 'DIFFERENT'}")
    if diff:
        x, y = a[diff[0]], b[diff[0]]
        keys = [k for k in set(x) | set(y) if x.get(k) != y.get(k)]
        print(f"  first difference at line {diff[0] + 1}, keys {sorted(keys)}")
    ok &= same
sys.exit(0 if ok else 1)
PY
