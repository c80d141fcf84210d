#!/usr/bin/env python3
"""Writes tasks.jsonl: 300 arithmetic word problems with their answers (240 train, 60 test), the same
every run (seeded). Each task is {"id", "split", "question", "answer", "expression"}; the grader reads
"answer", and "expression" is how the answer was computed, for whoever reads the file."""

import json
import random
from pathlib import Path

NAMES = ["Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Ines", "Kai", "Lena", "Ravi"]
THINGS = ["apples", "stamps", "marbles", "books", "coins", "shells", "cards", "pencils"]


def problem(rng: random.Random):
    """One word problem: its text and the expression that answers it."""
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    kind = rng.randrange(5)
    a, b, c = rng.randint(12, 99), rng.randint(3, 19), rng.randint(2, 9)
    if kind == 0:
        return f"{name} has {a} {thing} and gets {b} more each day for {c} days. How many {thing} does {name} have then?", f"{a} + {b} * {c}"
    if kind == 1:
        return f"{name} packs {a * c} {thing} into boxes of {c}. How many boxes does {name} fill?", f"{a * c} / {c}"
    if kind == 2:
        return f"{name} buys {c} packs of {a} {thing} and gives away {b}. How many {thing} are left?", f"{c} * {a} - {b}"
    if kind == 3:
        return f"{name} had {a} {thing}, lost {b}, then doubled what was left. How many {thing} now?", f"({a} - {b}) * 2"
    return f"{c} friends share {a * c + b * c} {thing} equally and each gives {b} back. How many {thing} does each keep?", f"({a * c + b * c}) / {c} - {b}"


def main():
    rng = random.Random(7)
    rows = []
    for i in range(300):
        question, expression = problem(rng)
        answer = eval(expression)  # the expressions above, made here: integers, or whole quotients
        rows.append({"id": f"arith-{i:03d}", "split": "test" if i % 5 == 4 else "train", "question": question, "answer": int(answer), "expression": expression})
    out = Path(__file__).with_name("tasks.jsonl")
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} tasks to {out}")


if __name__ == "__main__":
    main()
