"""The state of one kernel's lowering: the names in scope, the block being built, and the ops the
kernel emits once at its top (sizes, block ids, constants).

`LowerContext` is the floor the lowering classes stand on (frontend/operands.py, exprs.py,
stmts.py, lower.py); `Symbol` is what a name denotes, `Lowered` what an expression lowered to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tkir.diagnostics import CompileError
from tkir.frontend import ast
from tkir.ir import Block, Loc, Operation, Value
from tkir.scalar import FLOAT_MAX, FLOAT_OVERFLOW, INT_RANGES
from tkir.types import I32, ScalarType, Type

RESERVED = ("block", "inf")
KIND_WORDS = {"const": "const", "size": "size", "global": "global tensor parameter", "scalar": "scalar",
              "shared": "shared variable", "reg": "register variable"}


@dataclass
class Symbol:
    """A name in scope: const, size, global, scalar (param, let, loop index), shared or reg."""

    kind: str
    name: str
    loc: Loc
    const: int | float | None = None  # kind == "const"
    value: Value | None = None  # global / scalar / shared / a `let` of a register value
    type: Type | None = None  # reg: the declared type
    current: Value | None = None  # reg: its value now (None: not initialized)
    axis: str | None = None  # reg vectors: row/col, once known


@dataclass
class Lowered:
    """The result of an expression: a compile-time number, an IR value, or a global tile access."""

    loc: Loc
    const: int | float | None = None
    value: Value | None = None
    axis: str | None = None  # vectors: "row" (from row_*) or "col"
    trans: bool = False  # a pending `.T`
    gref: tuple[Value, list[Value]] | None = None  # A[i, j]: the gl and its coordinates
    coords: list[Lowered] | None = None  # A[i, j]: the coordinates as written (compile-time ones are checked)
    name: str | None = None  # source name, for naming constants

    @property
    def is_const(self) -> bool:
        return self.const is not None


class LowerContext:
    """Scopes, the block ops go into, the kernel's prologue, and the located errors of one lowering."""

    def __init__(self, source: str):
        self.source = source
        self.kernel_ast: ast.Kernel | None = None  # the kernel being lowered (`@tune` checks its consts)
        self.scopes: list[dict[str, Symbol]] = [{}]
        self.kblock = Block()
        self.block = self.kblock
        self.n_prologue = 0
        self.cache: dict[tuple, Value] = {}
        self.smem_bytes = 0
        self.loop_depth = 0
        self.axis_of: dict[int, str] = {}
        # names declared only in untaken branches of compile-time `if`s, with the scope of the `if`
        self.untaken: list[tuple[dict[str, Symbol], dict[str, Loc]]] = []

    def error(self, loc: Loc, msg: str, hint: str | None = None) -> CompileError:
        return CompileError(loc, msg, self.source, hint=hint)

    # --- names ---------------------------------------------------------------------------------

    def lookup(self, name: str) -> Symbol | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def declare(self, sym: Symbol) -> Symbol:
        if sym.name in RESERVED:
            raise self.error(sym.loc, f"'{sym.name}' is a reserved name")
        prev = self.lookup(sym.name)
        if prev is not None:
            raise self.error(sym.loc, f"duplicate name '{sym.name}': already defined as a "
                             f"{KIND_WORDS[prev.kind]} at line {prev.loc.line}")
        self.scopes[-1][sym.name] = sym
        return sym

    def untaken_names(self) -> dict[str, Loc]:
        """Names declared only in untaken compile-time branches of the scopes visible now."""
        out: dict[str, Loc] = {}
        for scope, declared in self.untaken:
            if any(scope is s for s in self.scopes):
                out.update(declared)
        return out

    # --- emission ------------------------------------------------------------------------------

    def emit(self, name: str, operands: list[Value], result_types: list[Type], loc: Loc,
             attrs: dict[str, object] | None = None, result_name: str | None = None) -> Operation:
        op = Operation(name, operands, result_types, attrs, result_names=[result_name] * len(result_types),
                       loc=loc)
        self.block.append(op)
        return op

    def emit_prologue(self, key: tuple, name: str, rtype: Type, loc: Loc, attrs: dict[str, object],
                      result_name: str) -> Value:
        """An op at the top of the kernel, emitted once (sizes, block ids, constants)."""
        if key not in self.cache:
            op = Operation(name, [], [rtype], attrs, result_names=[result_name], loc=loc)
            self.kblock.insert(self.n_prologue, op)
            self.n_prologue += 1
            self.cache[key] = op.result
        return self.cache[key]

    def const_value(self, c: int | float, dtype: str, loc: Loc, name: str | None = None) -> Value:
        if dtype in ("i32", "u32"):
            if isinstance(c, float) and not c.is_integer():
                raise self.error(loc, f"{c} is not an integer", hint="use an integer here")
            value: int | float = int(c)
            lo, hi = INT_RANGES[dtype]
            if not lo <= value <= hi:  # LLVM would wrap it silently (a loop to 2**31 would never run)
                raise self.error(loc, f"the integer {value} does not fit {dtype} ({lo} .. {hi})")
            default = f"c{value}" if value >= 0 else f"cm{-value}"
        else:
            value = self.float_value(c, dtype, loc)
            default = "cst"
        rname = name or default
        return self.emit_prologue(("const", dtype, value, rname), "arith.const", ScalarType(dtype), loc,
                                  {"value": value}, rname)

    def float_value(self, c: int | float, dtype: str, loc: Loc) -> float:
        """A compile-time number as a constant of float `dtype`: one past the dtype's largest finite value
        is an error (it would be infinity; `inf` says so), as an integer past i32 is."""
        value = float(c)
        if dtype in FLOAT_OVERFLOW and math.isfinite(value) and abs(value) >= FLOAT_OVERFLOW[dtype]:
            raise self.error(loc, f"the number {c:g} does not fit {dtype}: it rounds to infinity (largest "
                                  f"finite {FLOAT_MAX[dtype]:g})", hint="write inf (or -inf) for an infinity")
        return value

    def size_value(self, name: str, loc: Loc) -> Value:
        return self.emit_prologue(("size", name), "tk.size", I32, loc, {"name": name}, name)

    def type_text(self, e: Lowered) -> str:
        if e.is_const:
            return f"the number {e.const}"
        if e.gref is not None:
            return f"a tile of {e.gref[0].type}"
        return str(e.value.type)
