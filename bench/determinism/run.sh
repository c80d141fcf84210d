#!/usr/bin/env bash
# The determinism check of docs/reliability.md on the real default job: two fresh runs of
# `agentrt train --max-steps 4` with one seed, then a third killed with SIGKILL at three random instants and
# resumed each time with a bare `--resume`; prints the sha256 of each run's final adapter and whether the
# metrics rows (their `seconds` aside) agree. Needs `agentrt index` run once.
#
#   bench/determinism/run.sh [OUT_DIR]        # AGENTRT_BIN (default target/release/agentrt), KILL_SEED
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${AGENTRT_BIN:-target/release/agentrt}
OUT=${1:-$(mktemp -d)}
KILL_SEED=${KILL_SEED:-1}
mkdir -p "$OUT"
train() { "$BIN" train --max-steps 4 --no-progress --output-dir "$OUT" --run-name "$@"; }

grep -m1 'model name' /proc/cpuinfo
echo "CPU features: $(grep -o -w -E 'avx512_vnni|avx512f|avx2|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "kernel path: AGENTRT_KERNELS=${AGENTRT_KERNELS:-auto} (auto: the widest this CPU runs)"
echo "threads: ${RAYON_NUM_THREADS:-$(nproc)}"

# A first step fetches the model and compiles the sandbox's components: not part of the runs timed below.
"$BIN" train --max-steps 1 --no-progress --output-dir "$OUT/warm-up" --run-name warm-up 2>"$OUT/warm-up.log"

start=$(date +%s.%N)
train straight-1 2>"$OUT/straight-1.log"
took=$(python3 -c "import time; print(time.time() - $start)")
echo "straight-1: ${took%.*} s"
train straight-2 2>"$OUT/straight-2.log"

# Three kills, each in a fresh process (the first starts the run, the others resume it), at an instant drawn
# uniformly over what is left of the run: 5 s to load, then the straight run's time a step for each step not
# yet saved.
resume=()
for k in 1 2 3; do
  saved_step=$(cd "$OUT" && shopt -s nullglob && for d in killed/checkpoint-* killed/resume-*; do echo "${d##*-}"; done | sort -n | tail -1)
  delay=$(python3 -c "import random; random.seed($KILL_SEED * 100 + $k); print(round(5 + random.uniform(0.05, 0.95) * $took * (4 - ${saved_step:-0}) / 4, 1))")
  "$BIN" train --max-steps 4 --no-progress --output-dir "$OUT" --run-name killed "${resume[@]}" 2>>"$OUT/killed.log" &
  pid=$!
  sleep "$delay"
  if kill -9 "$pid" 2>/dev/null; then
    wait "$pid" || true
    steps=0
    [ -f "$OUT/killed/metrics.jsonl" ] && steps=$(wc -l <"$OUT/killed/metrics.jsonl")
    saved=$(cd "$OUT/killed" && shopt -s nullglob && echo checkpoint-* resume-*)
    echo "kill $k: SIGKILL after ${delay} s, ${steps} metrics lines, saved: ${saved:-nothing}"
  else
    wait "$pid" || true
    echo "kill $k: the process had ended before ${delay} s"
  fi
  resume=(--resume)
done
train killed --resume 2>>"$OUT/killed.log"

sha256sum "$OUT"/*/checkpoint-4/adapters/adapter_model.safetensors
python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
def rows(name):
    lines = [json.loads(l) for l in (out / name / "metrics.jsonl").read_text().splitlines() if l.strip()]
    for l in lines:
        l.pop("seconds", None)
    return lines
a = rows("straight-1")
for name in ("straight-2", "killed"):
    print(f"{name}: metrics rows (seconds aside) {'equal' if rows(name) == a else 'DIFFER'} to straight-1's")
PY
