"""Shared helpers of the policy parity and benchmark scripts: the venv, the Rust driver, the model path."""
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENV_PY = HERE / ".venv" / "bin" / "python"


def ensure_venv():
    """Re-executes this script inside bench/policy/.venv, creating it first (torch, transformers, peft, gguf)."""
    if Path(sys.prefix).resolve() == (HERE / ".venv").resolve():
        return
    if not VENV_PY.exists() or subprocess.run([str(VENV_PY), "-c", "import torch, transformers, peft, gguf"]).returncode != 0:
        subprocess.run(["bash", str(HERE / "setup_venv.sh")], check=True)
    os.execv(str(VENV_PY), [str(VENV_PY), *sys.argv])


def target_dir():
    return Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))


def build_tool():
    """Builds the Rust driver. POLICY_TOOL_PROFILE=dev reuses a test build (dependencies are opt-level 3 there
    too, see the workspace profile), which saves a full release build on a busy machine."""
    profile = os.environ.get("POLICY_TOOL_PROFILE", "release")
    flag = ["--release"] if profile == "release" else []
    subprocess.run(["cargo", "build", *flag, "-p", "agentrt-policy", "--example", "policy_tool"], cwd=ROOT, check=True)
    return target_dir() / ("release" if profile == "release" else "debug") / "examples" / "policy_tool"


def run_tool(tool, request):
    p = subprocess.run([str(tool)], input=json.dumps(request), capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"policy_tool failed: {p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def gguf_path():
    """Where agentrt-assets caches the default model (the Rust tool fetches it first)."""
    if os.environ.get("AGENTRT_CACHE"):
        root = Path(os.environ["AGENTRT_CACHE"])
    elif os.environ.get("XDG_CACHE_HOME"):
        root = Path(os.environ["XDG_CACHE_HOME"]) / "agentrt"
    else:
        root = Path.home() / ".cache" / "agentrt"
    return root / "assets" / "smollm2-135m-instruct-q4_1" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_reference(path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, torch_dtype=torch.float32)
    model.eval()
    return tok, model
