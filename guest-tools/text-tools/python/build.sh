#!/usr/bin/env bash
# Builds the Python text-tools plug-in: ./build.sh [OUT.wasm] (default: text_tools.wasm beside this script).
#
# componentize-py is pinned, and installed on first use into a venv in agentrt's cache, so every build
# uses the same bindings whatever else is on the machine.
set -euo pipefail

VERSION=0.25.1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/text_tools.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
cache="${AGENTRT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrt}"
venv="$cache/toolchains/componentize-py-$VERSION"

# Installed beside its place and renamed into it whole, so an install that fails or races another build
# never leaves a half-made toolchain (run through the venv's python, which works wherever the venv is).
if [ ! -x "$venv/bin/componentize-py" ]; then
    echo "installing componentize-py $VERSION into $venv"
    mkdir -p "$(dirname "$venv")"
    partial="$(mktemp -d "$venv.partial.XXXXXX")"
    trap 'rm -rf "$partial"' EXIT
    python3 -m venv "$partial"
    "$partial/bin/pip" install --quiet "componentize-py==$VERSION"
    place() { "$partial/bin/python3" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$partial" "$venv" 2>/dev/null; }
    if ! place; then
        if [ -x "$venv/bin/componentize-py" ]; then
            echo "another build installed it first; using that one"
        else
            rm -rf "$venv" && place
        fi
    fi
fi
componentize_py=("$venv/bin/python3" "$venv/bin/componentize-py")

# -d: the contract (agentrt:tools), then this plug-in's WIT, which uses it. -w: the world by its full
# name: with two -d there is no single main package, so `-w text-tools` fails with "Unable to resolve".
echo "building $out"
cd "$here"
"${componentize_py[@]}" -d ../../../wit -d ../wit -w example:text-tools/text-tools@0.1.0 \
    componentize app -o "$out"
