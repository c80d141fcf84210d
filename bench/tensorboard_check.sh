#!/usr/bin/env bash
# TensorBoard reads what agentrt writes: a short training run (2 steps by default), then TensorBoard's own
# event reader (bench/tensorboard_reader.sh: the pinned `tensorboard` package from PyPI) lists the run's
# scalars, checks every numeric leaf of every metrics.jsonl line against the scalar at its step, and lists
# the transcripts. A short run of the default model logs a reward, accuracy and loss of 0 at most steps,
# which a writer that dropped them would log too: the series that stay constant are named at the end.
# trainer/tests/tensorboard_events.rs checks the values themselves, with ones that are nonzero and change
# at every step, written as the trainer writes them.
#
# Usage: bench/tensorboard_check.sh [STEPS]   (from anywhere; needs PyPI once)
# Env:   AGENTRT=path/to/agentrt (default: target/release/agentrt, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-2}
WORK=bench/.work/tensorboard
AGENTRT=${AGENTRT:-target/release/agentrt}
[ -x "$AGENTRT" ] || cargo build --release --bin agentrt
rm -rf "$WORK"
"$AGENTRT" train --max-steps "$STEPS" --set rollout.batch_size=1 --set rollout.num_rollouts=2 --output-dir "$WORK" --run-name run --no-progress
bench/tensorboard_reader.sh "$WORK/run" >"$WORK/read.json"
python3 - "$WORK/run" "$WORK/read.json" <<'PY'
import json, struct, sys
run, read = sys.argv[1], json.load(open(sys.argv[2]))
scalars, tensors = read["scalars"], read["tensors"]
print("scalars:", ", ".join(sorted(scalars)))
print("text:", ", ".join(tensors))

def f32(x):
    # An event holds an f32: what the writer had, rounded as it rounds.
    return struct.unpack("<f", struct.pack("<f", x))[0]

def leaves(value, prefix=""):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from leaves(inner, f"{prefix}/{key}" if prefix else key)
    elif isinstance(value, (bool, int, float)):
        yield prefix, float(value)

lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
want = {}
for line in lines:
    for tag, value in leaves(line):
        if tag != "step":
            want.setdefault(tag, []).append([line["step"], f32(value)])
for tag, series in sorted(want.items()):
    got = [[step, f32(value)] for step, value in scalars.get(tag, [])]
    assert got == series, (tag, got, series)
for key in ["reward_mean", "accuracy", "loss", "seconds/step"]:
    print(f"{key}: {want[key]}  (metrics.jsonl agrees)")
constant = sorted(tag for tag, series in want.items() if len({value for _, value in series}) == 1)
assert "transcripts" in tensors, tensors
print(f"tensorboard read {len(want)} metrics tags over {len(lines)} steps from {run}, each equal to metrics.jsonl")
print(f"constant over the run, so a wrong value there would go unseen: {', '.join(constant) or 'none'}")
PY
