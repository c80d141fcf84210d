#!/usr/bin/env python3
"""The transformers side of `agentrt bench rollout` (not run by hand).

agentrt plays the episodes (the sandbox, the index, the tool turns) and hands each turn's prompts to this
process as token ids, exactly the ids its own sampler reads; this process samples the replies with
transformers' `generate` on the same GGUF (dequantized to f32, as ours is) and returns the ids.

Protocol, one JSON object a line:
  argv: MODEL.gguf THREADS
  out:  {"ready": true, "torch": ..., "transformers": ..., "threads": N}
  in:   {"prompts": [[id, ...], ...], "max_new_tokens": N, "temperature": T, "top_k": K, "top_p": P,
         "stop": ["</answer>", ...], "eos_ids": [id, ...], "seed": S}
  out:  {"completions": [{"ids": [...], "finish": "eos" | "stop" | "length"}, ...], "seconds": S}

Rows that share a prompt (a question's G rollouts on their first turn) are sampled as one prompt with
`num_return_sequences=G`; rows with different prompts are left-padded into one batch.
"""
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "policy"))
import torch  # noqa: E402
import transformers  # noqa: E402
from common import load_reference  # noqa: E402


def cut(tok, ids, eos_ids, stops, max_new):
    """A row's reply as our sampler ends it: at the first end-of-turn id (kept), or at the token that
    completes a stop string, or after max_new tokens."""
    out = []
    for t in ids:
        if t in eos_ids:
            return out + [t], "eos"
        out.append(t)
        if stops and any(s in tok.decode(out[-24:], skip_special_tokens=False) for s in stops):
            text = tok.decode(out, skip_special_tokens=False)
            if any(s in text for s in stops):
                return out, "stop"
    return out[:max_new], "length"


def main():
    path, threads = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(threads)
    tok, model = load_reference(path)
    print(json.dumps({"ready": True, "torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        t0 = time.perf_counter()
        torch.manual_seed(req["seed"])
        prompts = req["prompts"]
        eos_ids = set(req["eos_ids"])
        pad = req["eos_ids"][0]
        counts = Counter(tuple(p) for p in prompts)
        per_prompt = next(iter(counts.values()))
        shared = per_prompt > 1 and all(c == per_prompt for c in counts.values())
        batch = [list(p) for p in dict.fromkeys(tuple(p) for p in prompts)] if shared else prompts
        width = max(len(p) for p in batch)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                do_sample=True,
                temperature=req["temperature"],
                top_k=req["top_k"],
                top_p=req["top_p"],
                repetition_penalty=1.0,
                max_new_tokens=req["max_new_tokens"],
                num_return_sequences=per_prompt if shared else 1,
                stop_strings=req["stop"] or None,
                tokenizer=tok,
                eos_token_id=req["eos_ids"],
                pad_token_id=pad,
            )
        rows = out[:, width:].tolist()
        if shared:
            # Output rows come prompt by prompt, num_return_sequences each: hand them out in prompt order.
            taken = Counter()
            order = {tuple(p): i for i, p in enumerate(batch)}
            mapped = []
            for p in prompts:
                k = order[tuple(p)]
                mapped.append(rows[k * per_prompt + taken[k]])
                taken[k] += 1
            rows = mapped
        completions = []
        for r in rows:
            got, finish = cut(tok, r, eos_ids, req["stop"], req["max_new_tokens"])
            completions.append({"ids": got, "finish": finish})
        print(json.dumps({"completions": completions, "seconds": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    main()
