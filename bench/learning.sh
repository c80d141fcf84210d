#!/usr/bin/env bash
# The evidence that training here makes a better agent, and the recipe of the shipped adapter:
# synthesised `read` trajectories on every train question, SFT of SmolLM2-135M on them, then GRPO from the
# SFT adapter (bench/learning_rl.toml: dynamic sampling, token-level loss, clip-higher, the judge's verdict as
# the reward, a held-out slice evaluated while it runs). Zero-shot, random, SFT and SFT + RL are each evaluated by
# `agentrt eval` on the same 300 dev questions (articles no training question comes from), greedy, with
# the rule judge, and SFT + RL is compared with SFT question by question (paired interval, McNemar).
# Writes bench/learning/table.md, paired.md, accuracy.png, sft-curves.png, rl-curves.png and
# stage_times.tsv (with the CPU), which bench/learning.md reports and discusses.
#
# Usage: bench/learning.sh            (from the repository root; resumable: a finished stage is skipped,
#                                      and a stopped RL run goes on from its last checkpoint)
# Env:   N_DEV=300 dev questions (seed 0)          SYNTH_LIMIT=0 train questions synthesised (0: all 7,361)
#        SFT_EPOCHS=2  SFT_BATCH=8  SFT_LR=3e-4    SFT_MAX_STEPS=360 (0: the epochs)  SFT_STEP=270  the SFT
#                                                  checkpoint RL starts from (the last one is evaluated too)
#        RL_STEPS=20 GRPO steps  RL_LR=3e-5        RL_STEP=last   the RL checkpoint evaluated
#        N_ZERO_SHOT=100 zero-shot questions (the first of the N_DEV)
#        SFT_WARMUP=20  SFT_EVAL_STEPS=90  SFT_SAVE_STEPS=90   MODEL=smollm2-135m (the base: qwen2.5-coder-0.5b
#        for the Qwen recipe: MODEL=qwen2.5-coder-0.5b SFT_LR=2e-4 SFT_MAX_STEPS=150 SFT_STEP=150
#        SFT_WARMUP=10 SFT_EVAL_STEPS=50 SFT_SAVE_STEPS=10 WORK=bench/learning/qwen-read)
#        WORK=bench/learning/read-on (runs and evaluations)   AGENTRT=target/release/agentrt (built if missing)
# Budget on a 2-core AMD EPYC (AVX2): trajectories 45 s; SFT ~20 s a step of 8 alone (720 steps an epoch);
# RL 2-5 min a step (sampling grows with the groups dynamic sampling draws, the update with those kept),
# plus ~2 min per held-out evaluation; each 300-question evaluation ~10-15 min. Each stage's wall time is
# recorded in stage_times.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
N_DEV=${N_DEV:-300}
N_ZERO_SHOT=${N_ZERO_SHOT:-100}
SYNTH_LIMIT=${SYNTH_LIMIT:-0}
SFT_EPOCHS=${SFT_EPOCHS:-2}
SFT_BATCH=${SFT_BATCH:-8}
SFT_LR=${SFT_LR:-3e-4}
SFT_STEP=${SFT_STEP:-270}
SFT_MAX_STEPS=${SFT_MAX_STEPS:-360}
SFT_WARMUP=${SFT_WARMUP:-20}
SFT_EVAL_STEPS=${SFT_EVAL_STEPS:-90}
SFT_SAVE_STEPS=${SFT_SAVE_STEPS:-90}
MODEL=${MODEL:-smollm2-135m}
RL_STEPS=${RL_STEPS:-20}
RL_LR=${RL_LR:-3e-5}
RL_STEP=${RL_STEP:-last}
OUT=bench/learning
WORK=${WORK:-$OUT/read-on}
AGENTRT=${AGENTRT:-target/release/agentrt}
[ -x "$AGENTRT" ] || cargo build --release --bin agentrt
mkdir -p "$WORK"
TIMES="$OUT/stage_times.tsv"
[ -s "$TIMES" ] || printf 'cpu\t%s; %s\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(grep -o 'avx[^ ]*' /proc/cpuinfo | sort -u | xargs)" > "$TIMES"

