"""The builtin functions of the language: one table from name to arguments, lowering and folding.

`CALLS[name]` says how many arguments the function takes, which function checks its operands
(kinds, shapes, dtypes) and emits its op, and, for the math functions, casts and max/min/cdiv,
how it folds on compile-time numbers (`sqrt(D)`, `f32(BM)`, `cdiv(N, BN)`). The expression
lowering (frontend/exprs.py) checks a call against the table (`check_call`), lowers its arguments
and hands them to the row's `lower`; the name check of untaken code (frontend/names.py) reads the
argument counts. CALLS stands at the end of the module, after the functions its rows name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tkir import scalar
from tkir.frontend import ast
from tkir.frontend.names import close_matches
from tkir.frontend.operands import PREDICATE_DTYPE, OperandLowering, fold, shape
from tkir.frontend.scope import LowerContext, Lowered
from tkir.ir import Loc
from tkir.target import REGISTER_FILE_BYTES
from tkir.types import (
    DTYPE_BYTES,
    FLOAT_DTYPES,
    I32,
    Ident,
    ScalarType,
    TileType,
    VectorType,
    is_register,
    is_shared,
)

MATH_FUNCS = {n: f for n, f in scalar.FLOAT_UNARY.items() if n != "neg"}  # `-x` is the operator
CAST_FUNCS = ("bf16", "f16", "f32", "i32", "u32")
INT_CASTS = ("i32", "u32")
FP8_CASTS = scalar.FP8_DTYPES  # e4m3(x), e5m2(x): tiles and vectors only (no fp8 scalars), saturating
REDUCTIONS = {  # name: (tk.reduce kind, axis)
    "row_max": ("max", "row"), "row_sum": ("sum", "row"), "row_min": ("min", "row"),
    "row_mean": ("mean", "row"), "row_var": ("var", "row"),   # var: the population (biased) variance
    "col_max": ("max", "col"), "col_sum": ("sum", "col"), "col_min": ("min", "col"),
    "row_argmax": ("argmax", "row"), "row_argmin": ("argmin", "row"),  # an rv<i32>: the column of the max (min)
}
ARG_KINDS = ("argmax", "argmin")
INDEX_FUNCS = {"row_index": "row", "col_index": "col"}  # tk.index {axis = ...}
OUTER_FUNCS = {"row_outer": "row", "col_outer": "col"}  # tk.outer {axis = ...}

CallLowering = Callable[[OperandLowering, str, list[Lowered], Loc], Lowered]
CallFolding = Callable[[LowerContext, str, list[int | float], Loc], int | float]


@dataclass(frozen=True)
class Builtin:
    """One builtin function."""

    least: int  # arguments
    most: int
    lower: CallLowering  # (lowerer, name, lowered arguments, call's loc): checks the operands, emits the op
    fold: CallFolding | None = None  # its value on compile-time numbers; None: never folded

    def takes(self) -> str:
        if self.least != self.most:
            return f"{self.least} or {self.most} arguments"
        return f"{self.least} argument{'s' * (self.least > 1)}"


def check_call(lw: LowerContext, e: ast.Call) -> Builtin:
    """The function exists and gets an argument count it takes; its row of CALLS."""
    builtin = CALLS.get(e.func)
    if builtin is None:
        close = close_matches(e.func, list(CALLS), n=1)
        raise lw.error(e.loc, f"unknown function '{e.func}'",
                       hint=f"did you mean '{close[0]}'?" if close else None)
    if not builtin.least <= len(e.args) <= builtin.most:
        raise lw.error(e.loc, f"'{e.func}' takes {builtin.takes()}, got {len(e.args)}")
    return builtin


def folds(e: ast.Call) -> Builtin | None:
    """The row of a call that folds on compile-time arguments (when all of them are), or None."""
    builtin = CALLS.get(e.func)
    if builtin is None or builtin.fold is None or not builtin.least <= len(e.args) <= builtin.most:
        return None
    return builtin


# --- folding on compile-time numbers ---------------------------------------------------------------


def _fold_math(lw: LowerContext, f: str, values: list[int | float], loc: Loc) -> int | float:
    """`sqrt(D)`, `exp2(x)`: the math function of a compile-time number, as a float."""
    (c,) = values
    try:
        return float(MATH_FUNCS[f](c))
    except (ValueError, OverflowError, ZeroDivisionError):
        raise lw.error(loc, f"'{f}({c})' is undefined") from None


def _fold_cast(lw: LowerContext, f: str, values: list[int | float], loc: Loc) -> int | float:
    """`f32(BM)` is a float, `i32(x)` and `u32(x)` truncate toward zero."""
    (c,) = values
    if f in FP8_CASTS:  # the value the cast gives, as a float: saturated and rounded (tkir/scalar.py)
        return scalar.round_fp8(c, f)
    if f in INT_CASTS:
        if not math.isfinite(c):
            raise lw.error(loc, f"'i32({c})' is not an integer", hint="i32(x) needs a finite x")
        return int(c)
    return float(c)


def _fold_binary(lw: LowerContext, f: str, values: list[int | float], loc: Loc) -> int | float:
    """max, min and cdiv of two compile-time numbers (tkir/scalar.py)."""
    r = fold(f, *values)
    if r is None:
        raise lw.error(loc, "division by zero in a compile-time expression")
    return r


# --- lowering: each checks its operands and emits its op ---------------------------------------------


def _math(lw: OperandLowering, f: str, args: list[Lowered], loc: Loc) -> Lowered:
    """exp(x), sqrt(x), ... -> tk.<f>: a float scalar, tile or vector of x's type."""
    x = lw.use(args[0])
    if x.is_const:  # pragma: no cover - const_eval folds a call of a compile-time number
        return Lowered(loc, const=_fold_math(lw, f, [x.const], loc))
    t = x.value.type
    lw.shaped_kind(x, f)
    if t.dtype not in FLOAT_DTYPES:
        raise lw.error(loc, f"'{f}' needs a float operand, got {t}", hint="cast it: f32(...)")
    rtype = t if isinstance(t, ScalarType) else t.bare()
    return Lowered(loc, value=lw.emit(f"tk.{f}", [x.value], [rtype], loc).result, axis=x.axis)


