"""The arithmetic environment's grader (a component of the agentrt:tools/grader world, in Python), built
by ../build.sh. A task's row holds `answer`, an integer; the model's answer is right when the last number
it wrote (inside <answer>...</answer> when it used the tag) equals it. Two parts: `correct` (1) and
`tagged` (0.1 for using the tag at all, a signal before the first right answer).
"""

import json
import re

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.grading import AnswerGrade, RewardPart

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(text: str):
    """The last number written in text (`42`, `-3.5`, `1,024`), or None."""
    found = NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


class Grading(exports.Grading):
    def grade(self, task: str, answer: str) -> AnswerGrade:
        row = json.loads(task)
        if "answer" not in row:
            raise Err(f"task {row.get('id')}: no `answer` to grade against")
        gold = float(row["answer"])
        inside = re.search(r"<answer>(.*?)(</answer>|$)", answer, re.S)
        got = last_number(inside.group(1) if inside else answer)
        correct = got is not None and abs(got - gold) <= 1e-6 * max(1.0, abs(gold))
        # A small part for answering in the asked form at all: a signal before the first right answer.
        return AnswerGrade([RewardPart("correct", 1.0 if correct else 0.0), RewardPart("tagged", 0.1 if inside else 0.0)], correct)
