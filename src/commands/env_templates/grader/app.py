"""The {{name}} environment's grader, in Python (componentize-py). Build: ./build.sh

agentrt calls `grade(task, answer)` for every final answer: `task` is the task's whole row of
tasks.jsonl as JSON text, `answer` what the model answered. It returns the reward's named parts
(training logs each apart; the reward is their sum) and whether the answer counts as correct, or raises
Err(message) for a task it cannot grade. It runs in agentrt's sandbox: no files, network or clock, and
bounded by [grader] fuel, timeout_ms and memory_mib in environment.toml; a grade that runs past them is
that answer's failure (reward 0), named in the transcript, and the run goes on.
"""

import json
import re

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.grading import AnswerGrade, RewardPart


class Grading(exports.Grading):
    def grade(self, task: str, answer: str) -> AnswerGrade:
        row = json.loads(task)
        if "answer" not in row:
            raise Err(f"task {row.get('id')}: no `answer` to grade against")
        # What the model put inside <answer>...</answer> (the whole reply when it has no tag), against the
        # task's answer, both stripped and lowercased. Change this to your task's measure of right.
        inside = re.search(r"<answer>(.*?)(</answer>|$)", answer, re.S)
        given = (inside.group(1) if inside else answer).strip().lower()
        gold = str(row["answer"]).strip().lower()
        correct = given == gold
        # Partial credit, a part of its own: the answer is named somewhere in the reply, not given alone.
        named = not correct and gold in answer.lower()
        return AnswerGrade([RewardPart("correct", 1.0 if correct else 0.0), RewardPart("named", 0.5 if named else 0.0)], correct)
