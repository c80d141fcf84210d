#!/usr/bin/env bash
# The evidence that training here makes a better agent: SmolLM2-135M zero-shot, the random baseline,
# SFT on synthesised trajectories, SFT + RL, and Qwen2.5-Coder-0.5B zero-shot with the `full` prompt,
# each evaluated by `agentrt eval` on the same dev questions (articles no training question comes from),
# greedy, with the rule judge. RL starts from an early SFT checkpoint (RL_FROM) so that the same start
# point can be carried on two ways, by RL and by more SFT, and both are evaluated. Writes bench/learning/table.md (every row with its 95% intervals),
# accuracy.png, the SFT and RL curves as PNG and stage_times.tsv (with the CPU), which bench/learning.md
# reports and discusses.
#
# Usage: bench/learning.sh            (from the repository root; resumable: a finished stage is skipped)
# Env:   N_DEV=300 dev questions (seed 0)      SYNTH_LIMIT=3000 train questions played by the synthesiser
#        SFT_STEPS=300 (x 4 conversations)  SFT_LR=3e-4     RL_FROM=100 the SFT step RL starts from
#        RL_STEPS=15 GRPO steps (RL_LR, RL_BETA, RL_GROUP rollouts per question, RL_QUESTIONS per step)
#        N_QWEN=$N_DEV questions for the Qwen row (it is ~4x slower)    WORK=bench/learning (outputs)
#        AGENTRT=target/release/agentrt (built if missing)
# Budget on a 2-core AVX2 machine (AMD EPYC, measured): trajectories 20 s, SFT 300 steps 1.5-2 h, RL 15
# steps 17-20 min, each 300-question evaluation of SmolLM2 20-28 min (random: seconds), Qwen about 4x that:
# about 4 hours without the Qwen row, 6 with it. Each stage's time is printed and recorded.
set -euo pipefail
cd "$(dirname "$0")/.."
N_DEV=${N_DEV:-300}
N_QWEN=${N_QWEN:-$N_DEV}
SYNTH_LIMIT=${SYNTH_LIMIT:-3000}
SFT_STEPS=${SFT_STEPS:-300}
RL_FROM=${RL_FROM:-100}
SFT_LR=${SFT_LR:-3e-4}
RL_STEPS=${RL_STEPS:-15}
RL_QUESTIONS=${RL_QUESTIONS:-2}
RL_LR=${RL_LR:-5e-5}
RL_BETA=${RL_BETA:-0.02}
RL_GROUP=${RL_GROUP:-4}
WORK=${WORK:-bench/learning}
AGENTRT=${AGENTRT:-target/release/agentrt}
[ -x "$AGENTRT" ] || cargo build --release --bin agentrt
mkdir -p "$WORK"
TIMES="$WORK/stage_times.tsv"
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

# The trained agent's system prompt (bench/learning_prompt.txt): the tools and the reply format in a few
# lines, since the trajectories teach the rest and each of its tokens is paid in every training and
# evaluation sequence. The adapter records it in its agent.json, so `agentrt eval --adapter` prompts it
# the same way.
PROMPT=$(cat bench/learning_prompt.txt)
EVAL=(eval --split dev --num-samples "$N_DEV" --seed 0)
stage index "$HOME/.cache/agentrt/index/CURRENT" "$AGENTRT" index
stage trajectories "$WORK/synth.jsonl" "$AGENTRT" trajectories synth --style passages --limit "$SYNTH_LIMIT" --system-prompt "$PROMPT" --out "$WORK/synth.jsonl"
stage sft "$WORK/sft/DONE" bash -c "'$AGENTRT' sft --data '$WORK/synth.jsonl' --max-steps $SFT_STEPS --lr $SFT_LR --set data.val_examples=40 --set sft.eval_steps=50 --set run.save_total_limit=0 --output-dir '$WORK' --run-name sft --no-progress && touch '$WORK/sft/DONE'"
SFT_CKPT=$(ls -d "$WORK"/sft/checkpoint-* | sort -t- -k2 -n | tail -1)
RL_START="$WORK/sft/checkpoint-$RL_FROM"
[ -d "$RL_START" ] || { echo "RL_FROM=$RL_FROM: $RL_START is not a checkpoint of the SFT run (save_steps is 50)" >&2; exit 1; }
# RL plays the adapter exactly as SFT trained it (its agent.json, turned into the run's [rollout] config),
# from that SFT checkpoint, which is also the KL reference.
python3 - "$RL_START/agent.json" > "$WORK/rl.toml" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
print("[rollout]")
print("system_prompt =", json.dumps(a["system_prompt"]))
print("demonstration =", "true" if a["demonstration"] else "false")
print("max_turns =", a["max_turns"])
print("max_new_tokens =", a["max_new_tokens"])
PY
stage rl "$WORK/rl/DONE" bash -c "'$AGENTRT' train --config '$WORK/rl.toml' --init-adapter '$RL_START' --max-steps $RL_STEPS --lr $RL_LR --beta $RL_BETA \
  --set rollout.num_rollouts=$RL_GROUP --set rollout.batch_size=$RL_QUESTIONS --set run.save_steps=5 --output-dir '$WORK' --run-name rl --no-progress && touch '$WORK/rl/DONE'"
RL_CKPT=$(ls -d "$WORK"/rl/checkpoint-* | sort -t- -k2 -n | tail -1)

stage eval-zero-shot "$WORK/eval/zero-shot/results.json" "$AGENTRT" "${EVAL[@]}" --baseline zero-shot --output-dir "$WORK/eval/zero-shot"
stage eval-random "$WORK/eval/random/results.json" "$AGENTRT" "${EVAL[@]}" --baseline random --output-dir "$WORK/eval/random"
stage eval-sft-$RL_FROM "$WORK/eval/sft-$RL_FROM/results.json" "$AGENTRT" "${EVAL[@]}" --adapter "$RL_START" --output-dir "$WORK/eval/sft-$RL_FROM"
stage eval-sft "$WORK/eval/sft/results.json" "$AGENTRT" "${EVAL[@]}" --adapter "$SFT_CKPT" --output-dir "$WORK/eval/sft"
stage eval-sft-rl "$WORK/eval/sft-rl/results.json" "$AGENTRT" "${EVAL[@]}" --adapter "$RL_CKPT" --output-dir "$WORK/eval/sft-rl"
stage eval-qwen "$WORK/eval/qwen-full/results.json" "$AGENTRT" eval --split dev --num-samples "$N_QWEN" --seed 0 \
  --model qwen2.5-coder-0.5b --system-prompt full --output-dir "$WORK/eval/qwen-full"

"$AGENTRT" plot "$WORK/sft" --out "$WORK/sft-curves.png"
"$AGENTRT" plot "$WORK/rl" --out "$WORK/rl-curves.png"
"$AGENTRT" eval table --out "$WORK/accuracy.png" \
  "zero-shot=$WORK/eval/zero-shot" "random=$WORK/eval/random" "SFT $RL_FROM=$WORK/eval/sft-$RL_FROM" \
  "SFT $RL_FROM + RL $RL_STEPS=$WORK/eval/sft-rl" "SFT $SFT_STEPS (shipped)=$WORK/eval/sft" \
  "qwen2.5-coder-0.5b zero-shot (full prompt)=$WORK/eval/qwen-full" > "$WORK/table.md"
echo "table: $WORK/table.md; stage times: $TIMES" >&2
