#!/usr/bin/env python3
"""Programs' ceilings per article: the share of each gold page's questions whose gold answer a program
printed, from the episodes `agentrt trajectories synth` kept, beside the page and section recall
`agentrt eval retrieval --split all --json` measured per gold page. Longest article first.

Usage: bench/find_passage/ceiling.py QUESTIONS RETRIEVAL_JSON NAME=KEPT.jsonl[,KEPT.jsonl...] [NAME=...] [--top N]

e.g.   bench/find_passage/ceiling.py data/wiki/questions.jsonl retrieval.json \\
           find=find-train.jsonl,find-dev.jsonl scan=scan-train.jsonl,scan-dev.jsonl

A question counts as printed by a program when one of its kept episodes answers it (synth keeps an
episode only when the judge marks its answer, the first gold alias the program printed, correct).
Episodes synth dropped as duplicates of kept ones count as not printed, so the shares are a floor.
"""
import json
import sys


def main(argv):
    top = None
    if "--top" in argv:
        i = argv.index("--top")
        top = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if len(argv) < 3 or not all("=" in a for a in argv[2:]):
        sys.exit(__doc__)
    questions = [json.loads(line) for line in open(argv[0]) if line.strip()]
    report = json.load(open(argv[1]))
    programs = []
    for arg in argv[2:]:
        name, paths = arg.split("=", 1)
        kept = set()
        for path in paths.split(","):
            kept.update(json.loads(line)["question_id"] for line in open(path) if line.strip())
        programs.append((name, kept))
    articles = {a["page"]: a for a in report["articles"]}
    split_of, asked = {}, {}
    printed = {name: {} for name, _ in programs}
    for q in questions:
        page = q["page"]
        split_of[page] = q.get("split", "?")
        asked[page] = asked.get(page, 0) + 1
        for name, kept in programs:
            printed[name][page] = printed[name].get(page, 0) + (q["id"] in kept)

    print("| questions | " + " | ".join(f"{name}: gold printed" for name, _ in programs) + " |")
    print("|---|" + "---:|" * len(programs))
    splits = sorted({q.get("split", "?") for q in questions})
    for split in [None] + splits:
        qs = [q for q in questions if split is None or q.get("split", "?") == split]
        cells = []
        for _, kept in programs:
            k = sum(q["id"] in kept for q in qs)
            cell = f"{k:,} / {len(qs):,} ({100 * k / len(qs):.1f}%)"
            cells.append(f"**{cell}**" if split is None else cell)
        print(f"| {'all' if split is None else split} | " + " | ".join(cells) + " |")

    rankings = [r["ranking"] for r in report["sections"]]
    print()
    print(
        "| article (longest first) | split | characters | sections | questions | page@1 | "
        + " | ".join(f"section@1 / @3, {r}" for r in rankings)
        + " | "
        + " | ".join(f"{name}: gold printed" for name, _ in programs)
        + " |"
    )
    print("|---|---|---:|---:|---:|---:|" + "---:|" * (len(rankings) + len(programs)))
    rows = sorted(asked, key=lambda p: (-articles[p]["characters"], -articles[p]["sections"], p))
    for page in rows[:top]:
        a = articles[page]
        recalls = " | ".join(f"{s['at1']:.3f} / {s['at3']:.3f}" for s in a["section"])
        shares = " | ".join(f"{100 * printed[name][page] / asked[page]:.1f}%" for name, _ in programs)
        print(f"| {page} | {split_of[page]} | {a['characters']:,} | {a['sections']} | {asked[page]} | {a['page_at1']:.3f} | {recalls} | {shares} |")


if __name__ == "__main__":
    main(sys.argv[1:])
