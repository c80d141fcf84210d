#!/usr/bin/env python3
"""The transformers + PEFT side of `agentrt bench train-step` (not run by hand).

agentrt plays a training step's rollouts and hands their samples here as token ids with the model-token
mask and an advantage each; this process runs the same update on the same GGUF (dequantized to f32, as
ours is): LoRA on the same projections (PEFT), the loss `-A·log p + beta·k3` per model token against the
base model (the adapters disabled) as the KL reference, each sample weighted 1 / (samples · its model
tokens), one backward over the batch (right-padded, as TRL batches it; or PEFT_PEER_MICRO_BATCH samples
at a time, the gradients accumulated), gradient clipping and an AdamW step.

Protocol, one JSON object a line:
  argv: MODEL.gguf THREADS
  out:  {"ready": true, "torch": ..., "transformers": ..., "peft": ..., "threads": N}
  in:   {"samples": [{"ids": [...], "mask": [bools], "advantage": A}, ...], "rank": R, "alpha": A,
         "targets": [...], "beta": B, "lr": LR, "max_grad_norm": G, "repeats": N}
  out:  {"seconds": [per repeat], "loss": first repeat's loss}
"""
import json
import os
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


def batch(samples):
    """Right-padded ids, attention mask, the model-token mask of each target and the advantages."""
    width = max(len(s["ids"]) for s in samples)
    ids = torch.tensor([s["ids"] + [0] * (width - len(s["ids"])) for s in samples])
    attn = torch.tensor([[1] * len(s["ids"]) + [0] * (width - len(s["ids"])) for s in samples])
    # Target t+1 of a sample counts when token t+1 is the model's.
    mask = torch.tensor([[float(m) for m in s["mask"][1:]] + [0.0] * (width - len(s["ids"])) for s in samples])
    return ids, attn, mask, torch.tensor([s["advantage"] for s in samples])


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
        # PEFT_PEER_MICRO_BATCH=N: N samples a forward and backward, the gradients accumulated (the same loss
        # and update; what a TRL user sets when a batch's activations do not fit, as Qwen2.5-0.5B's 8 samples
        # do not in 24 GB). Unset: the whole batch at once.
        micro = int(os.environ.get("PEFT_PEER_MICRO_BATCH", "0")) or len(samples)
        chunks = [batch(samples[i : i + micro]) for i in range(0, len(samples), micro)]
        n_samples = len(samples)
        seconds, first_loss = [], None
        for _ in range(req["repeats"]):
            t0 = time.perf_counter()
            opt.zero_grad()
            total = 0.0
            for ids, attn, mask, adv in chunks:
                with torch.no_grad(), model.disable_adapter():
                    ref = token_logprobs(model, ids, attn)
                lp = token_logprobs(model, ids, attn)
                diff = ref - lp
                k3 = diff.exp() - diff - 1.0
                per_token = -adv[:, None] * lp + req["beta"] * k3
                # Each sample weighted 1 / (samples in the step · its model tokens).
                loss = ((per_token * mask).sum(1) / (n_samples * mask.sum(1))).sum()
                loss.backward()
                total += loss.item()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], req["max_grad_norm"])
            opt.step()
            seconds.append(time.perf_counter() - t0)
            first_loss = total if first_loss is None else first_loss
        base = model.unload()
        print(json.dumps({"seconds": seconds, "loss": first_loss}), flush=True)


if __name__ == "__main__":
    main()
