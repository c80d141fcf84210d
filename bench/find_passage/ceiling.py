#!/usr/bin/env python3
"""A program's ceiling per article: the share of each gold page's questions whose gold answer the program
printed, from the episodes `agentrt trajectories synth --program FILE` (or `--style`) kept, beside the
section recall `agentrt eval retrieval --json` measured per gold page. Longest article first.

Usage: bench/find_passage/ceiling.py QUESTIONS RETRIEVAL_JSON KEPT.jsonl [KEPT.jsonl ...] [--top N]

A question counts as printed when one of the kept episodes answers it (synth keeps an episode only when
the judge marks its answer, the first gold alias the program printed, correct). Episodes synth dropped as
duplicates of kept ones count as not printed, so the shares are a floor.
"""
import json
import sys


def main(argv):
    top = None
    if "--top" in argv:
        i = argv.index("--top")
        top = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if len(argv) < 3:
        sys.exit(__doc__)
    questions_path, retrieval_path, kept_paths = argv[0], argv[1], argv[2:]
    questions = [json.loads(line) for line in open(questions_path) if line.strip()]
    kept = set()
    for path in kept_paths:
        for line in open(path):
            if line.strip():
                kept.add(json.loads(line)["question_id"])
    report = json.load(open(retrieval_path))
    articles = {a["page"]: a for a in report["articles"]}
    split_of, asked, printed = {}, {}, {}
    for q in questions:
        page = q["page"]
        split_of[page] = q.get("split", "?")
        asked[page] = asked.get(page, 0) + 1
        printed[page] = printed.get(page, 0) + (q["id"] in kept)
    by_split = {}
    for q in questions:
        s = by_split.setdefault(q.get("split", "?"), [0, 0])
        s[0] += q["id"] in kept
        s[1] += 1
    total = sum(v[0] for v in by_split.values()), sum(v[1] for v in by_split.values())
    print("| questions | gold printed | share |\n|---|---:|---:|")
    print(f"| all | {total[0]:,} / {total[1]:,} | **{100 * total[0] / total[1]:.1f}%** |")
    for split, (k, n) in sorted(by_split.items()):
        print(f"| {split} | {k:,} / {n:,} | {100 * k / n:.1f}% |")
    rankings = [r["ranking"] for r in report["sections"]]
    print()
    head = "| article (longest first) | split | characters | sections | questions | page@1 | " + " | ".join(f"section@1/@3 {r}" for r in rankings) + " | gold printed |"
    print(head)
    print("|---|---|---:|---:|---:|---:|" + "---:|" * len(rankings) + "---:|")
    rows = sorted(asked, key=lambda p: (-articles[p]["characters"], -articles[p]["sections"], p))
    for page in rows[:top]:
        a = articles[page]
        recalls = " | ".join(f"{s['at1']:.3f} / {s['at3']:.3f}" for s in a["section"])
        print(f"| {page} | {split_of[page]} | {a['characters']:,} | {a['sections']} | {asked[page]} | {a['page_at1']:.3f} | {recalls} | {100 * printed[page] / asked[page]:.1f}% |")


if __name__ == "__main__":
    main(sys.argv[1:])
