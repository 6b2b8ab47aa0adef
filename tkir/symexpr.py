"""Size expressions: the grid, tensor-map dims and strides are written in the kernel's size names.

    "M / 128"   "cdiv(N, 256)"   "K * 2"   "min(M, 132)"

Integer arithmetic only, with the IR's meaning (tkir/scalar.py): `/` and `//` floor, `%`, `+ - *`,
calls `cdiv(a, b)`, `min(a, b, ...)`, `max(a, b, ...)`. Parsed with Python's `ast` module,
whitelisting node kinds, so an expression can never run code.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping

from tkir.scalar import INT_BINARY

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "div", ast.Mod: "rem"}
_FUNCS = {"cdiv": (2, 2), "min": (2, None), "max": (2, None)}  # name: (least, most) arguments


SHOWN_CHARS = 80  # of an expression quoted in an error


class SymExprError(ValueError):
    pass


def quote(expr: str) -> str:
    """`expr` quoted for an error message, cut to SHOWN_CHARS."""
    return repr(expr) if len(expr) <= SHOWN_CHARS else repr(expr[:SHOWN_CHARS]) + "..."


def evaluate(expr: str | int, env: Mapping[str, int]) -> int:
    """Evaluate a size expression with the sizes in `env`."""
    if isinstance(expr, int):
        return expr
    return _eval(_parse(expr), env, expr)


def names(expr: str | int) -> set[str]:
    """The size names an expression reads."""
    if isinstance(expr, int):
        return set()
    return {n.id for n in ast.walk(_parse(expr)) if isinstance(n, ast.Name)} - set(_FUNCS)


def check(expr: str | int) -> set[str]:
    """The size names of a well-formed expression; a SymExprError says what is wrong with another
    (the verifier's check of the grid and of TMA dims and strides, without evaluating them)."""
    if isinstance(expr, int):
        return set()
    found: set[str] = set()
    try:
        _check(_parse(expr), expr, found)
    except RecursionError:
        raise SymExprError(f"size expression nested too deeply: {quote(expr)}") from None
    return found


def _parse(expr: str) -> ast.AST:
    """The expression's syntax tree (never modified: `_check` and `_eval` only read it). Text is parsed
    once per process: the verifier, after every pass, re-reads the same grid, TMA dims and strides."""
    return _parse_text(expr) if type(expr) is str else _parse_uncached(expr)


@functools.lru_cache(maxsize=4096)
def _parse_text(expr: str) -> ast.AST:
    return _parse_uncached(expr)


def _parse_uncached(expr: str) -> ast.AST:
    try:
        return ast.parse(expr, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        why = getattr(e, "msg", None) or type(e).__name__
        raise SymExprError(f"bad size expression {quote(expr)}: {why}") from None


def _check(node: ast.AST, src: str, found: set[str]) -> None:
    """What `_eval` accepts, node by node, collecting the names."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return
    if isinstance(node, ast.Name):
        found.add(node.id)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _check(node.operand, src, found)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        bottom, chain = _left_spine(node)
        _check(bottom, src, found)
        for link in chain:
            _check(link.right, src, found)
        return None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
            and not node.keywords):
        least, most = _FUNCS[node.func.id]
        if least <= len(node.args) and (most is None or len(node.args) <= most):
            for a in node.args:
                _check(a, src, found)
            return
    raise SymExprError(f"unsupported size expression {quote(src)}")


def _eval(node: ast.AST, env: Mapping[str, int], src: str) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise SymExprError(f"size '{node.id}' is unknown in {quote(src)}")
        return int(env[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, src)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        bottom, chain = _left_spine(node)
        value = _eval(bottom, env, src)
        for link in chain:
            value = _apply(_BINOPS[type(link.op)], [value, _eval(link.right, env, src)], src)
        return value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
            and not node.keywords):
        least, most = _FUNCS[node.func.id]
        if least <= len(node.args) and (most is None or len(node.args) <= most):
            return _apply(node.func.id, [_eval(a, env, src) for a in node.args], src)
    raise SymExprError(f"unsupported size expression {quote(src)}")


def _left_spine(node: ast.BinOp) -> tuple[ast.AST, list[ast.BinOp]]:
    """A chain `a + b - c ...` as its bottom operand and its links from the innermost up: walked in a loop,
    so that a long sum is as deep as one `+`."""
    chain: list[ast.BinOp] = []
    while isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        chain.append(node)
        node = node.left
    chain.reverse()
    return node, chain


def _apply(name: str, args: list[int], src: str) -> int:
    """The integer op `name` (tkir/scalar.py) folded over `args` (min and max take several)."""
    try:
        return functools.reduce(INT_BINARY[name], args)
    except ZeroDivisionError:
        raise SymExprError(f"division by zero in {quote(src)}") from None
