"""Type expressions as written (`gl<bf16>[M, K]`, `st<bf16, 64, 64>`, `rv<f32, 64>`, `f32`) resolved to
IR types, with the checks a declaration must pass: known kinds and dtypes, compile-time dims, tile
dims in 16x16 base tiles, register tiles within an SM's register file.

`resolve_type` serves the kernel's parameters (frontend/lower.py, which collects the size names of
global dims) and the `shared` and `reg` declarations (frontend/stmts.py).
"""

from __future__ import annotations

from tkir.frontend import ast
from tkir.frontend.exprs import ExpressionLowering
from tkir.frontend.operands import PREDICATE_DTYPE
from tkir.ir import Loc
from tkir.scalar import I32_MAX
from tkir.target import REGISTER_FILE_BYTES
from tkir.types import (
    DTYPE_BYTES,
    FLOAT_DTYPES,
    SHORT_TILE_ROWS,
    TILE_QUANTUM,
    GlobalType,
    ScalarType,
    TileType,
    Type,
    VectorType,
)

SCALAR_DTYPES = ("i32", "u32", "f32")  # dtypes a scalar kernel parameter may have
TENSOR_DTYPES = tuple(d for d in DTYPE_BYTES if d != "i1")
TYPE_KINDS = ("gl", "st", "sv", "rt", "rv")
INT_TILE_DTYPES = ("i32", "u32")  # integer tiles and vectors (indices, labels, token ids)
TYPE_ARGS = {"gl": 1, "st": 3, "rt": 3, "sv": 2, "rv": 2}  # the arguments in <...> of each kind
TYPE_FORMS = {"gl": "gl<dtype>[d0, d1, ...]", "st": "st<dtype, rows, cols>", "rt": "rt<dtype, rows, cols>",
              "sv": "sv<dtype, n>", "rv": "rv<dtype, n>"}


def resolve_type(lw: ExpressionLowering, te: ast.TypeExpr, sizes: dict[str, Loc] | None = None) -> Type:
    """The IR type of `te`. With `sizes` (kernel parameters), an unknown name as a global dim is a size:
    it is added to `sizes` with where it first appears."""
    kind = te.kind
    if kind in SCALAR_DTYPES and not te.args and te.dims is None:
        return ScalarType(kind)
    if kind not in TYPE_KINDS:
        hint = f"types are {', '.join(TYPE_KINDS)} or a scalar dtype ({', '.join(SCALAR_DTYPES)})"
        raise lw.error(te.loc, f"unknown type '{kind}'", hint=hint)
    if len(te.args) != TYPE_ARGS[kind] or (kind == "gl") != (te.dims is not None):
        raise lw.error(te.loc, f"malformed {kind} type", hint=f"write {TYPE_FORMS[kind]}")
    if kind == "gl":
        dtype = _dtype(lw, te.args[0], TENSOR_DTYPES)
        return GlobalType(dtype, tuple(_global_dim(lw, d, sizes) for d in te.dims or []))
    dtype = _tile_dtype(lw, te.args[0], kind)
    if kind in ("sv", "rv"):
        n = _const_dim(lw, te.args[1], "a vector length")
        _check_register_bytes(lw, te, f"{kind}<{dtype}, {n}>", n * DTYPE_BYTES[dtype])
        return VectorType(kind, dtype, n)
    rows = _const_dim(lw, te.args[1], "tile rows")
    cols = _const_dim(lw, te.args[2], "tile cols")
    _check_register_bytes(lw, te, f"{kind}<{dtype}, {rows}, {cols}>", rows * cols * DTYPE_BYTES[dtype])
    short = kind == "rt" and rows in SHORT_TILE_ROWS
    if (rows % TILE_QUANTUM and not short) or cols % TILE_QUANTUM:
        raise lw.error(te.loc, f"tile dims must be multiples of {TILE_QUANTUM}, got {kind}<{dtype}, "
                       f"{rows}, {cols}>",
                       hint="tiles are made of 16x16 base tiles (a register tile may also have "
                            f"{', '.join(map(str, SHORT_TILE_ROWS))} rows)")
    return TileType(kind, dtype, rows, cols)


def _dtype(lw: ExpressionLowering, e: ast.Expr, allowed: tuple[str, ...]) -> str:
    if not isinstance(e, ast.Name):
        raise lw.error(e.loc, "expected a dtype", hint=f"one of {', '.join(allowed)}")
    if e.id not in allowed:
        raise lw.error(e.loc, f"unknown dtype '{e.id}'", hint=f"one of {', '.join(allowed)}")
    return e.id


def _tile_dtype(lw: ExpressionLowering, e: ast.Expr, kind: str) -> str:
    """The dtype of a declared tile or vector: a float dtype (fp8 included), or an integer (i32, u32)."""
    if isinstance(e, ast.Name) and e.id in INT_TILE_DTYPES:
        return e.id
    if isinstance(e, ast.Name) and e.id == PREDICATE_DTYPE:
        raise lw.error(e.loc, f"{kind}<{e.id}, ...> cannot be declared; {e.id} tiles are the values of "
                       "comparisons", hint="bind them with `let`; where(c, a, b) picks values by them")
    dtype = _dtype(lw, e, (*sorted(FLOAT_DTYPES), *INT_TILE_DTYPES))
    return dtype


def _const_dim(lw: ExpressionLowering, e: ast.Expr, what: str) -> int:
    c = lw.const_eval(e)
    if not isinstance(c, int) or c <= 0:
        raise lw.error(e.loc, f"{what} must be a positive compile-time integer",
                       hint="use integers and const parameters")
    return c


def _check_register_bytes(lw: ExpressionLowering, te: ast.TypeExpr, spelled: str, nbytes: int) -> None:
    """A register tile or vector larger than an SM's register file is refused here (the layout
    passes would otherwise enumerate its elements, per thread, for ever)."""
    if te.kind in ("rt", "rv") and nbytes > REGISTER_FILE_BYTES:
        raise lw.error(te.loc, f"{spelled} needs {nbytes} bytes of registers, more than the "
                       f"{REGISTER_FILE_BYTES} of an SM's register file",
                       hint="use smaller tiles and loop over the data")


class DeferredDim(str):
    """A global dim that is an expression of sizes (`H / G`): a placeholder string until every parameter
    has been read and its sizes declared (frontend/lower.py resolves it with `size_dim`)."""

    expr: ast.Expr

    def __new__(cls, expr: ast.Expr) -> DeferredDim:
        d = super().__new__(cls, "?")
        d.expr = expr
        return d


def _global_dim(lw: ExpressionLowering, e: ast.Expr, sizes: dict[str, Loc] | None) -> int | str:
    if isinstance(e, ast.Name) and sizes is not None and lw.lookup(e.id) is None:
        sizes.setdefault(e.id, e.loc)
        return e.id
    if sizes is not None and not isinstance(e, ast.Name) and lw.const_eval(e) is None:
        return DeferredDim(e)
    dim = _const_dim(lw, e, "a global dim (a size name or compile-time expression)")
    if dim > I32_MAX:  # element indices are i32 in the kernel, as sizes are (the launch refuses larger ones)
        raise lw.error(e.loc, f"a global dim of {dim} elements: at most {I32_MAX} (the kernel indexes it with i32)")
    return dim
