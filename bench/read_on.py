#!/usr/bin/env python3
"""Reading on, per policy, from `agentrt eval` transcripts (issue 45's first measure).

For each episode: did its first program's output hold a gold answer (case-folded substring, as the
eval's answer_printed counts it)? Among the episodes whose first output lacked one, the share that wrote a
second program (read on), and their accuracy; the ceiling (a gold answer printed in any turn).

Usage: bench/read_on.py EVAL_DIR [EVAL_DIR ...]   (each holding transcripts.jsonl)
"""
import json
import math
import sys


def wilson(k, n, z=1.96):
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (c - h, c + h)


def holds(text, answers):
    t = (text or "").lower()
    return any(a.strip().lower() in t for a in answers if a.strip())


def row(path):
    episodes = [json.loads(l) for l in open(f"{path}/transcripts.jsonl")]
    programs = lambda e: [t for t in e["turns"] if t["action"] == "program"]
    lacked = [e for e in episodes if programs(e) and not holds(programs(e)[0].get("observation"), e["question"]["answers"])]
    read_on = [e for e in lacked if len(programs(e)) > 1]
    correct = lambda es: sum(e["outcome"] == "correct" for e in es)
    ceiling = sum(any(holds(t.get("observation"), e["question"]["answers"]) for t in programs(e)) for e in episodes)
    lo, hi = wilson(len(read_on), len(lacked))
    return (
        f"| {path} | {len(episodes)} | {ceiling / len(episodes):.1%} | {len(lacked)} | "
        f"{len(read_on)} ({len(read_on) / max(1, len(lacked)):.0%} [{lo:.0%}, {hi:.0%}]) | "
        f"{correct(lacked)}/{len(lacked)} | {correct(read_on)}/{len(read_on)} |"
    )


print("| run | episodes | gold printed in any turn | first output lacked it | read on | correct there | correct when read on |")
print("|---|---|---|---|---|---|---|")
for p in sys.argv[1:]:
    print(row(p))