def _cast(lw: OperandLowering, f: str, args: list[Lowered], loc: Loc) -> Lowered:
    """bf16(x), f32(x), i32(x), u32(x) -> arith.cast on a scalar, tk.cast on a tile or vector (a float to an
    integer truncates toward zero and saturates, NaN giving 0: docs/language.md, "Integer tiles")."""
    x = lw.use(args[0])
    if x.is_const:  # pragma: no cover - const_eval folds a call of a compile-time number
        return Lowered(loc, const=_fold_cast(lw, f, [x.const], loc))
    t = x.value.type
    if isinstance(t, ScalarType) and f in FP8_CASTS:
        raise lw.error(loc, f"'{f}' casts tiles and vectors; there are no {f} scalars",
                       hint=f"cast the tile: {f}(t) of an rt, or keep the scalar in f32")
    if isinstance(t, ScalarType):
        if t.dtype == f:
            return x
        return Lowered(loc, value=lw.emit("arith.cast", [x.value], [ScalarType(f)], loc).result)
    lw.shaped_kind(x, f)
    if t.dtype == PREDICATE_DTYPE:
        raise lw.error(loc, f"cannot cast a predicate ({t}) to {f}", hint="use where(c, 1.0, 0.0)")
    v = lw.emit("tk.cast", [x.value], [t.bare().with_dtype(f)], loc).result
    return Lowered(loc, value=v, axis=x.axis)


def _reduce(lw: OperandLowering, f: str, args: list[Lowered], loc: Loc) -> Lowered:
    """row_max(x), col_sum(x), ... -> tk.reduce {kind, axis}: a register vector of a float register tile."""
    x = lw.use(args[0])
    kind, axis = REDUCTIONS[f]
    t = None if x.is_const else x.value.type
    if isinstance(t, TileType) and is_shared(t):
        raise lw.error(loc, f"reduction of shared tile '{x.value.name}' ({t})",
                       hint="load it into a `reg` tile first")
    if not (isinstance(t, TileType) and is_register(t)):
        raise lw.error(loc, f"'{f}' reduces a register tile, not {lw.type_text(x)}")
    if t.dtype not in FLOAT_DTYPES:
        raise lw.error(loc, f"'{f}' reduces float tiles, not {t}", hint="cast it: f32(...)")
    n = t.rows if axis == "row" else t.cols
    attrs = {"kind": Ident(kind), "axis": Ident(axis)}
    dtype = "i32" if kind in ARG_KINDS else t.dtype  # argmax / argmin: the column index
    v = lw.emit("tk.reduce", [x.value], [VectorType("rv", dtype, n)], loc, attrs).result
    lw.axis_of[id(v)] = axis
    return Lowered(loc, value=v, axis=axis)


def _min_max(lw: OperandLowering, f: str, args: list[Lowered], loc: Loc) -> Lowered:
    """max(a, b), min(a, b): the binary operators' rules (frontend/operands.py)."""
    return lw.arith(f, args[0], args[1], loc)


