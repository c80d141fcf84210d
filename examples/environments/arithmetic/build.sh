#!/usr/bin/env bash
# Builds the arithmetic environment's two components: ./build.sh (needs `agentrt` on the PATH)
#   calculator/calculator.wasm  the plug-in tool (agentrt:tools/tool world)
#   grader/grader.wasm          the grader (agentrt:tools/grader world)
#
# Each is built in the project `agentrt tool new` or `agentrt env new` lays out, with this example's WIT
# and app.py in place of the skeleton's, by the build.sh that command writes (it pins componentize-py and
# installs it on first use into $AGENTRT_CACHE/toolchains): one build, one toolchain pin.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

agentrt tool new calculator --lang python --dir "$scratch" >/dev/null
cp "$here/calculator/wit/calculator.wit" "$here/calculator/app.py" "$scratch/calculator/"
mv "$scratch/calculator/calculator.wit" "$scratch/calculator/wit/calculator.wit"
bash "$scratch/calculator/build.sh" "$here/calculator/calculator.wasm"

agentrt env new arithmetic --dir "$scratch" >/dev/null
cp "$here/grader/app.py" "$scratch/arithmetic/grader/app.py"
bash "$scratch/arithmetic/grader/build.sh" "$here/grader/grader.wasm"
