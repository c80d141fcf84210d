#!/usr/bin/env bash
# Creates bench/policy/.venv with the reference stack (torch CPU use, transformers, peft, gguf) from PyPI.
# torch's Linux wheels on PyPI pull CUDA libraries as dependencies; we accept that download (only PyPI is
# reachable here, so the CPU-only index is not an option) and run everything on the CPU.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --disable-pip-version-check -q "torch>=2.4" "transformers>=4.46" "peft>=0.13" "gguf>=0.10" safetensors numpy sentencepiece
"$venv/bin/python" -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
