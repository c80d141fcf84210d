"""Prints each run's steps and the episodes per hour of the steps after the first.

Usage: summarize.py RUN_DIR_OR_METRICS_JSONL...
"""
import json, os, sys
for run in sys.argv[1:]:
    path = os.path.join(run, "metrics.jsonl") if os.path.isdir(run) else run
    rows = [json.loads(l) for l in open(path) if l.strip()]
    rows = [r for r in rows if "seconds" in r and "episodes" in r]
    print(f"== {run}")
    for r in rows:
        s = r["seconds"]
        fwd = s.get("generate_forward")
        samp = r.get("tokens_sampled")
        print(f"step {r['step']}: episodes {r['episodes']} generate {s.get('generate',0):.1f} (forward {fwd}) "
              f"update {s.get('update',0):.1f} (ref {s.get('update_reference')}, fwd {s.get('update_forward')}, bwd {s.get('update_backward')}, opt {s.get('update_optimizer')}) "
              f"step {s['step']:.1f} | sampled {samp} prefilled {r.get('tokens_prefilled')} reused {r.get('tokens_reused')} "
              f"rows {r.get('update_rows')} tokens {r.get('update_tokens')} trained {r.get('trained_samples')} acc {r.get('accuracy'):.3f} gap {r.get('logprob_gap_abs_mean')}")
    later = rows[1:]
    if later:
        ep = sum(r["episodes"] for r in later); sec = sum(r["seconds"]["step"] for r in later)
        print(f"episodes/hour (steps 2..): {ep} episodes in {sec:.1f} s = {3600*ep/sec:.0f}")
        gen = [r for r in later if r.get('tokens_sampled') and r['seconds'].get('generate')]
        if gen:
            t = sum(r['tokens_sampled'] for r in gen)
            g = sum(r['seconds']['generate'] for r in gen)
            f = sum(r['seconds'].get('generate_forward') or 0 for r in gen)
            print(f"sampled tokens/s: {t} in {g:.1f} s generate = {t/g:.1f}; over forward {f:.1f} s = {t/f if f else float('nan'):.1f}")