def _cdiv(lw: OperandLowering, f: str, args: list[Lowered], loc: Loc) -> Lowered:
    """cdiv(a, b) -> arith.cdiv: integer scalars, rounding up."""
    if args[1].is_const and args[1].const == 0:
        raise lw.error(loc, "division by zero: the divisor of 'cdiv' is 0")
    x, y = (lw.index_value(a, "an argument of 'cdiv'") for a in args)
    return Lowered(loc, value=lw.emit("arith.cdiv", [x, y], [I32], loc).result)


def _mask_causal(lw: OperandLowering, f: str, args: list[Lowered], loc: Loc) -> Lowered:
    """mask_causal(s, row0, col0[, fill]) -> tk.mask_causal: a float register tile, two integer offsets and
    a compile-time fill (-inf by default)."""
    s = lw.use(args[0])
    row0, col0 = args[1], args[2]
    fill = args[3] if len(args) > 3 else None
    t = None if s.is_const else s.value.type
    if not (isinstance(t, TileType) and is_register(t)) or t.dtype not in FLOAT_DTYPES:
        raise lw.error(loc, f"'mask_causal' masks a float register tile, not {lw.type_text(s)}")
    offsets = [lw.index_value(x, "a mask offset") for x in (row0, col0)]
    if fill is not None and not fill.is_const:
        raise lw.error(fill.loc, f"the fill of 'mask_causal' must be a compile-time number, got "
                       f"{lw.type_text(fill)}", hint="for a run-time value use where(...)")
    value = -math.inf if fill is None else float(fill.const)
    v = lw.emit("tk.mask_causal", [s.value, *offsets], [t.bare()], loc, {"fill": value}).result
    return Lowered(loc, value=v)


def _mark_axis(lw: OperandLowering, f: str, args: list[Lowered], loc: Loc) -> Lowered:
    """row(v), col(v): no op; says which axis of a tile a register vector broadcasts along."""
    x = lw.use(args[0])
    if x.is_const or not (isinstance(x.value.type, VectorType) and is_register(x.value.type)):
        raise lw.error(loc, f"'{f}' marks a register vector, not {lw.type_text(x)}")
    return Lowered(loc, value=x.value, axis=f)


def _where(lw: OperandLowering, f: str, args: list[Lowered], loc: Loc) -> Lowered:
    """where(c, a, b) -> tk.select: c an i1 tile/vector, a and b of its shape or scalars."""
    c = lw.use(args[0])
    ct = None if c.is_const else c.value.type
    if not (is_register(ct) and ct.dtype == PREDICATE_DTYPE):
        raise lw.error(c.loc, f"'where' needs a condition tile (a comparison such as s < x), "
                       f"got {lw.type_text(c)}")
    a, b = lw.use(args[1]), lw.use(args[2])
    shaped = [x for x in (a, b) if lw.shaped_kind(x, "where") != "scalar"]
    if not shaped:
        raise lw.error(loc, "'where' needs a tile or vector among its values; both are scalars",
                       hint="one of the two values gives the result's dtype")
    for x in shaped:
        xt = x.value.type
        if type(xt) is not type(ct) or shape(xt) != shape(ct):
            raise lw.error(x.loc, f"shape mismatch in 'where': condition {ct}, value {xt}")
    ref = shaped[0].value.type
    if len(shaped) == 2 and shaped[1].value.type.dtype != ref.dtype:
        raise lw.error(loc, f"dtype mismatch in 'where': {ref} and {shaped[1].value.type}",
                       hint="cast one side, e.g. f32(x)")
    if ref.dtype == PREDICATE_DTYPE:
        raise lw.error(loc, f"'where' selects values, not predicates ({ref})")
    sdtype = "f32" if ref.dtype in FLOAT_DTYPES else ref.dtype
    ops = [x.value if any(x is y for y in shaped) else lw.scalar_operand(x, sdtype) for x in (a, b)]
    v = lw.emit("tk.select", [c.value, *ops], [ref.bare()], loc).result
    return Lowered(loc, value=v, axis=shaped[0].axis)


def _index(lw: OperandLowering, f: str, args: list[Lowered], loc: Loc) -> Lowered:
    """row_index(x) / col_index(x) -> tk.index: an i32 tile of x's shape (and layout)."""
    x = lw.use(args[0])
    t = None if x.is_const else x.value.type
    if not (isinstance(t, TileType) and is_register(t)):
        raise lw.error(loc, f"'{f}' takes a register tile, not {lw.type_text(x)}",
                       hint="load a shared tile into a `reg` first" if t is not None and is_shared(t)
                       else None)
    rtype = TileType("rt", "i32", t.rows, t.cols)
    v = lw.emit("tk.index", [x.value], [rtype], loc, {"axis": Ident(INDEX_FUNCS[f])}).result
    return Lowered(loc, value=v)


