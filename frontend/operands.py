"""Expression results as IR operands, and the arithmetic operators.

`OperandLowering` turns a `Lowered` into what an op takes: a pending `.T` materialized, a
compile-time number as a constant of the dtype needed, an integer scalar for a coordinate or bound.
On these it builds `a op b` for + - * / % max min: folded when both sides are compile-time, an
`arith.*` op on run-time scalars, a `tk.*` op elementwise on register tiles and vectors (scalars
and vectors broadcast). The builtin calls (frontend/calls.py) and the expressions
(frontend/exprs.py) are built on it.
"""

from __future__ import annotations

import operator

from tkir import scalar
from tkir.frontend.scope import LowerContext, Lowered
from tkir.ir import Loc, Value
from tkir.types import (
    FLOAT_DTYPES,
    GlobalType,
    Ident,
    ScalarType,
    TileType,
    Type,
    VectorType,
    is_shared,
)

PREDICATE_DTYPE = "i1"  # tk.cmp results; tk.select conditions
# the bit operators: integer tiles and vectors (tk.and ... tk.shr), and compile-time integers (exact, as Python's)
BIT_NAMES = {"&": "and", "|": "or", "^": "xor", "<<": "shl", ">>": "shr", "~": "xor"}  # `~x`: x ^ all ones
BINARY_NAMES = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "rem", "max": "max", "min": "min", **BIT_NAMES}
_BIT_FOLD = {"&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift,
             "~": operator.xor}
MAX_CONST_SHIFT = 64  # a compile-time shift count past this is refused (an i32 or u32 holds 32 bits)


def fold(op: str, a: int | float, b: int | float) -> int | float | None:
    """Compile-time scalar arithmetic as tkir/scalar.py defines it (integer `/` floors; the bit operators on
    exact integers, `>>` arithmetic); None on division by zero. A bit operator's operands are checked first
    (`bit_fold_error`)."""
    if op in _BIT_FOLD:
        return _BIT_FOLD[op](a, b)
    try:
        return scalar.binary(BINARY_NAMES.get(op, op), a, b)
    except ZeroDivisionError:
        return None


def bit_fold_error(op: str, a: int | float, b: int | float) -> str | None:
    """Why `a op b` of compile-time numbers cannot fold, for a bit operator: a float operand, or a shift count
    below 0 or past MAX_CONST_SHIFT; None where it folds (and for every other operator)."""
    if op not in _BIT_FOLD:
        return None
    bad = next((x for x in (a, b) if not isinstance(x, int)), None)
    if bad is not None:
        return f"'{op}' takes integers, got {bad}"
    if op in ("<<", ">>") and not 0 <= b <= MAX_CONST_SHIFT:
        return f"shift count {b} out of range: a compile-time shift takes 0 .. {MAX_CONST_SHIFT}"
    return None


def shape(t: Type) -> tuple[int, ...]:
    return t.shape if isinstance(t, TileType) else (t.n,)


def gathered(coords: list[Value]) -> bool:
    """Whether a global access's coordinates hold a vector of row indices (a gather, `A[idx, c]`)."""
    return any(isinstance(c.type, VectorType) for c in coords)