# stage NAME DONE_FILE COMMAND...: runs COMMAND unless DONE_FILE exists, and records its wall time.
stage() {
  local name=$1 done_file=$2
  shift 2
  if [ -e "$done_file" ]; then
    echo "== $name: done before ($done_file)" >&2
    return
  fi
  echo "== $name: $*" >&2
  local t0=$SECONDS
  "$@"
  local dt=$((SECONDS - t0))
  printf '%s\t%s\n' "$name" "$dt" >> "$TIMES"
  echo "== $name: ${dt} s" >&2
}

# checkpoint RUN STEP: RUN/checkpoint-STEP, or the newest one for `last`.
checkpoint() {
  if [ "$2" = last ]; then ls -d "$1"/checkpoint-* | sort -t- -k2 -n | tail -1; else echo "$1/checkpoint-$2"; fi
}

# The trained agent's system prompt (bench/learning_prompt.txt): the tools and the reply format in a few
# lines, since the trajectories teach the rest and each of its tokens is paid in every training and
# evaluation sequence. The adapter records it in its agent.json, so `agentrt eval --adapter` prompts it
# the same way.
PROMPT=$(cat bench/learning_prompt.txt)
EVAL=(eval --split dev --num-samples "$N_DEV" --seed 0)
stage index "$HOME/.cache/agentrt/index/CURRENT" "$AGENTRT" index
stage trajectories "$WORK/synth.jsonl" "$AGENTRT" trajectories synth --style read --limit "$SYNTH_LIMIT" --system-prompt "$PROMPT" --out "$WORK/synth.jsonl"
# The ceiling of the program the trajectories teach: the share of dev questions whose printed sections hold
# a gold answer (the synthesiser answers exactly when they do), and its tool calls.
stage ceiling-dev "$WORK/synth-dev.jsonl" "$AGENTRT" trajectories synth --style read --split dev --system-prompt "$PROMPT" --out "$WORK/synth-dev.jsonl"
stage sft "$WORK/sft/DONE" bash -c "if [ -e '$WORK/sft/config.toml' ]; then '$AGENTRT' sft --resume '$WORK/sft' --max-steps $SFT_MAX_STEPS --no-progress; else \
  '$AGENTRT' sft --model $MODEL --data '$WORK/synth.jsonl' --epochs $SFT_EPOCHS --max-steps $SFT_MAX_STEPS --batch-size $SFT_BATCH --lr $SFT_LR --set sft.warmup_steps=$SFT_WARMUP \
  --set data.val_examples=100 --set sft.eval_steps=$SFT_EVAL_STEPS --set run.save_steps=$SFT_SAVE_STEPS --set run.save_total_limit=0 --output-dir '$WORK' --run-name sft --no-progress; fi \
  && touch '$WORK/sft/DONE'"
SFT_CKPT=$(checkpoint "$WORK/sft" "$SFT_STEP")

# RL plays the adapter exactly as SFT trained it (its agent.json, turned into --set overrides), from that
# SFT checkpoint, which is also the KL reference; the rest of the recipe is bench/learning_rl.toml.
mapfile -t PLAYED < <(python3 - "$SFT_CKPT/agent.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
for section, k in [("env.wiki", "system_prompt"), ("env.wiki", "demonstration"), ("rollout", "max_turns"), ("rollout", "max_new_tokens")]:
    print("--set")
    print(f"{section}.{k}={json.dumps(a[k]) if k == 'system_prompt' else str(a[k]).lower()}")
PY
)
rl() {
  if [ -e "$WORK/rl/config.toml" ]; then
    "$AGENTRT" train --resume "$WORK/rl" --max-steps "$RL_STEPS" --no-progress
  else
    "$AGENTRT" train --config bench/learning_rl.toml "${PLAYED[@]}" --init-adapter "$SFT_CKPT" --lr "$RL_LR" --max-steps "$RL_STEPS" \
      --output-dir "$WORK" --run-name rl --no-progress
  fi
  touch "$WORK/rl/DONE"
}
stage rl "$WORK/rl/DONE" rl
RL_CKPT=$(checkpoint "$WORK/rl" "$RL_STEP")