def _outer(lw: OperandLowering, f: str, args: list[Lowered], loc: Loc) -> Lowered:
    """row_outer(a, b) / col_outer(a, b) -> tk.outer {axis = row|col}: the outer product of each
    pair of rows (r[i, p*Cb + q] = a[i, p] b[i, q]) or of columns (r[p*Rb + q, j] = a[p, j] b[q, j])."""
    a, b = lw.use(args[0]), lw.use(args[1])
    axis = OUTER_FUNCS[f]
    for x in (a, b):
        t = None if x.is_const else x.value.type
        if isinstance(t, TileType) and is_shared(t):
            raise lw.error(x.loc, f"'{f}' multiplies register tiles; '{x.value.name}' is shared ({t})",
                           hint="load it into a `reg` tile first")
        if not (isinstance(t, TileType) and is_register(t)):
            raise lw.error(x.loc, f"'{f}' multiplies register tiles, not {lw.type_text(x)}")
    ta, tb = a.value.type, b.value.type
    if ta.dtype != tb.dtype:
        raise lw.error(loc, f"dtype mismatch in '{f}': {ta} and {tb}", hint="cast one side, e.g. bf16(x)")
    if ta.dtype not in FLOAT_DTYPES:
        raise lw.error(loc, f"'{f}' multiplies float tiles, not {ta}", hint="cast it: f32(...)")
    if axis == "row":
        if ta.rows != tb.rows:
            raise lw.error(loc, f"shape mismatch in '{f}': {ta} and {tb} (the row counts differ)")
        rows, cols = ta.rows, ta.cols * tb.cols
    else:
        if ta.cols != tb.cols:
            raise lw.error(loc, f"shape mismatch in '{f}': {ta} and {tb} (the column counts differ)")
        rows, cols = ta.rows * tb.rows, ta.cols
    nbytes = rows * cols * DTYPE_BYTES[ta.dtype]
    if nbytes > REGISTER_FILE_BYTES:
        raise lw.error(loc, f"'{f}' of {ta} and {tb} is rt<{ta.dtype}, {rows}, {cols}> ({nbytes} bytes): "
                            f"more than an SM's {REGISTER_FILE_BYTES}-byte register file")
    rtype = TileType("rt", ta.dtype, rows, cols)
    v = lw.emit("tk.outer", [a.value, b.value], [rtype], loc, {"axis": Ident(axis)}).result
    return Lowered(loc, value=v)


# name: Builtin(least, most arguments, lowering, folding); the comment says what it lowers to
CALLS: dict[str, Builtin] = {
    **{f: Builtin(1, 1, _math, _fold_math) for f in MATH_FUNCS},  # tk.<f>: float scalar, tile or vector
    **{f: Builtin(1, 1, _cast, _fold_cast) for f in CAST_FUNCS},  # arith.cast (scalar), tk.cast (tile or vector)
    **{f: Builtin(1, 1, _cast, _fold_cast) for f in FP8_CASTS},  # tk.cast: rounds with saturation (satfinite)
    **{f: Builtin(1, 1, _reduce) for f in REDUCTIONS},  # tk.reduce {kind, axis}: a float register tile
    # (row_argmax / row_argmin: an rv<i32>, first occurrence on ties, NaN counting as the extreme, as torch)
    "max": Builtin(2, 2, _min_max, _fold_binary),  # arith.max (scalars), tk.max (elementwise)
    "min": Builtin(2, 2, _min_max, _fold_binary),  # arith.min (scalars), tk.min (elementwise)
    "cdiv": Builtin(2, 2, _cdiv, _fold_binary),  # arith.cdiv: integer scalars
    "mask_causal": Builtin(3, 4, _mask_causal),  # tk.mask_causal: a float register tile; the fill is optional
    "row": Builtin(1, 1, _mark_axis),  # no op: a register vector, one value per row
    "col": Builtin(1, 1, _mark_axis),  # no op: a register vector, one value per column
    "where": Builtin(3, 3, _where),  # tk.select: an i1 condition tile or vector
    **{f: Builtin(1, 1, _index) for f in INDEX_FUNCS},  # tk.index {axis}: an i32 tile of a register tile's shape
    **{f: Builtin(2, 2, _outer) for f in OUTER_FUNCS},  # tk.outer {axis}: two float register tiles
}
