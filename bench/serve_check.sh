#!/usr/bin/env bash
# `agentrt serve` against independent clients, on the shipped adapter (or ADAPTER): curl and the `openai`
# Python package (from PyPI, in bench/.venv-openai) ask the same questions, streamed and not, at
# temperature 0, and every answer must be exactly what `agentrt generate` prints for the same messages.
# Then `agentrt eval --policy openai:...` against the server is compared with `agentrt eval --adapter`
# on the same questions (needs the index: `agentrt index`).
#
# Usage: bench/serve_check.sh [ADAPTER] [EVAL_QUESTIONS]   (from anywhere; needs PyPI once)
# Env:   AGENTRT=path/to/agentrt (default: target/release/agentrt, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
ADAPTER=${1:-models/smollm2-135m-wiki-read}
EVAL_N=${2:-20}
VENV=bench/.venv-openai
WORK=bench/.work/serve
AGENTRT=${AGENTRT:-target/release/agentrt}
[ -x "$AGENTRT" ] || cargo build --release --bin agentrt
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
  echo "== installing openai into $VENV (PyPI)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q openai
fi
rm -rf "$WORK" && mkdir -p "$WORK"
NAME=$(basename "$ADAPTER")
"$AGENTRT" serve --adapter "$ADAPTER" --port 0 > "$WORK/url" 2> "$WORK/serve.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 600); do [ -s "$WORK/url" ] && break; sleep 0.1; done
URL=$(head -1 "$WORK/url")
echo "== server at $URL serving: $(curl -s "$URL/models" | "$VENV/bin/python" -c 'import json,sys; print(", ".join(m["id"] for m in json.load(sys.stdin)["data"]))')"

SYSTEM="You answer questions with a Wikipedia search engine. Write a short Python program in a \`\`\`python block."
QUESTIONS=("Who discovered oxygen?" "What is the capital of France?" "When was the Eiffel Tower built?")
for Q in "${QUESTIONS[@]}"; do
  "$AGENTRT" generate --adapter "$ADAPTER" --system "$SYSTEM" --prompt "$Q" --max-tokens 64 > "$WORK/generate.txt"
  BODY=$("$VENV/bin/python" -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "temperature": 0, "max_tokens": 64,
    "messages": [{"role": "system", "content": sys.argv[2]}, {"role": "user", "content": sys.argv[3]}]}))' "$NAME" "$SYSTEM" "$Q")
  curl -sf "$URL/chat/completions" -H 'content-type: application/json' -d "$BODY" > "$WORK/curl.json"
  "$VENV/bin/python" - "$URL" "$NAME" "$SYSTEM" "$Q" "$WORK" <<'PY'
import json, sys
from openai import OpenAI
url, name, system, question, work = sys.argv[1:]
expected = open(f"{work}/generate.txt").read()
expected = expected[:-1] if expected.endswith("\n") else expected
curl = json.load(open(f"{work}/curl.json"))["choices"][0]["message"]["content"]
client = OpenAI(base_url=url, api_key="none")
messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
whole = client.chat.completions.create(model=name, messages=messages, temperature=0, max_tokens=64, logprobs=True)
streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
    model=name, messages=messages, temperature=0, max_tokens=64, stream=True) if c.choices)
got = {"curl": curl, "openai": whole.choices[0].message.content, "openai stream": streamed}
for k, v in got.items():
    assert v == expected, f"{question!r}: {k} gave {v!r}, generate gave {expected!r}"
print(f"same tokens as generate (curl, openai, openai stream; {len(whole.choices[0].logprobs.content)} log-probs): {question!r} -> {expected[:60]!r}...")
PY
done

echo "== agentrt eval on $EVAL_N questions: --adapter (local) against --policy openai: (this server)"
"$AGENTRT" eval --adapter "$ADAPTER" --num-samples "$EVAL_N" --output-dir "$WORK/eval-local" > /dev/null
"$AGENTRT" eval --policy "openai:$NAME@$URL" --agent-settings "$ADAPTER" --num-samples "$EVAL_N" --output-dir "$WORK/eval-served" > /dev/null
"$VENV/bin/python" - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def load(d):
    eps = {}
    for l in open(f"{work}/{d}/transcripts.jsonl"):
        e = json.loads(l)
        e = e.get("episode", e)
        eps[e["question"]["id"]] = e
    return eps, json.load(open(f"{work}/{d}/results.json"))
(local, rl), (served, rs) = load("eval-local"), load("eval-served")
same = sum(1 for q in local if [t["reply"] for t in local[q]["turns"]] == [t["reply"] for t in served[q]["turns"]])
print(f"identical episodes: {same}/{len(local)}; accuracy local {rl['accuracy']:.3f}, served {rs['accuracy']:.3f}")
PY
