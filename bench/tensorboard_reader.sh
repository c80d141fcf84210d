#!/usr/bin/env bash
# TensorBoard's own reader (EventAccumulator, from the `tensorboard` package) on a run directory's event
# files: prints one JSON object, every scalar tag's series and the text (tensor) tags, e.g.
#   {"scalars": {"reward_mean": [[1, 0.25], [2, 0.5]], "seconds/step": [...]}, "tensors": ["transcripts"]}
# An independent reader of what agentrt-tensorboard writes by hand; bench/tensorboard_check.sh and
# trainer/tests/tensorboard_events.rs compare its answer with what was written.
#
# Usage: bench/tensorboard_reader.sh RUN_DIR
# tensorboard is pinned, and installed from PyPI on first use into a venv in agentrt's cache
# ($AGENTRT_CACHE/toolchains/tensorboard-VERSION), so every check reads with the same reader whatever
# else is on the machine. Needs python3 with venv.
set -euo pipefail

VERSION=2.21.0
run="${1:?usage: $0 RUN_DIR}"
cache="${AGENTRT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrt}"
venv="$cache/toolchains/tensorboard-$VERSION"

# Installed beside its place and renamed into it whole, so an install that fails or races another check
# never leaves a half-made venv (run through the venv's python, which works wherever the venv is).
if [ ! -x "$venv/bin/python3" ]; then
    echo "installing tensorboard $VERSION into $venv" >&2
    mkdir -p "$(dirname "$venv")"
    partial="$(mktemp -d "$venv.partial.XXXXXX")"
    trap 'rm -rf "$partial"' EXIT
    python3 -m venv "$partial"
    "$partial/bin/pip" install --quiet "tensorboard==$VERSION" >&2
    place() { "$partial/bin/python3" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$partial" "$venv" 2>/dev/null; }
    if ! place; then
        if [ -x "$venv/bin/python3" ]; then
            echo "another check installed it first; using that one" >&2
        else
            rm -rf "$venv" && place
        fi
    fi
fi

"$venv/bin/python3" - "$run" <<'PY'
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

# size_guidance 0: keep every event (the default samples a long series).
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
acc.Reload()
tags = acc.Tags()
scalars = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in tags["scalars"]}
json.dump({"scalars": scalars, "tensors": sorted(tags["tensors"])}, sys.stdout)
print()
PY
