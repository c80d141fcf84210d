#!/usr/bin/env bash
# Builds the {{name}} plug-in: ./build.sh [OUT.wasm] (default: {{snake}}.wasm beside this script).
#
# componentize-py is pinned, and installed on first use into a venv in agentrt's cache, so every build
# uses the same bindings whatever else is on the machine.
set -euo pipefail

VERSION=0.25.1
{{build_paths}}
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

# -d wit: this component's WIT (a tool's own, with the contract in wit/deps/; a grader's is the contract).
# -w: the world by its full name, which always resolves (a short name fails as soon as more than one WIT
# package is given with -d).
echo "building $out"
cd "$here"
"${componentize_py[@]}" -d wit -w {{world}} componentize app -o "$out"
