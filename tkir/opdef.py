"""How an op is defined: `OpDef`, the registry `OPS`, `register_op` and the checkers' small helpers.

The op modules (tkir/ops.py, ops_tma.py, ops_pipeline.py, ops_streamk.py) import this module and
register their ops at import; it imports only the IR and its types, never the interpreter or an op
module. `OPS` here fills as op modules are imported: code that needs every op (the verifier,
canonicalize, the interpreter, the backend's rule test) imports the complete catalogue `tkir.ops`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tkir.ir import Operation
from tkir.scalar import INT_DTYPES
from tkir.types import GlobalType, ScalarType, TileType, Type, VectorType


class OpError(Exception):
    """A type or structure error in one op; the verifier adds the location."""


Checker = Callable[[Operation], None]


@dataclass(frozen=True)
class OpDef:
    name: str
    check: Checker
    pure: bool = True  # no side effects: removable when its results are unused
    terminator: bool = False
    summary: str = ""
    # the check reads only the op's name, its operand and result types (their number included) and its
    # attributes: the verifier skips it while they are unchanged (tkir/verifier.py, "checked")
    local: bool = False


OPS: dict[str, OpDef] = {}


def register_op(name: str, check: Checker, *, pure: bool = True, terminator: bool = False,
                summary: str = "", local: bool = False) -> OpDef:
    """Add an op to the catalogue (passes and --load-pass files may add their own). `local=True` promises
    that `check` reads nothing of the op but its name, operand and result types and attributes."""
    d = OpDef(name, check, pure, terminator, summary, local)
    OPS[name] = d
    return d


# ---------------------------------------------------------------------------------------------
# Small checking helpers.


def expect(cond: bool, msg: str | Callable[[], str]) -> None:
    """Raise OpError(msg) unless `cond`. The hot checks (every elementwise op, after every pass) pass the
    message as a lambda, formatted only on failure: formatting their types every time cost a 10,000-statement
    kernel seconds of compile time."""
    if not cond:
        raise OpError(msg() if callable(msg) else msg)


def n_operands(op: Operation, lo: int, hi: int | None = None) -> None:
    hi = lo if hi is None else hi
    n = len(op.operands)
    expect(lo <= n <= hi, lambda: f"'{op.name}' expects {lo if lo == hi else f'{lo}..{hi}'} operands, got {n}")


def n_results(op: Operation, n: int) -> None:
    expect(len(op.results) == n, lambda: f"'{op.name}' expects {n} results, got {len(op.results)}")


def is_int_scalar(t: Type) -> bool:
    return isinstance(t, ScalarType) and t.dtype in INT_DTYPES


def is_scalar(t: Type) -> bool:
    return isinstance(t, ScalarType)


def same_shape(a: Type, b: Type) -> bool:
    if isinstance(a, TileType) and isinstance(b, TileType):
        return a.shape == b.shape
    if isinstance(a, VectorType) and isinstance(b, VectorType):
        return a.n == b.n
    return False


# ---------------------------------------------------------------------------------------------
# Reducing stores: `tk.store %G, %v, coords... {reduce = "add"}` (and the `tma.store` create-tma makes
# of it) adds the value into global memory instead of overwriting it (the front end's `G[i, j] += t`).

REDUCE_ATTR = "reduce"
REDUCE_KINDS = ("add",)
# f32 only. PTX has the f16/bf16 forms too (`cp.reduce.async.bulk.tensor ... .add` on a bf16/f16 tensor map,
# `red.global.add.noftz.bf16` / `.f16`), but the scalar bf16 `red` needs sm_90 (PTX ISA, "red"), so the sm_80
# fallback could not take it, and a sum of many partials rounded to 8 mantissa bits at every add is not the
# workspace the attention backward asks for (an f32 dQ accumulator, cast to bf16 once at the end).
REDUCE_DTYPES = ("f32",)
# `red_vec = 4` on a reducing store of an f32 register tile or vector (set by passes/vector_red.py, sm_90a): the
# backend adds four consecutive elements with one `red.global.add.v4.f32` (PTX ISA 8.1, "red": vector types need
# sm_90 and .global); the layout's lane chunks must hold a multiple of four elements.
RED_VEC_ATTR = "red_vec"
RED_VEC_ELEMS = 4


def reduce_problem(op: Operation, dst: Type, val: Type) -> str | None:
    """Why `op`'s `reduce` attribute is wrong (None: absent or right): a reducing store writes a gl of
    an f32 tile or vector with a known kind."""
    kind = op.attrs.get(REDUCE_ATTR)
    if kind is None:
        return red_vec_problem(op, val)  # `red_vec` alone is wrong
    if str(kind) not in REDUCE_KINDS:
        return f"'{op.name}' reduce = \"{kind}\": the kinds are " + ", ".join(f'"{k}"' for k in REDUCE_KINDS)
    if not isinstance(dst, GlobalType):
        return f"'{op.name}' {{reduce = \"{kind}\"}} writes a gl, not {dst}"
    dtype = getattr(val, "dtype", None)
    if dtype not in REDUCE_DTYPES:
        return f"'{op.name}' {{reduce = \"{kind}\"}} adds " + "/".join(REDUCE_DTYPES) + f" values, not {dtype}"
    return red_vec_problem(op, val)


def red_vec_problem(op: Operation, val: Type) -> str | None:
    """Why `op`'s `red_vec` attribute is wrong (None: absent or right): RED_VEC_ELEMS on a reducing store of a
    register value whose lane chunks (`vec`) hold a multiple of that many elements."""
    n = op.attrs.get(RED_VEC_ATTR)
    if n is None:
        return None
    if op.attrs.get(REDUCE_ATTR) is None:
        return f"'{op.name}' {RED_VEC_ATTR} = {n} needs reduce = \"add\""
    if n != RED_VEC_ELEMS:
        return f"'{op.name}' {RED_VEC_ATTR} = {n}: the vector red adds {RED_VEC_ELEMS} elements"
    lay = val.get("layout") if hasattr(val, "get") else None
    vec = lay.get("vec") if isinstance(lay, dict) else None
    if not isinstance(vec, int) or vec % RED_VEC_ELEMS:
        return f"'{op.name}' {RED_VEC_ATTR} = {n} needs lane chunks of a multiple of {n} elements, not {val}"
    return None
