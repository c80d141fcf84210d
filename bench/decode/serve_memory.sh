#!/usr/bin/env bash
# Peak resident memory of `agentrt serve` beside llama.cpp's `llama-server`, per model: each server
# starts on the same GGUF file with 2 threads, answers one chat completion of 64 tokens, and its peak
# resident set (VmHWM) is read before it is stopped.
#
#   bench/decode/serve_memory.sh [AGENTRT_BINARY] [LLAMA_BIN_DIR]
#
# Run from the repository root after `bash bench/decode/setup_llamacpp.sh`. Prints one line per server.
set -euo pipefail
agentrt=${1:-target/release/agentrt}
llama_bin=${2:-bench/decode/llama.cpp-build/bin}
assets=${AGENTRT_ASSETS:-$HOME/.cache/agentrt/assets}
declare -A files=(
  [smollm2-135m]="$assets/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf"
  [qwen2.5-coder-0.5b]="$assets/qwen2.5-coder-0.5b-instruct-q4_k_m/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
)
request='{"model":"m","messages":[{"role":"user","content":"Write a Python function that reverses a list."}],"max_tokens":64,"temperature":0}'

# Waits for the server on $1 to answer /health, sends the request, prints the peak resident MB of pid $2.
measure() {
  local port=$1 pid=$2
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
    kill -0 "$pid" 2> /dev/null || { echo "the server exited before answering /health" >&2; return 1; }
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' -d "$request" > /dev/null
  awk '/VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status"
}

for model in smollm2-135m qwen2.5-coder-0.5b; do
  file=${files[$model]}
  [ -f "$file" ] || { echo "$file: missing (run \`$agentrt generate --model $model\` once to fetch it)" >&2; exit 1; }
  RAYON_NUM_THREADS=2 "$agentrt" serve --model "$file" --port 18431 > /tmp/serve_memory_agentrt.log 2>&1 &
  pid=$!
  ours=$(measure 18431 "$pid") || { kill "$pid"; cat /tmp/serve_memory_agentrt.log >&2; exit 1; }
  kill "$pid"; wait "$pid" 2> /dev/null || true
  "$llama_bin/llama-server" -m "$file" -t 2 --port 18432 > /tmp/serve_memory_llama.log 2>&1 &
  pid=$!
  theirs=$(measure 18432 "$pid") || { kill "$pid"; cat /tmp/serve_memory_llama.log >&2; exit 1; }
  kill "$pid"; wait "$pid" 2> /dev/null || true
  echo "$model: peak resident of serve: agentrt $ours MB, llama-server $theirs MB ($(python3 -c "print(f'{$ours / $theirs:.2f}')")x)"
done