class OperandLowering(LowerContext):
    """Operands of ops, and the arithmetic operators on them."""

    # --- operands ------------------------------------------------------------------------------

    def use(self, e: Lowered) -> Lowered:
        """Materialize a pending `.T` (outside an `@`) and reject unloaded global tiles."""
        if e.gref is not None:
            raise self.error(e.loc, f"a tile of '{e.gref[0].name}' must be loaded before it is used",
                             hint="assign it to a `shared` or `reg` variable first")
        if e.trans:
            t = e.value.type
            rt = TileType("rt", t.dtype, t.cols, t.rows)
            if is_shared(t):  # a transposed shared -> register read
                return Lowered(e.loc, value=self.emit("tk.load", [e.value], [rt], e.loc, {"trans": True}).result)
            return Lowered(e.loc, value=self.emit("tk.transpose", [e.value], [rt], e.loc).result)
        return e

    def shaped_kind(self, e: Lowered, op: str) -> str:
        """'scalar', 'tile' or 'vector' for an elementwise operand; errors for memory operands."""
        if e.is_const or isinstance(e.value.type, ScalarType):
            return "scalar"
        t = e.value.type
        if isinstance(t, GlobalType):
            raise self.error(e.loc, f"'{op}' on global '{e.value.name}'", hint="load a tile of it first")
        if is_shared(t):
            raise self.error(e.loc, f"'{op}' computes on registers, but '{e.value.name}' is shared ({t})",
                             hint="load it into a `reg` first")
        return "tile" if isinstance(t, TileType) else "vector"

    def scalar_operand(self, e: Lowered, dtype: str) -> Value:
        """A scalar operand of a tile op or a run-time scalar op, in `dtype`."""
        if e.is_const:
            return self.const_value(e.const, dtype, e.loc, e.name)
        if e.value.type.dtype == dtype:
            return e.value
        if dtype in FLOAT_DTYPES and e.value.type.dtype in ("i32", "u32"):
            return self.emit("arith.cast", [e.value], [ScalarType(dtype)], e.loc).result
        raise self.error(e.loc, f"scalar type mismatch: {e.value.type} where {dtype} is needed",
                         hint=f"cast it: {dtype}(...)")

    def index_value(self, e: Lowered, what: str) -> Value:
        if e.is_const:
            if not isinstance(e.const, int):
                raise self.error(e.loc, f"{what} must be an integer, got {e.const}")
            return self.const_value(e.const, "i32", e.loc, e.name)
        e = self.use(e)
        if not (isinstance(e.value.type, ScalarType) and e.value.type.dtype in ("i32", "u32")):
            raise self.error(e.loc, f"{what} must be an integer scalar, got {e.value.type}")
        return e.value

    # --- arithmetic ----------------------------------------------------------------------------

    def arith(self, op: str, a: Lowered, b: Lowered, loc: Loc) -> Lowered:
        """`a op b` for + - * / % max min and the bit operators: folded, scalar (arith.*), or elementwise (tk.*)."""
        if a.is_const and b.is_const:
            why = bit_fold_error(op, a.const, b.const)
            if why is not None:
                raise self.error(loc, why)
            r = fold(op, a.const, b.const)
            if r is None:
                raise self.error(loc, "division by zero in a compile-time expression")
            return Lowered(loc, const=r)
        if op in ("/", "%") and b.is_const and b.const == 0:
            raise self.error(loc, f"division by zero: the right side of '{op}' is 0")
        a, b = self.use(a), self.use(b)
        ka, kb = self.shaped_kind(a, op), self.shaped_kind(b, op)
        name = BINARY_NAMES[op]
        if op == "~" and a.value.type.dtype == "u32":  # ~x of a u32 is x ^ 0xffffffff, the word's ones
            b = Lowered(b.loc, const=scalar.INT_RANGES["u32"][1])
        if ka == kb == "scalar":
            return self.scalar_arith(name, a, b, loc, op)
        operands, attrs, ref, axis = self.elementwise(op, a, b, ka, kb, loc)
        self.check_tile_arith(op, ref, loc)
        v = self.emit(f"tk.{name}", operands, [ref.bare()], loc, attrs).result
        return Lowered(loc, value=v, axis=axis)

    def elementwise(self, op: str, a: Lowered, b: Lowered, ka: str, kb: str,
                    loc: Loc) -> tuple[list[Value], dict[str, object], Type, str | None]:
        """Operands, attrs (bcast), the shaped operand's type and the vector axis of `a op b`.

        At least one side is a register tile or vector. A scalar operand is f32 for float tiles
        and the tile's dtype for integer tiles; vectors broadcast over tiles (bcast = row|col)."""
        if "scalar" in (ka, kb):
            shaped, other = (a, b) if kb == "scalar" else (b, a)
            t = shaped.value.type
            sv = self.scalar_operand(other, "f32" if t.dtype in FLOAT_DTYPES else t.dtype)
            operands = [shaped.value, sv] if kb == "scalar" else [sv, shaped.value]
            return operands, {}, t, shaped.axis
        ta, tb = a.value.type, b.value.type
        if ta.dtype != tb.dtype:
            raise self.error(loc, f"dtype mismatch in '{op}': {ta} and {tb}",
                             hint="cast one side, e.g. f32(x)")
        if ka == kb:
            if ta.bare() != tb.bare():
                raise self.error(loc, f"shape mismatch in '{op}': {ta} and {tb}")
            return [a.value, b.value], {}, ta, a.axis or b.axis
        tile, vec = (a, b) if ka == "tile" else (b, a)
        tt, vt = tile.value.type, vec.value.type
        attrs: dict[str, object] = {"bcast": Ident(self.bcast_axis(tt, vt, vec.axis, op, loc))}
        return [a.value, b.value], attrs, tt, None

    def check_tile_arith(self, op: str, t: Type, loc: Loc) -> None:
        """Integer tiles take + - * / % min max (`/` and `%` truncate toward zero, as C and PTX do); float
        tiles take all but `%`; predicate (i1) tiles take no arithmetic."""
        if t.dtype == PREDICATE_DTYPE:
            raise self.error(loc, f"'{op}' on a predicate ({t})", hint="use where(c, a, b) to pick values")
        if t.dtype in FLOAT_DTYPES and op == "%":
            raise self.error(loc, f"'%' on a float tile ({t}) is not supported",
                             hint="'%' takes integer tiles and scalars; cast with i32(...) first")
        if t.dtype not in scalar.INT_DTYPES and op in BIT_NAMES:
            raise self.error(loc, f"'{op}' on a {t.dtype} tile ({t}): the bit operators take i32 and u32 tiles",
                             hint="cast with i32(...) or u32(...) first")

    def bcast_axis(self, t: TileType, v: VectorType, axis: str | None, op: str, loc: Loc) -> str:
        if axis is not None:
            want = t.rows if axis == "row" else t.cols
            if v.n != want:
                raise self.error(loc, f"shape mismatch in '{op}': a {axis} vector of {t} has {want} "
                                 f"elements, got {v}")
            return axis
        if v.n == t.rows and v.n != t.cols:
            return "row"
        if v.n == t.cols and v.n != t.rows:
            return "col"
        if v.n == t.rows:
            raise self.error(loc, f"ambiguous broadcast in '{op}': {v} fits both the rows and cols of {t}",
                             hint="say which with row(v) (one value per row) or col(v) (one per column)")
        raise self.error(loc, f"shape mismatch in '{op}': {v} fits neither the rows ({t.rows}) nor the "
                         f"cols ({t.cols}) of {t}")

    def scalar_arith(self, name: str, a: Lowered, b: Lowered, loc: Loc, op: str | None = None) -> Lowered:
        """`a op b` on run-time scalars (at least one side run-time): arith.<name> in their dtype; the bit operators
        take i32 and u32 only (`op`: the operator as written, for the error)."""
        dtypes = {x.value.type.dtype for x in (a, b) if not x.is_const}
        if len(dtypes) > 1:
            raise self.error(loc, f"scalar type mismatch: {a.value.type} and {b.value.type}",
                             hint="cast one side, e.g. f32(x) or i32(x)")
        dtype = dtypes.pop()
        if op in BIT_NAMES and dtype not in scalar.INT_DTYPES:
            raise self.error(loc, f"'{op}' on a {dtype} scalar: the bit operators take i32 and u32 scalars",
                             hint="cast with i32(...) or u32(...) first")
        va, vb = self.scalar_operand(a, dtype), self.scalar_operand(b, dtype)
        return Lowered(loc, value=self.emit(f"arith.{name}", [va, vb], [ScalarType(dtype)], loc).result)
