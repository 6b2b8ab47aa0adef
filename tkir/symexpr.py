"""Size expressions: the grid, tensor-map dims and strides are written in the kernel's size names.

    "M / 128"   "cdiv(N, 256)"   "K * 2"   "min(M, 132)"

Integer arithmetic only: `/` and `//` floor, `%`, `+ - *`, calls `cdiv`, `min`, `max`. Parsed with
Python's `ast` module, whitelisting node kinds, so an expression can never run code.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

_FUNCS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}


class SymExprError(ValueError):
    pass


def evaluate(expr: str | int, env: Mapping[str, int]) -> int:
    """Evaluate a size expression with the sizes in `env`."""
    if isinstance(expr, int):
        return expr
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise SymExprError(f"bad size expression '{expr}': {e.msg}") from None
    return _eval(tree.body, env, expr)


def names(expr: str | int) -> set[str]:
    """The size names an expression reads."""
    if isinstance(expr, int):
        return set()
    return {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)} - set(_FUNCS)


def _eval(node: ast.AST, env: Mapping[str, int], src: str) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise SymExprError(f"size '{node.id}' is unknown in '{src}'")
        return int(env[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, src)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env, src), _eval(node.right, env, src)
        op = type(node.op)
        if op is ast.Add:
            return a + b
        if op is ast.Sub:
            return a - b
        if op is ast.Mult:
            return a * b
        if op in (ast.Div, ast.FloorDiv, ast.Mod):
            if b == 0:
                raise SymExprError(f"division by zero in '{src}'")
            return a % b if op is ast.Mod else a // b
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
            and not node.keywords):
        return int(_FUNCS[node.func.id](*(_eval(a, env, src) for a in node.args)))
    raise SymExprError(f"unsupported size expression '{src}'")
