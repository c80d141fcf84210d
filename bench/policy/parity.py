#!/usr/bin/env python3
"""Parity of agentrt-policy with transformers + PEFT on the same weights (SmolLM2-135M-Instruct GGUF) and token ids.

Checks: tokenizer ids and chat template (ours rebuilt from GGUF metadata vs transformers' GGUF tokenizer),
per-token log-probs (max abs diff <= 1e-3), and the gradient of every LoRA tensor of one PEFT adapter
(relative L2 diff <= 1e-3). Creates bench/policy/.venv itself. Usage: python3 bench/policy/parity.py
"""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ensure_venv, build_tool, run_tool, gguf_path, load_reference  # noqa: E402

ensure_venv()

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402

torch.manual_seed(0)
torch.set_num_threads(max(1, torch.get_num_threads()))

TEXTS = [
    "What is the capital of France?",
    "def add(a, b):\n    return a + b  # 12345 tokens\n\n",
    "Ünïcödé — naïve café, 東京, emoji 🤖 and   spaces\t\ttabs",
    "<|im_start|>user\nhi<|im_end|>\n",
]


def ref_logprobs(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1]
    lp = torch.log_softmax(logits.double(), -1)
    return lp.gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)


def main():
    tool = build_tool()
    run_tool(tool, {"cmd": "tokenize", "texts": ["x"]})  # fetches the model
    path = gguf_path()
    tok, model = load_reference(path)
    report = {}

    ours = run_tool(tool, {"cmd": "tokenize", "texts": TEXTS})
    theirs = [tok.encode(t, add_special_tokens=False) for t in TEXTS]
    report["tokenizer_mismatches"] = sum(a != b for a, b in zip(ours["ids"], theirs))
    ref_chat = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "What is 2+2?"}], tokenize=False, add_generation_prompt=True
    )
    report["chat_template_equal"] = ours["chat"] == ref_chat

    seqs = [ours["ids"][0] + ours["ids"][1], ours["ids"][2] + ours["ids"][3] + ours["ids"][0]]
    lp = run_tool(tool, {"cmd": "logprobs", "ids": seqs})["logprobs"]
    diffs = []
    for s, row in zip(seqs, lp):
        ref = ref_logprobs(model, s)
        diffs.append(max(abs(float(r) - o) for r, o in zip(ref, row[: len(s) - 1])))
    report["logprob_max_abs_diff"] = max(diffs)

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=targets, lora_dropout=0.0, task_type="CAUSAL_LM"))
    # PEFT initialises B to zero, so A would get no gradient: make B random to test both.
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    with tempfile.TemporaryDirectory() as d:
        peft_model.save_pretrained(d)
        res = run_tool(tool, {"cmd": "grad", "ids": seqs, "adapter": d})
    peft_model.zero_grad()
    loss = 0
    for s in seqs:
        logits = peft_model(torch.tensor([s])).logits[0, :-1]
        lp_t = torch.log_softmax(logits, -1).gather(1, torch.tensor(s[1:]).unsqueeze(1)).sum()
        loss = loss - lp_t / len(seqs)
    loss.backward()
    ref_grads = {}
    for name, p in peft_model.named_parameters():
        if "lora_" in name:
            ref_grads[name.replace(".default", "")] = p.grad.flatten()
    rels, num, den = [], 0.0, 0.0
    for k, g in ref_grads.items():
        o = torch.tensor(res["grads"][k])
        rels.append(float((o - g).norm() / g.norm().clamp_min(1e-12)))
        num += float((o - g).norm() ** 2)
        den += float(g.norm() ** 2)
    report["loss_ours"] = res["loss"]
    report["loss_ref"] = float(loss)
    report["lora_grad_rel_diff_all"] = (num / den) ** 0.5
    report["lora_grad_rel_diff_worst_tensor"] = max(rels)
    report["lora_tensors_compared"] = len(rels)
    ok = report["logprob_max_abs_diff"] <= 1e-3 and report["lora_grad_rel_diff_all"] <= 1e-3
    report["pass"] = ok
    print(json.dumps(report, indent=2))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
