#!/usr/bin/env bash
# Re-make models/minilm-l6-v2-queries-l3 from all-MiniLM-L6-v2 and the bundled data: about 25 minutes
# on two cores (5 for the teacher's vectors, 20 for 5 epochs of the student). Torch and transformers go
# into a venv of their own (WORK/.venv); nothing else is touched until export.py writes the model.
#   models/minilm-l6-v2-queries-l3/recipe/run.sh [WORK_DIR]      (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK="${1:-target/distill-queries}"
mkdir -p "$WORK"
if [ ! -x "$WORK/.venv/bin/python" ]; then
    python3 -m venv "$WORK/.venv"
    "$WORK/.venv/bin/pip" install --quiet --index-url https://download.pytorch.org/whl/cpu torch==2.15.0 ||
        "$WORK/.venv/bin/pip" install --quiet torch==2.15.0
    "$WORK/.venv/bin/pip" install --quiet transformers==5.24.0 safetensors
fi
# The teacher, fetched and checked the way agentrt fetches it.
cargo run --release --quiet -p agentrt-search --example embed_query -- "warm up" 1 > /dev/null
TEACHER="${AGENTRT_CACHE:-$HOME/.cache/agentrt}/assets/all-minilm-l6-v2"
python3 models/minilm-l6-v2-queries-l3/recipe/make_texts.py "$WORK/texts.txt"
"$WORK/.venv/bin/python" models/minilm-l6-v2-queries-l3/recipe/distill.py "$TEACHER" "$WORK/texts.txt" "$WORK" 0,2,4 5 3e-4
"$WORK/.venv/bin/python" models/minilm-l6-v2-queries-l3/recipe/export.py "$WORK/student" models/minilm-l6-v2-queries-l3
