#!/usr/bin/env bash
# Builds the arithmetic environment's two components: ./build.sh
#   calculator/calculator.wasm  the plug-in tool (agentrt:tools/tool world)
#   grader/grader.wasm          the grader (agentrt:tools/grader world)
#
# Each is built as `agentrt tool new` / `agentrt env new` lay a Python project out: its WIT with the
# contract beside it, its app.py, and the Python build.sh those commands write
# (src/commands/tool_templates/python/build.sh: it pins componentize-py and installs it on first use into
# $AGENTRT_CACHE/toolchains), filled in as they fill it. One build script, one toolchain pin.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
template="$repo/src/commands/tool_templates/python/build.sh"
paths="$(mktemp)"
trap 'rm -rf "$paths"' EXIT
grep -v '^#' "$repo/src/commands/tool_templates/common/build_paths.sh" >"$paths"

# build COMPONENT_DIR WORLD STEM: COMPONENT_DIR/STEM.wasm from COMPONENT_DIR/app.py.
build() {
    local dir="$1" world="$2" stem="$3" project
    project="$(mktemp -d)"
    if [ -d "$here/$dir/wit" ]; then
        # A tool: its own WIT, the contract as a dependency.
        mkdir -p "$project/wit/deps/agentrt-tools"
        cp "$here/$dir"/wit/*.wit "$project/wit/"
        cp "$repo/wit/agentrt-tools.wit" "$project/wit/deps/agentrt-tools/"
    else
        # A grader: its world is the contract's own.
        mkdir -p "$project/wit"
        cp "$repo/wit/agentrt-tools.wit" "$project/wit/"
    fi
    cp "$here/$dir/app.py" "$project/"
    sed -e "/{{build_paths}}/{r $paths" -e 'd}' "$template" |
        sed -e "s#{{world}}#$world#g" -e "s/{{name}}/$stem/g" -e "s/{{snake}}/$stem/g" >"$project/build.sh"
    if grep -n '{{' "$project/build.sh" >&2; then
        echo "$template has a placeholder this script does not fill (the lines above)" >&2
        exit 1
    fi
    bash "$project/build.sh" "$here/$dir/$stem.wasm"
    rm -rf "$project"
}

build calculator local:calculator/calculator@0.1.0 calculator
build grader agentrt:tools/grader@0.1.0 grader
