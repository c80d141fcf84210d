"""The text-tools example plug-in in Python (componentize-py). Build: ../build.sh python

componentize-py generates the `wit_world` package from the WIT at build time; every exported
interface is a class named after it, with one method per WIT function (kebab-case becomes
snake_case). A `result<T, string>` is returned as T or raised as `Err(message)`; any other
exception traps the instance, and the host shows the model its message.
"""

import re

from wit_world import exports
from wit_world.exports.metadata import ToolDoc
from wit_world.exports.text import WordSpan
from componentize_py_types import Err

_WORD = re.compile(r"[A-Za-z0-9']+")
_INTEGER = re.compile(r"-?\d+")


class Metadata(exports.Metadata):
    def describe(self) -> list[ToolDoc]:
        return [
            ToolDoc("word-count", "-> int: the number of words in text"),
            ToolDoc("words", "-> [{word, start, end}]: every word with its position"),
            ToolDoc("first-integer", "-> int or None: the first integer in text"),
            ToolDoc("shift", "-> [int]: delta added to every number"),
            ToolDoc("repeat", "-> str: text repeated (times from 0 to 100)"),
            ToolDoc("explode", "always fails (a demonstration)"),
        ]

    def stateless(self) -> bool:
        # No call changes module state, so the host may reuse one instance for many calls.
        return True


class Text(exports.Text):
    def word_count(self, text: str) -> int:
        return len(_WORD.findall(text))

    def words(self, text: str) -> list[WordSpan]:
        return [WordSpan(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]

    def first_integer(self, text: str) -> int | None:
        match = _INTEGER.search(text)
        return int(match.group()) if match else None

    def shift(self, numbers: list[int], delta: int) -> list[int]:
        return [n + delta for n in numbers]

    def repeat(self, text: str, times: int) -> str:
        if not 0 <= times <= 100:
            raise Err(f"times must be from 0 to 100, got {times}")
        return text * times

    def explode(self, message: str) -> int:
        raise ValueError(message)
