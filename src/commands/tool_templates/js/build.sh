#!/usr/bin/env bash
# Builds the {{name}} plug-in: ./build.sh [OUT.wasm] (default: {{snake}}.wasm beside this script).
#
# componentize-js is pinned, and installed on first use into an npm prefix in agentrt's cache, so every
# build uses the same engine whatever else is on the machine. Needs node and npm.
set -euo pipefail

VERSION=0.23.0
{{build_paths}}
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

# A thrown Error must reach the program with its message. The bindings of componentize-js
# 0.23.0 make a thrown value's `payload` a `result` function's error, else the value itself, except
# an Error, which they rethrow so it traps; but they test for an Error with their own realm's `Error`,
# which the module's errors are not. So `throw new Error("kaboom")` became the error value, failed to
# convert ("expected a string, received [object]") and its message was lost. The component is therefore
# built from a module written here for this build only: it re-exports tool.js with every method of its
# exported objects wrapped, and gives an Error thrown without a payload its message as one (with its
# name first, unless it is a plain Error). In a `result` function that is the error the program catches;
# in any other the Error still traps, its message in the plug-in's stderr. tool.js needs no change.
entry="$here/.agentrt-build-$$.js"
trap 'rm -rf "$partial" "$entry"' EXIT
printf 'import * as plugin from "./%s";\nexport * from "./%s";\n' tool.js tool.js >"$entry"
cat >>"$entry" <<'JS'
const hasOwn = Object.prototype.hasOwnProperty;

function withPayload(error) {
  if (error instanceof Error && !hasOwn.call(error, "payload") && Object.isExtensible(error)) {
    const message = String(error.message ?? "");
    const named = error.name && error.name !== "Error";
    Object.defineProperty(error, "payload", { value: named ? `${error.name}: ${message}` : message || "Error" });
  }
  return error;
}

function guarded(method) {
  return function (...args) {
    let result;
    try {
      result = method.apply(this, args);
    } catch (error) {
      throw withPayload(error);
    }
    if (result instanceof Promise) {
      return result.catch((error) => {
        throw withPayload(error);
      });
    }
    return result;
  };
}

// Each interface object's methods, its class's included; a frozen object keeps its own.
for (const exported of Object.values(plugin)) {
  if (exported === null || typeof exported !== "object") continue;
  const seen = new Set(["constructor"]);
  for (let o = exported; o !== null && o !== Object.prototype; o = Object.getPrototypeOf(o)) {
    for (const name of Object.getOwnPropertyNames(o)) {
      const property = Object.getOwnPropertyDescriptor(o, name);
      if (seen.has(name) || typeof property.value !== "function") continue;
      seen.add(name);
      try {
        Object.defineProperty(exported, name, { value: guarded(property.value), writable: true, enumerable: property.enumerable, configurable: true });
      } catch {}
    }
  }
}
JS

# --disable http fetch-event: leave out the engine's fetch() and incoming-request support, which import
# wasi:http, which the host does not provide (the tool would fail to load).
echo "building $out"
"$componentize_js" "$entry" --wit "$here/wit" --world-name {{name}} \
    --disable http fetch-event --out "$out"
