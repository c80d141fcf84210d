"""The `{{name}}` plug-in tool for agentrt, in Python (componentize-py). Build: ./build.sh

componentize-py generates the `wit_world` package from `wit/` at build time: one class per exported
interface (`Tools` for yours, `Metadata` for the host's questions about it), one method per WIT function
(kebab-case becomes snake_case). A `result<T, string>` function returns T, or raises `Err(message)` for
an error the model's program can catch; any other exception traps the instance and fails the call, and
the model sees the tool's name and the end of stderr.
"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.metadata import ToolDoc


class Metadata(exports.Metadata):
    def describe(self) -> list[ToolDoc]:
        # One line per function, by its WIT name (kebab-case). The model reads it after the tool's
        # name and parameters, as in "- hello(name) -> str: a greeting for name (not empty)".
        return [ToolDoc("hello", "-> str: a greeting for name (not empty)")]

    def stateless(self) -> bool:
        # No call depends on an earlier one, so the host may reuse one instance for many calls. Return
        # False once a call keeps state that a later call reads: each call then gets a fresh instance.
        return True


class Tools(exports.Tools):
    def hello(self, name: str) -> str:
        if not name.strip():
            raise Err("name must not be empty")
        return f"Hello, {name}!"
