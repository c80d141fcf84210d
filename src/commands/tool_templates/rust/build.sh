#!/usr/bin/env bash
# Builds the {{name}} plug-in: ./build.sh [OUT.wasm] (default: {{snake}}.wasm beside this script).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/{{snake}}.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

# A component needs the wasm32-wasip2 target; rustup installs it once.
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip2; then
    echo "installing the Rust target wasm32-wasip2"
    rustup target add wasm32-wasip2
fi

echo "building $out"
cd "$here"
cargo build --release --target wasm32-wasip2
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{snake}}.wasm" "$out"
