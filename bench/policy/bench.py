#!/usr/bin/env python3
"""agentrt-policy vs transformers + PEFT on this CPU, same model (SmolLM2-135M-Instruct GGUF, f32) and batch.

1. Sampling: N completions of one chat prompt at temperature 1, max_tokens each; tokens/s.
2. One LoRA train step (r=16 on q,k,v,o,gate,up,down; forward, backward, AdamW) on 4 x 256 tokens.
Prints each side's numbers and the ratio ours/theirs (>1 means we are faster). Creates bench/policy/.venv itself.
Usage: python3 bench/policy/bench.py [--n 8] [--max-tokens 64] [--steps 3]
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ensure_venv, build_tool, run_tool, gguf_path, load_reference  # noqa: E402

ensure_venv()

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seq", type=int, default=256)
    args = ap.parse_args()
    tool = build_tool()
    prompt = "Tell me a story about a robot."
    ours_s = run_tool(tool, {"cmd": "bench_sample", "n": args.n, "max_tokens": args.max_tokens, "prompt": prompt})
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 49152, (4, args.seq), generator=g).tolist()
    ours_t = run_tool(tool, {"cmd": "bench_train", "ids": ids, "steps": args.steps, "rank": 16})
    print(json.dumps({"ours_sampling": ours_s, "ours_train": ours_t}), flush=True)

    tok, model = load_reference(gguf_path())
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
    chat = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    batch = chat.repeat(args.n, 1)
    with torch.no_grad():
        model.generate(batch[:1], max_new_tokens=2, do_sample=True)
        t = time.time()
        out = model.generate(batch, max_new_tokens=args.max_tokens, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                             attention_mask=torch.ones_like(batch), pad_token_id=tok.eos_token_id)
        secs = time.time() - t
    gen = out[:, batch.shape[1]:]
    eos = tok.eos_token_id
    n_tok = 0
    for row in gen.tolist():
        n_tok += (row.index(eos) + 1) if eos in row else len(row)
    theirs_s = {"tokens": n_tok, "seconds": secs, "tokens_per_s": n_tok / secs}

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    pm = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets, lora_dropout=0.0, task_type="CAUSAL_LM"))
    pm.train()
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=1e-4)
    x = torch.tensor(ids)
    times = []
    for _ in range(args.steps):
        t = time.time()
        logits = pm(x).logits[:, :-1]
        lp = torch.log_softmax(logits, -1).gather(2, x[:, 1:].unsqueeze(2)).sum()
        loss = -lp / x.shape[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.time() - t)
    theirs_t = {"step_seconds": times}

    best = lambda xs: min(xs)  # noqa: E731
    report = {
        "cpu_and_kernels": ours_s.get("kernels"),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads_torch": torch.get_num_threads(),
        "sampling": {"ours": ours_s, "transformers": theirs_s, "ratio_tokens_per_s": ours_s["tokens_per_s"] / theirs_s["tokens_per_s"]},
        "train_step_4x%d" % args.seq: {
            "ours_s": ours_t["step_seconds"], "peft_s": times,
            "ratio_speed_best": best(times) / best(ours_t["step_seconds"]),
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
