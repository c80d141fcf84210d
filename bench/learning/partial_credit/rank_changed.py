#!/usr/bin/env python3
"""How a partial credit ranks the answers of a campaign's changed.md: for every question whose verdict RL
changed, both answers' best token F1 and F0.5 (precision weighed twice as recall) against the gold aliases
(data/wiki/questions.jsonl), SQuAD's normalisation, and the reward each would earn with the verdict as the
main term: verdict + w * (1 - verdict) * credit (w < 1, so a right answer always beats a wrong one).

Usage: bench/learning/partial_credit/rank_changed.py CHANGED.md QUESTIONS.jsonl > table.md
"""
import json, re, string, sys
from collections import Counter


def normalize(s):
    s = s.lower()
    s = "".join(c for c in s if c not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f_beta(pred, gold, beta):
    p, g = normalize(pred).split(), normalize(gold).split()
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    b2 = beta * beta
    return (1 + b2) * precision * recall / (b2 * precision + recall)


def best(pred, answers, beta):
    return max((f_beta(pred, a, beta) for a in answers), default=0.0)


changed, questions = sys.argv[1], sys.argv[2]
aliases = {}
for line in open(questions):
    q = json.loads(line)
    aliases.setdefault(q["question"], q.get("answers") or [q["answer"]])
blocks = open(changed).read().split("\n## ")[1:]
rows = []
for b in blocks:
    question = b.splitlines()[0].strip()
    answers = re.findall(r"^answer: `(.*)` \((\w+)\)$", b, re.M)
    assert len(answers) == 2, question
    rows.append((question, aliases[question], answers))
print("| question | gold aliases | SFT answer | verdict | F1 | F0.5 | SFT + RL answer | verdict | F1 | F0.5 |")
print("|---|---|---|---|---:|---:|---|---|---:|---:|")
stats = Counter()
for question, gold, answers in rows:
    cells = []
    wrong = []
    for text, outcome in answers:
        f1, f05 = best(text, gold, 1.0), best(text, gold, 0.5)
        cells += [f"`{text}`", "right" if outcome == "correct" else "wrong", f"{f1:.2f}", f"{f05:.2f}"]
        if outcome != "correct":
            wrong.append((text, f1, f05))
    right = [t for t, o in answers if o == "correct"]
    # Against the right answer of the pair: is the wrong one a longer span around it, and which credit pays it more?
    for text, f1, f05 in wrong:
        longer = len(normalize(text).split()) > len(normalize(right[0]).split()) if right else False
        stats["wrong answers"] += 1
        stats["wrong and longer than the right one"] += longer
        stats["wrong, credit F1 > F0.5"] += f1 > f05 + 1e-9
        stats["wrong, credit F0.5 > F1"] += f05 > f1 + 1e-9
        stats["wrong, longer, F1 > F0.5"] += longer and f1 > f05 + 1e-9
    print(f"| {question} | {' / '.join(gold)} | " + " | ".join(cells) + " |")
print()
for k, v in stats.items():
    print(f"- {k}: {v}")
