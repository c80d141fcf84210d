#!/usr/bin/env bash
# Builds the JavaScript text-tools plug-in: ./build.sh [OUT.wasm] (default: text_tools.wasm beside this script).
#
# componentize-js is pinned, and installed on first use into an npm prefix in agentrt's cache, so every
# build uses the same engine whatever else is on the machine. Needs node and npm.
set -euo pipefail

VERSION=0.23.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/text_tools.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
cache="${AGENTRT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrt}"
prefix="$cache/toolchains/componentize-js-$VERSION"
componentize_js="$prefix/node_modules/.bin/componentize-js"

# Installed beside its place and renamed into it whole, so an install that fails or races another build
# never leaves a half-made toolchain.
partial=""
trap 'rm -rf "$partial"' EXIT
if [ ! -x "$componentize_js" ]; then
    echo "installing @bytecodealliance/componentize-js $VERSION into $prefix"
    mkdir -p "$(dirname "$prefix")"
    partial="$(mktemp -d "$prefix.partial.XXXXXX")"
    npm install --prefix "$partial" --no-save --no-audit --no-fund --loglevel=error \
        "@bytecodealliance/componentize-js@$VERSION"
    place() { node -e 'require("fs").renameSync(process.argv[1], process.argv[2])' "$partial" "$prefix" 2>/dev/null; }
    if ! place; then
        if [ -x "$componentize_js" ]; then
            echo "another build installed it first; using that one"
        else
            rm -rf "$prefix" && place
        fi
    fi
fi

# componentize-js takes one WIT path, so the plug-in's WIT and the contract it includes are put together
# the way WIT tools look for dependencies: wit/*.wit beside wit/deps/<package>/.
wit="$(mktemp -d)"
trap 'rm -rf "$partial" "$wit"' EXIT
mkdir -p "$wit/deps/agentrt-tools"
cp "$here"/../wit/*.wit "$wit/"
cp "$here"/../../../wit/agentrt-tools.wit "$wit/deps/agentrt-tools/"

# -d http fetch-event: leave out the engine's fetch() and incoming-request support, which would import
# wasi:http, which the host does not provide (the plug-in would fail to load).
echo "building $out"
"$componentize_js" "$here/text_tools.js" --wit "$wit" --world-name text-tools \
    --disable http fetch-event --out "$out"
