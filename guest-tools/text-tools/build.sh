#!/usr/bin/env bash
# Builds the text-tools example plug-in in one of its languages: ./build.sh python|js [OUT.wasm]
# (default: text_tools.wasm in that language's directory).
#
# The example is built as a project of `agentrt tool new text-tools --lang LANG` is: its WIT, its source
# and the contract laid out as that command lays them out, and built by the build.sh that command writes
# (src/commands/tool_templates/LANG/build.sh, which pins and installs the toolchain), with the tool's name
# filled in as the command fills it. So the example exercises the projects' build, which has one source.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
lang="${1:-}"
case "$lang" in
    python) source=app.py ;;
    js) source=tool.js ;;
    *)
        echo "usage: $0 python|js [OUT.wasm] (the text-tools example is written in Python and in JavaScript; got '$lang')" >&2
        exit 2
        ;;
esac
out="${2:-$here/$lang/text_tools.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

project="$(mktemp -d)"
paths="$(mktemp)"
trap 'rm -rf "$project" "$paths"' EXIT
mkdir -p "$project/wit/deps/agentrt-tools"
cp "$here"/wit/*.wit "$project/wit/"
cp "$repo/wit/agentrt-tools.wit" "$project/wit/deps/agentrt-tools/"
cp "$here/$lang/$source" "$project/"
template="$repo/src/commands/tool_templates/$lang/build.sh"
# The shared lines first (they hold placeholders of their own), without their comment.
grep -v '^#' "$repo/src/commands/tool_templates/common/build_paths.sh" >"$paths"
sed -e "/{{build_paths}}/{r $paths" -e 'd}' "$template" |
    sed -e 's#{{world}}#local:{{name}}/{{name}}@0.1.0#g' -e 's/{{name}}/text-tools/g' -e 's/{{snake}}/text_tools/g' >"$project/build.sh"
if grep -n '{{' "$project/build.sh" >&2; then
    echo "$template has a placeholder this script does not fill (the lines above); fill it here as src/commands/tool.rs does" >&2
    exit 1
fi
bash "$project/build.sh" "$out"
