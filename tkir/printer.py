"""Print tile IR in its one generic textual form (read back by tkir.parser).

    [%r0, %r1 =] dialect.op [@sym] [%x, %y] [{key = value, ...}] [: T0, T1] [{ region }]...

A region prints its block arguments as `^(%i: i32, %acc: rt<f32, 64, 64>)` on its first line.
Value names come from the source; the printer makes them unique within each top-level op by
appending `.N`, so text that was parsed prints back byte for byte.
"""

from __future__ import annotations

import re

from tkir.ir import Module, Operation, Region, Value
from tkir.types import format_attr_value

INDENT = "  "
_NAME_OK = re.compile(r"^[A-Za-z0-9_.]+$")


class _Names:
    """Assigns each value a unique printed name within one top-level op."""

    def __init__(self) -> None:
        self.of: dict[int, str] = {}
        self.used: set[str] = set()
        self.counter = 0
        # base -> the suffix to try first: `base.1` .. `base.(n-1)` are taken (names are never freed), so
        # the search for a free `base.n` resumes there instead of rescanning from 1 (linear, not quadratic)
        self.next_suffix: dict[str, int] = {}

    def name(self, v: Value) -> str:
        key = id(v)
        if key in self.of:
            return self.of[key]
        base = v.name if v.name and _NAME_OK.match(v.name) else None
        if base is None:
            while str(self.counter) in self.used:
                self.counter += 1
            base = str(self.counter)
        cand, n = base, self.next_suffix.get(base, 1)
        while cand in self.used:
            cand = f"{base}.{n}"
            n += 1
        self.next_suffix[base] = n
        self.used.add(cand)
        self.of[key] = cand
        return cand


def print_module(module: Module) -> str:
    lines: list[str] = []
    for op in module.ops:
        _print_op(op, _Names(), 0, lines)
    return "\n".join(lines) + "\n"


def print_op(op: Operation) -> str:
    lines: list[str] = []
    _print_op(op, _Names(), 0, lines)
    return "\n".join(lines) + "\n"


def _print_op(op: Operation, names: _Names, depth: int, lines: list[str]) -> None:
    ind = INDENT * depth
    parts = []
    # operands are named before results: operands were defined earlier in program order.
    operands = ", ".join("%" + names.name(v) for v in op.operands)
    if op.results:
        parts.append(", ".join("%" + names.name(r) for r in op.results) + " = ")
    parts.append(op.name)
    if op.symbol is not None:
        parts.append(f" @{op.symbol}")
    if operands:
        parts.append(" " + operands)
    if op.attrs:
        parts.append(" " + format_attr_value(op.attrs))
    if op.results:
        parts.append(" : " + ", ".join(str(r.type) for r in op.results))
    head = ind + "".join(parts)
    if not op.regions:
        lines.append(head)
        return
    for i, region in enumerate(op.regions):
        opener = head + " {" if i == 0 else ind + "} {"
        lines.append(opener)
        _print_region(region, names, depth + 1, lines)
    lines.append(ind + "}")


def _print_region(region: Region, names: _Names, depth: int, lines: list[str]) -> None:
    blk = region.block
    if blk.args:
        args = ", ".join(f"%{names.name(a)}: {a.type}" for a in blk.args)
        lines.append(INDENT * depth + f"^({args})")
    for op in blk.ops:
        _print_op(op, names, depth, lines)