# Zero-shot answers none of them in every run so far; its first N_ZERO_SHOT questions (a prefix of the
# N_DEV, same seed) show it at a third of the cost (25 minutes for 300 on two cores).
stage eval-zero-shot "$WORK/eval/zero-shot/results.json" "$AGENTRT" "${EVAL[@]}" --num-samples "$N_ZERO_SHOT" --baseline zero-shot --output-dir "$WORK/eval/zero-shot"
stage eval-random "$WORK/eval/random/results.json" "$AGENTRT" "${EVAL[@]}" --baseline random --output-dir "$WORK/eval/random"
stage eval-sft "$WORK/eval/sft/results.json" "$AGENTRT" "${EVAL[@]}" --adapter "$SFT_CKPT" --output-dir "$WORK/eval/sft"
SFT_LAST=$(checkpoint "$WORK/sft" last)
stage eval-sft-last "$WORK/eval/sft-last/results.json" "$AGENTRT" "${EVAL[@]}" --adapter "$SFT_LAST" --output-dir "$WORK/eval/sft-last"
stage eval-sft-rl "$WORK/eval/sft-rl/results.json" "$AGENTRT" "${EVAL[@]}" --adapter "$RL_CKPT" --output-dir "$WORK/eval/sft-rl"

"$AGENTRT" eval compare "$WORK/eval/sft" "$WORK/eval/sft-rl" > "$OUT/paired.md"
# Every question whose verdict RL changed, with both episodes side by side, to read what RL taught.
python3 - "$WORK/eval/sft/transcripts.jsonl" "$WORK/eval/sft-rl/transcripts.jsonl" > "$OUT/changed.md" <<'PY'
import json, sys
def load(path):
    return {e["question"]["id"]: e for e in map(json.loads, open(path))}
sft, rl = load(sys.argv[1]), load(sys.argv[2])
def episode(e):
    out = []
    for t in e["turns"]:
        if t.get("program"):
            out.append("```python\n" + t["program"].strip() + "\n```")
            seen = (t.get("observation") or t.get("program_error") or "").strip().replace("\n", " ")
            out.append("> printed: " + (seen[:300] + (" ..." if len(seen) > 300 else "")))
    out.append(f"answer: `{e.get('final_answer')}` ({e['outcome']})")
    return "\n\n".join(out)
changed = [q for q in sft if q in rl and (sft[q]["outcome"] == "correct") != (rl[q]["outcome"] == "correct")]
won = sum(rl[q]["outcome"] == "correct" for q in changed)
print(f"# Questions whose verdict RL changed: {len(changed)} ({won} won, {len(changed) - won} lost)\n")
for q in changed:
    e = sft[q]["question"]
    print(f"## {e['question']}\n\ngold: {' | '.join(e['answers'])}; RL {'won' if rl[q]['outcome'] == 'correct' else 'lost'} it\n")
    print("**SFT**\n\n" + episode(sft[q]) + "\n\n**SFT + RL**\n\n" + episode(rl[q]) + "\n")
PY
"$AGENTRT" plot "$WORK/sft" --out "$OUT/sft-curves.png"
"$AGENTRT" plot "$WORK/rl" --out "$OUT/rl-curves.png"
"$AGENTRT" eval table --out "$OUT/accuracy.png" \
  "zero-shot=$WORK/eval/zero-shot" "random=$WORK/eval/random" "SFT ($(basename "$SFT_CKPT"))=$WORK/eval/sft" \
  "SFT + RL ($(basename "$RL_CKPT"))=$WORK/eval/sft-rl" "SFT ($(basename "$SFT_LAST"))=$WORK/eval/sft-last" > "$OUT/table.md"
echo "table: $OUT/table.md; paired: $OUT/paired.md; stage times: $TIMES" >&2
