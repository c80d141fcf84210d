# Where the build writes (OUT.wasm, default {{snake}}.wasm beside build.sh) and agentrt's cache, where
# toolchains are installed once: the same lines in every language's build.sh (`agentrt tool new` fills them in).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/{{snake}}.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
cache="${AGENTRT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrt}"
