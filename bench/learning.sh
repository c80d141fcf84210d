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
#        WORK=bench/learning/read-on (runs and evaluations)   AGENTRT=target/release/agentrt (built if missing;
#        elsewhere, built and copied there: a campaign keeps its own binary, so that a build in a later sitting
#        cannot change what plays its later evaluations)   RL_SAVE_STEPS=5 (RL checkpoints; the sweep's too)
#        STYLE=read (the program the trajectories teach: `trajectories synth --style`)
#        PROMPT_FILE=bench/learning_prompt.txt (the trained agent's system prompt)
#        RL_SWEEP_LRS= (e.g. 1e-5,3e-5,1e-4: first a short run at each learning rate, `agentrt sweep`; the
#        long run goes on from the point whose held-out slice scored best, to RL_STEPS in all)
#        RL_SWEEP_STEPS=15  RL_EVAL_QUESTIONS=100  RL_EVAL_STEPS=5 (the held-out slice while RL runs)
#        OUT=bench/learning (tables, plots, stage times)   N_PASS=0 dev questions played 8 times at the RL
#        temperature by the SFT adapter, for pass@8 beside pass@1 (0: skipped)
#        SFT_ADAPTER= (a shipped SFT adapter, e.g. models/qwen2.5-coder-0.5b-wiki-scan-sft: no SFT stage, RL
#        starts from it)   SFT_ONLY=0 (1: stop once the SFT adapter's evaluations stand, before RL)
# The campaign of issue 59 (Qwen on the lean scan program; hours, several sittings, so its work lives in the
# cache, which outlives a checkout; run it again and it goes on where it stopped; RL starts from the SFT
# checkpoint of lowest validation loss, 100 of 150):
#        STYLE=scan PROMPT_FILE=bench/learning_prompt_scan.txt MODEL=qwen2.5-coder-0.5b SFT_LR=2e-4
#        SFT_MAX_STEPS=150 SFT_STEP=100 SFT_WARMUP=10 SFT_EVAL_STEPS=25 SFT_SAVE_STEPS=10 N_PASS=48
#        RL_SWEEP_LRS=3e-5,1e-4 RL_SWEEP_STEPS=12 RL_STEPS=40 RL_EVAL_QUESTIONS=48 RL_EVAL_STEPS=12 RL_SAVE_STEPS=2
#        WORK=$AGENTRT_CACHE/runs/campaign/qwen-lean AGENTRT=$AGENTRT_CACHE/runs/campaign/qwen-lean/agentrt-18bf9f4
#        OUT=bench/learning/campaign/qwen-lean bench/learning.sh
#        (the stages to the RL long run's checkpoint 16 ran on `agentrt`, a copy of the b8f9ae5 build; the rest
#        on `agentrt-18bf9f4`, the same arithmetic plus the entropy proxy and read-on share in metrics.jsonl)
#        Its first machine's cache was lost at the long run's step ~30 (the evidence to there is committed); it
#        goes on, on another machine, from the shipped SFT adapter at the sweep's winning rate, without the sweep:
#        SFT_ADAPTER=models/qwen2.5-coder-0.5b-wiki-scan-sft N_PASS=0 RL_SWEEP_LRS= RL_LR=3e-5 and the rest as
#        above, with AGENTRT=$AGENTRT_CACHE/runs/campaign/qwen-lean/agentrt-<commit> (that machine's own build)
# The SFT start of "Find the passage" (the find program: search_passages, one tool call), the same recipe:
#        STYLE=find PROMPT_FILE=bench/learning_prompt_find.txt MODEL=qwen2.5-coder-0.5b SFT_LR=2e-4
#        SFT_MAX_STEPS=150 SFT_STEP=100 SFT_WARMUP=10 SFT_EVAL_STEPS=25 SFT_SAVE_STEPS=10 SFT_ONLY=1
#        WORK=$AGENTRT_CACHE/runs/campaign/qwen-find AGENTRT=$AGENTRT_CACHE/runs/campaign/qwen-find/agentrt-<commit> (the first: agentrt-a11f09b, a release build)
#        OUT=bench/learning/campaign/qwen-find bench/learning.sh
# Budget on a 2-core AMD EPYC (AVX2): trajectories 45 s; SFT ~20 s a step of 8 alone (720 steps an epoch);
# RL 2-5 min a step (sampling grows with the groups dynamic sampling draws, the update with those kept),
# plus ~2 min per held-out evaluation; each 300-question evaluation ~10-15 min (Qwen2.5-Coder-0.5B: RL
# 5-9 min a step, a 300-question evaluation 40 min). Each stage's wall time is recorded in stage_times.tsv.
set -euo pipefail
# The body is one block, so bash reads all of it before it runs: the campaign runs for hours across
# sittings, and an edit of this file meanwhile (a commit, a pull) must not change what the running copy does.
{
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
OUT=${OUT:-bench/learning}
mkdir -p "$OUT"
WORK=${WORK:-$OUT/read-on}
AGENTRT=${AGENTRT:-target/release/agentrt}
STYLE=${STYLE:-read}
PROMPT_FILE=${PROMPT_FILE:-bench/learning_prompt.txt}
RL_SWEEP_LRS=${RL_SWEEP_LRS:-}
RL_SWEEP_STEPS=${RL_SWEEP_STEPS:-15}
RL_EVAL_QUESTIONS=${RL_EVAL_QUESTIONS:-100}
RL_EVAL_STEPS=${RL_EVAL_STEPS:-5}
RL_SAVE_STEPS=${RL_SAVE_STEPS:-5}
N_PASS=${N_PASS:-0}
SFT_ADAPTER=${SFT_ADAPTER:-}
if [ ! -x "$AGENTRT" ]; then
  cargo build --release --bin agentrt
  [ "$AGENTRT" = target/release/agentrt ] || install -D target/release/agentrt "$AGENTRT"
fi
mkdir -p "$WORK"
TIMES="$OUT/stage_times.tsv"
# The CPU the following stages ran on: a campaign that resumes on another machine says so by a new line.
CPU_LINE=$(printf 'cpu\t%s; %s' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(grep -o 'avx[^ ]*\|amx[^ ]*' /proc/cpuinfo | sort -u | xargs)")
[ "$(grep '^cpu' "$TIMES" 2>/dev/null | tail -1)" = "$CPU_LINE" ] || echo "$CPU_LINE" >> "$TIMES"

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
  # By the number after the last "checkpoint-" (the path above it may hold hyphens of its own).
  if [ "$2" = last ]; then ls -d "$1"/checkpoint-* | awk -F'checkpoint-' '{print $NF "\t" $0}' | sort -n | tail -1 | cut -f2; else echo "$1/checkpoint-$2"; fi
}

# The trained agent's system prompt (PROMPT_FILE): the tools and the reply format in a few
# lines, since the trajectories teach the rest and each of its tokens is paid in every training and
# evaluation sequence. The adapter records it in its agent.json, so `agentrt eval --adapter` prompts it
# the same way.
PROMPT=$(cat "$PROMPT_FILE")
# The dev questions every evaluation plays (a prefix of them for zero-shot and pass@8), in one place.
DEV=(eval --split dev --seed 0)
EVAL=("${DEV[@]}" --num-samples "$N_DEV")
stage index "$HOME/.cache/agentrt/index/CURRENT" "$AGENTRT" index
stage trajectories "$WORK/synth.jsonl" "$AGENTRT" trajectories synth --style "$STYLE" --limit "$SYNTH_LIMIT" --system-prompt "$PROMPT" --out "$WORK/synth.jsonl"
# The ceiling of the program the trajectories teach: the share of dev questions whose printed sections hold
# a gold answer (the synthesiser answers exactly when they do), and its tool calls.
stage ceiling-dev "$WORK/synth-dev.jsonl" "$AGENTRT" trajectories synth --style "$STYLE" --split dev --system-prompt "$PROMPT" --out "$WORK/synth-dev.jsonl"
if [ -n "$SFT_ADAPTER" ]; then
  # A shipped SFT adapter stands in for the SFT stage (a campaign resumed on a new machine, whose cache lost
  # the run): RL starts from it, and its own 300-question evaluation is played again here.
  [ -e "$SFT_ADAPTER/agent.json" ] || { echo "SFT_ADAPTER=$SFT_ADAPTER has no agent.json" >&2; exit 1; }
  SFT_CKPT=$SFT_ADAPTER
  SFT_LAST=$SFT_ADAPTER
else
  stage sft "$WORK/sft/DONE" bash -c "if [ -e '$WORK/sft/config.toml' ]; then '$AGENTRT' sft --resume '$WORK/sft' --max-steps $SFT_MAX_STEPS --no-progress; else \
    '$AGENTRT' sft --model $MODEL --data '$WORK/synth.jsonl' --epochs $SFT_EPOCHS --max-steps $SFT_MAX_STEPS --batch-size $SFT_BATCH --lr $SFT_LR --set sft.warmup_steps=$SFT_WARMUP \
    --set data.val_examples=100 --set sft.eval_steps=$SFT_EVAL_STEPS --set run.save_steps=$SFT_SAVE_STEPS --set run.save_total_limit=0 --output-dir '$WORK' --run-name sft --no-progress; fi \
    && touch '$WORK/sft/DONE'"
  SFT_CKPT=$(checkpoint "$WORK/sft" "$SFT_STEP")
  SFT_LAST=$(checkpoint "$WORK/sft" last)
fi
# The SFT adapter's evaluations come before RL, so that its row stands while RL runs for hours.
stage eval-sft "$WORK/eval/sft/results.json" "$AGENTRT" "${EVAL[@]}" --adapter "$SFT_CKPT" --output-dir "$WORK/eval/sft"
# pass@8 at the RL temperature beside pass@1: what RL can take from the SFT adapter's own samples.
if [ "$N_PASS" -gt 0 ]; then
  RL_TEMPERATURE=$(sed -n 's/^temperature *= *//p' bench/learning_rl.toml)
  stage eval-sft-pass8 "$WORK/eval/sft-pass8/results.json" "$AGENTRT" "${DEV[@]}" --num-samples "$N_PASS" --adapter "$SFT_CKPT" \
    --num-generations 8 --temperature "$RL_TEMPERATURE" --output-dir "$WORK/eval/sft-pass8"
fi
# The last SFT checkpoint too, when RL starts from another (its own evaluation otherwise).
if [ "$SFT_LAST" != "$SFT_CKPT" ]; then
  stage eval-sft-last "$WORK/eval/sft-last/results.json" "$AGENTRT" "${EVAL[@]}" --adapter "$SFT_LAST" --output-dir "$WORK/eval/sft-last"
  SFT_LAST_ROW="SFT ($(basename "$SFT_LAST"))=$WORK/eval/sft-last"
fi
if [ "${SFT_ONLY:-0}" = 1 ]; then
  echo "== SFT_ONLY=1: the SFT rows stand ($WORK/eval); stopping before RL" >&2
  exit
fi

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
RL_SLICE=(--set "run.eval_questions=$RL_EVAL_QUESTIONS" --set "run.eval_steps=$RL_EVAL_STEPS" --set "run.save_steps=$RL_SAVE_STEPS")
# The learning-rate sweep (RL_SWEEP_LRS): a short run at each rate from the same SFT checkpoint; `agentrt
# sweep` resumes a stopped one and keeps a finished one, so this stage too goes on where it stopped.
rl_sweep() {
  "$AGENTRT" sweep --config bench/learning_rl.toml --grid "algorithm.lr=$RL_SWEEP_LRS" "${PLAYED[@]}" "${RL_SLICE[@]}" \
    --set "model.init_adapter=$SFT_CKPT" --set "run.max_steps=$RL_SWEEP_STEPS" --set "run.output_dir=$WORK/rl-sweep"
  touch "$WORK/rl-sweep/DONE"
}
if [ -n "$RL_SWEEP_LRS" ]; then
  stage rl-sweep "$WORK/rl-sweep/DONE" rl_sweep
  # The rate whose held-out slice scored best at its last evaluation within the sweep's steps (ties: the
  # smaller rate; the winner's later evaluations, once the long run goes on from it, do not count).
  RL_CHOICE=$(python3 - "$WORK/rl-sweep" "$RL_SWEEP_STEPS" <<'PY'
import json, pathlib, sys, tomllib
best = None
for run in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    evals, config = run / "dev_eval.jsonl", run / "config.toml"
    if not (evals.is_file() and config.is_file()):
        continue
    within = [e for e in map(json.loads, filter(str.strip, evals.read_text().splitlines())) if e["step"] <= int(sys.argv[2])]
    if not within:
        continue
    last = within[-1]
    lr = tomllib.loads(config.read_text())["algorithm"]["lr"]
    if best is None or (last["accuracy"], -lr) > best[0]:
        best = ((last["accuracy"], -lr), lr, run)
if best is None:
    sys.exit("the sweep left no held-out evaluation to choose a learning rate by")
print(f"{best[1]}\t{best[2]}")
PY
  )
  RL_LR=${RL_CHOICE%%$'\t'*}
  RL_BEST=${RL_CHOICE#*$'\t'}
  # The learning rate is constant, so the long run goes on from the winning point itself (linked as
  # $WORK/rl): the sweep's steps at that rate are its first ones, not thrown away.
  [ -e "$WORK/rl" ] || ln -s "$RL_BEST" "$WORK/rl"
  echo "== rl-sweep: the long run goes on from $RL_BEST (lr $RL_LR)" >&2
fi
rl() {
  if [ -e "$WORK/rl/config.toml" ]; then
    "$AGENTRT" train --resume "$WORK/rl" --max-steps "$RL_STEPS" --no-progress
  else
    "$AGENTRT" train --config bench/learning_rl.toml "${PLAYED[@]}" "${RL_SLICE[@]}" --init-adapter "$SFT_CKPT" --lr "$RL_LR" --max-steps "$RL_STEPS" \
      --output-dir "$WORK" --run-name rl --no-progress
  fi
  touch "$WORK/rl/DONE"
}
stage rl "$WORK/rl/DONE" rl
RL_CKPT=$(checkpoint "$WORK/rl" "$RL_STEP")

# The evaluation the campaign is for comes first, so that a sitting that ends early still has it.
stage eval-sft-rl "$WORK/eval/sft-rl/results.json" "$AGENTRT" "${EVAL[@]}" --adapter "$RL_CKPT" --output-dir "$WORK/eval/sft-rl"
# Zero-shot answers none of them in every run so far; its first N_ZERO_SHOT questions (a prefix of the
# N_DEV, same seed) show it at a third of the cost (25 minutes for 300 on two cores).
stage eval-zero-shot "$WORK/eval/zero-shot/results.json" "$AGENTRT" "${DEV[@]}" --num-samples "$N_ZERO_SHOT" --baseline zero-shot --model "$MODEL" --output-dir "$WORK/eval/zero-shot"
stage eval-random "$WORK/eval/random/results.json" "$AGENTRT" "${EVAL[@]}" --baseline random --output-dir "$WORK/eval/random"

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
[ -n "$SFT_ADAPTER" ] || "$AGENTRT" plot "$WORK/sft" --out "$OUT/sft-curves.png"
"$AGENTRT" plot "$WORK/rl" --out "$OUT/rl-curves.png"
"$AGENTRT" eval table --out "$OUT/accuracy.png" \
  "zero-shot=$WORK/eval/zero-shot" "random=$WORK/eval/random" "SFT ($(basename "$SFT_CKPT"))=$WORK/eval/sft" \
  "SFT + RL ($(basename "$RL_CKPT"))=$WORK/eval/sft-rl" ${SFT_LAST_ROW:+"$SFT_LAST_ROW"} > "$OUT/table.md"
echo "table: $OUT/table.md; paired: $OUT/paired.md; stage times: $TIMES" >&2
exit
}
