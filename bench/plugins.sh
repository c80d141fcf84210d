#!/usr/bin/env bash
# Per-call cost of a plug-in tool in each language the examples are written in: the Rust example
# (guest-tools/word-stats-tool), and the same text-tools plug-in in Python (componentize-py) and
# JavaScript (componentize-js), each with warm instances reused against a fresh instance per call.
#
# Usage: bench/plugins.sh [CALLS]   (from anywhere; needs PyPI and npm once, for the pinned toolchains)
# Env:   AGENTRT=path/to/agentrt (default: target/release/agentrt, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS=${1:-300}
WORK=bench/.work/plugins
mkdir -p "$WORK"
AGENTRT=${AGENTRT:-target/release/agentrt}
[ -x "$AGENTRT" ] || cargo build --release --bin agentrt

guest-tools/text-tools/build.sh python "$WORK/text_tools_py.wasm"
guest-tools/text-tools/build.sh js "$WORK/text_tools_js.wasm"
"$AGENTRT" bench plugins --calls "$CALLS" --tool python="$WORK/text_tools_py.wasm" --tool js="$WORK/text_tools_js.wasm"
