#!/usr/bin/env bash
# TensorBoard reads what agentrt writes: a short training run (2 steps by default), then TensorBoard's own
# event reader (the `tensorboard` package from PyPI, in bench/.venv-tensorboard) lists the run's scalars
# and checks every step's reward_mean and accuracy against metrics.jsonl, and lists the transcripts.
#
# Usage: bench/tensorboard_check.sh [STEPS]   (from anywhere; needs PyPI once)
# Env:   AGENTRT=path/to/agentrt (default: target/release/agentrt, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-2}
VENV=bench/.venv-tensorboard
WORK=bench/.work/tensorboard
AGENTRT=${AGENTRT:-target/release/agentrt}
[ -x "$AGENTRT" ] || cargo build --release --bin agentrt
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import tensorboard" 2>/dev/null; then
  echo "== installing tensorboard into $VENV (PyPI)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q tensorboard
fi
rm -rf "$WORK"
"$AGENTRT" train --max-steps "$STEPS" --set rollout.batch_size=1 --set rollout.num_rollouts=2 --output-dir "$WORK" --run-name run --no-progress
"$VENV/bin/python" - "$WORK/run" <<'PY'
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run = sys.argv[1]
acc = EventAccumulator(run, size_guidance={"scalars": 0, "tensors": 0})
acc.Reload()
tags = acc.Tags()
print("scalars:", ", ".join(sorted(tags["scalars"])))
print("text:", ", ".join(sorted(tags["tensors"])))
lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
for key in ["reward_mean", "accuracy", "loss", "seconds/step"]:
    got = [(e.step, e.value) for e in acc.Scalars(key)]
    want = [(l["step"], l[key.split("/")[0]] if "/" not in key else l["seconds"]["step"]) for l in lines]
    assert [s for s, _ in got] == [s for s, _ in want], (key, got, want)
    assert all(abs(g - w) <= 1e-6 * max(1.0, abs(w)) for (_, g), (_, w) in zip(got, want)), (key, got, want)
    print(f"{key}: {got}  (metrics.jsonl agrees)")
assert "transcripts" in tags["tensors"], tags["tensors"]
print(f"tensorboard read {len(tags['scalars'])} scalar tags over {len(lines)} steps from {run}")
PY
