#!/usr/bin/env python3
"""The transformers + PEFT side of `agentrt bench train-step` (not run by hand).

agentrt plays a training step's rollouts and hands their samples here as token ids with the model-token
mask and an advantage each; this process runs the same update on the same GGUF (dequantized to f32, as
ours is): LoRA on the same projections (PEFT), the loss `-A·log p + beta·k3` per model token against the
base model (the adapters disabled) as the KL reference, each sample weighted 1 / (samples · its model
tokens), one backward over the batch (right-padded, as TRL batches it), gradient clipping and an AdamW
step.

Protocol, one JSON object a line:
  argv: MODEL.gguf THREADS
  out:  {"ready": true, "torch": ..., "transformers": ..., "peft": ..., "threads": N}
  in:   {"samples": [{"ids": [...], "mask": [bools], "advantage": A}, ...], "rank": R, "alpha": A,
         "targets": [...], "beta": B, "lr": LR, "max_grad_norm": G, "repeats": N}
  out:  {"seconds": [per repeat], "loss": first repeat's loss}
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "policy"))
import peft  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from common import load_reference  # noqa: E402


def token_logprobs(model, ids, attn):
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def main():
    path, threads = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(threads)
    _, base = load_reference(path)
    print(json.dumps({"ready": True, "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__, "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        config = peft.LoraConfig(r=req["rank"], lora_alpha=req["alpha"], target_modules=req["targets"], lora_dropout=0.0, task_type="CAUSAL_LM")
        model = peft.get_peft_model(base, config)
        model.train()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=req["lr"])
        samples = req["samples"]
        width = max(len(s["ids"]) for s in samples)
        ids = torch.tensor([s["ids"] + [0] * (width - len(s["ids"])) for s in samples])
        attn = torch.tensor([[1] * len(s["ids"]) + [0] * (width - len(s["ids"])) for s in samples])
        # Target t+1 of a sample counts when token t+1 is the model's.
        mask = torch.tensor([[float(m) for m in s["mask"][1:]] + [0.0] * (width - len(s["ids"])) for s in samples])
        n_model = mask.sum(1)
        weight = 1.0 / (len(samples) * n_model)
        adv = torch.tensor([s["advantage"] for s in samples])
        seconds, first_loss = [], None
        for _ in range(req["repeats"]):
            t0 = time.perf_counter()
            with torch.no_grad(), model.disable_adapter():
                ref = token_logprobs(model, ids, attn)
            lp = token_logprobs(model, ids, attn)
            diff = ref - lp
            k3 = diff.exp() - diff - 1.0
            per_token = -adv[:, None] * lp + req["beta"] * k3
            loss = ((per_token * mask).sum(1) * weight).sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], req["max_grad_norm"])
            opt.step()
            seconds.append(time.perf_counter() - t0)
            first_loss = loss.item() if first_loss is None else first_loss
        base = model.unload()
        print(json.dumps({"seconds": seconds, "loss": first_loss}), flush=True)


if __name__ == "__main__":
    main()
