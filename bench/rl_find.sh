#!/usr/bin/env bash
# RL from the find SFT start (models/qwen2.5-coder-0.5b-wiki-find-sft), the loop of the issue "RL that
# adds": groups drawn where the answer can still be won (`rollout.draw = "unsettled"` over a pool of
# train questions whose gold the find program prints), the answer turn sampled hotter than the program turn
# (`rollout.temperature_after_tool`), and partial credit by token F0.5 (`env.wiki.partial_credit_beta`),
# the verdict still the main term. The held-out slice is the fast check's: printed train questions RL never
# draws (bench/rl_pool.py's `heldback` split), greedy, every RL_EVAL_STEPS steps from step 0.
#
# The run lives in the cache (WORK) and outlives a checkout: run this again and it resumes from its last
# checkpoint (the run directory's own resume) up to RL_STEPS.
#
# Env: WORK=$AGENTRT_CACHE/runs/campaign/qwen-find-rl  AGENTRT=target/release/agentrt (copied into WORK once,
#      so a rebuild does not change a running campaign)   RL_STEPS=200  RL_LR=5e-5  RL_EVAL_STEPS=6
#      POOL=400 HELDBACK=150 (bench/rl_pool.py)  SYNTH= the find synthesis the SFT start learnt from
#      (its kept question ids are the printed ones; without it, the splits of question_ids.json)  EXTRA= more `--set key=value` words
#      RESUME_EXTRA= `--set` words a resume may take (how often it logs, evaluates and saves)
#      START=models/qwen2.5-coder-0.5b-wiki-find-sft (a later stage starts from the last shipped RL adapter,
#      with DRAW_RECORDS and a new `run.seed` in EXTRA)
#      DRAW_RECORDS= the earlier stages' groups.jsonl, oldest first (joined into WORK/draw_records.jsonl, the
#      run's `rollout.draw_records`, so their settled questions are passed over)
#      EXTEND= an earlier stage's question_ids.json whose rlpool is settled: the pool is it plus POOL fresh
#      printed questions, the heldback the same (needs SYNTH; writes WORK/question_ids.json for the evidence)
#      IDS= the question_ids.json a stage plays when SYNTH is gone (default: the first stage's)
#      HELDBACK2= with EXTEND, this many fresh printed questions as a second held-back slice (heldback2)
#      HELDOUT_ARTICLES= with EXTEND, this many train articles out of the pool, 150 of their printed
#      questions the heldout slice (EVAL_SPLIT=heldout: the one check on articles the stage does not train on)
#      EVAL_SPLIT=heldback the slice the run evaluates; heldback2 for a stage whose start was chosen on
#      heldback (that slice flatters it); heldout for one whose pool leaves articles out
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${AGENTRT_CACHE:-$HOME/.cache/agentrt}
WORK=${WORK:-$CACHE/runs/campaign/qwen-find-rl}
SYNTH=${SYNTH:-$CACHE/runs/campaign/qwen-find/synth.jsonl}
RL_STEPS=${RL_STEPS:-200}
RL_LR=${RL_LR:-5e-5}
RL_EVAL_STEPS=${RL_EVAL_STEPS:-6}
START=${START:-models/qwen2.5-coder-0.5b-wiki-find-sft}
mkdir -p "$WORK"
if [ ! -x "$WORK/agentrt" ]; then
  cp "${AGENTRT:-target/release/agentrt}" "$WORK/agentrt.tmp" && mv "$WORK/agentrt.tmp" "$WORK/agentrt"
  git rev-parse HEAD > "$WORK/agentrt.commit"
fi
# The splits: an earlier stage's grown (EXTEND) or drawn from the synthesis where the cache still holds it,
# else the ones the campaign's evidence names (IDS), so a new machine plays the same.
IDS=${IDS:-bench/learning/campaign/qwen-find-rl/question_ids.json}
if [ ! -f "$WORK/questions.jsonl" ]; then
  if [ -n "${EXTEND:-}" ]; then
    [ -f "$SYNTH" ] || { echo "EXTEND=$EXTEND needs the find synthesis at SYNTH=$SYNTH (agentrt trajectories synth --style find)" >&2; exit 1; }
    python3 bench/rl_pool.py "$SYNTH" data/wiki/questions.jsonl "$WORK/questions.jsonl" --extend "$EXTEND" --pool "${POOL:-400}" --heldback2 "${HELDBACK2:-0}" --heldout-articles "${HELDOUT_ARTICLES:-0}" --ids-out "$WORK/question_ids.json"
  elif [ -f "$SYNTH" ]; then
    python3 bench/rl_pool.py "$SYNTH" data/wiki/questions.jsonl "$WORK/questions.jsonl" --pool "${POOL:-400}" --heldback "${HELDBACK:-150}"
  else
    python3 bench/rl_pool.py --ids "$IDS" data/wiki/questions.jsonl "$WORK/questions.jsonl"
  fi
fi
if [ -n "${DRAW_RECORDS:-}" ] && [ ! -f "$WORK/draw_records.jsonl" ]; then
  # shellcheck disable=SC2086
  cat $DRAW_RECORDS > "$WORK/draw_records.jsonl.tmp" && mv "$WORK/draw_records.jsonl.tmp" "$WORK/draw_records.jsonl"
fi
# The run's record is the joined file itself, so a WORK that holds one plays it without DRAW_RECORDS again.
RECORDS=()
[ ! -f "$WORK/draw_records.jsonl" ] || RECORDS=(--set "rollout.draw_records=$WORK/draw_records.jsonl")
EVAL_SPLIT=${EVAL_SPLIT:-heldback}
HELDBACK_N=$(grep -c "\"split\": \"$EVAL_SPLIT\"" "$WORK/questions.jsonl" || true)
[ "$HELDBACK_N" -gt 0 ] || { echo "$WORK/questions.jsonl has no $EVAL_SPLIT questions (EVAL_SPLIT)" >&2; exit 1; }
if [ -e "$WORK/rl/config.toml" ]; then
  # shellcheck disable=SC2086
  exec "$WORK/agentrt" train --resume "$WORK/rl" --max-steps "$RL_STEPS" --no-progress ${RESUME_EXTRA:-}
fi
# shellcheck disable=SC2086
exec "$WORK/agentrt" train --config bench/learning_rl.toml --init-adapter "$START" --lr "$RL_LR" --max-steps "$RL_STEPS" \
  --set "env.wiki.questions=$WORK/questions.jsonl" --set env.wiki.split=rlpool \
  --set "run.eval_split=$EVAL_SPLIT" --set run.eval_skip=0 --set "run.eval_questions=$HELDBACK_N" --set "run.eval_steps=$RL_EVAL_STEPS" \
  --set rollout.draw=unsettled --set rollout.temperature_after_tool=1.1 \
  --set env.wiki.partial_credit_beta=0.5 --set algorithm.f1_weight=0.3 \
  --set run.save_steps=2 "${RECORDS[@]}" ${EXTRA:-} \
  --output-dir "$WORK" --run-name rl --no-progress
