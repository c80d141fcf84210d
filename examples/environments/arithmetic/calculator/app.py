"""The arithmetic environment's calculator tool, in Python (componentize-py); built by ../build.sh.

It evaluates arithmetic only: the expression is parsed with `ast` and walked, so a name, a call or an
attribute is an error, never code that runs.
"""

import ast
import operator

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.metadata import ToolDoc

BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def value(node):
    if isinstance(node, ast.Expression):
        return value(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = value(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = value(node.left), value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise Err("exponent too large (at most 64)")
        return BINARY[type(node.op)](left, right)
    raise Err(f"not arithmetic: {ast.dump(node)[:60]}")


class Metadata(exports.Metadata):
    def describe(self) -> list[ToolDoc]:
        return [ToolDoc("calculate", "-> float: the value of an arithmetic expression (+ - * / // % ** and parentheses)")]

    def stateless(self) -> bool:
        return True


class Tools(exports.Tools):
    def calculate(self, expression: str) -> float:
        try:
            tree = ast.parse(expression.strip(), mode="eval")
        except SyntaxError as e:
            raise Err(f"not an expression: {e.msg}")
        try:
            return float(value(tree))
        except ZeroDivisionError:
            raise Err("division by zero")
