"""The catalogue of operations: for each op name, its traits and a type checker.

Importing this module registers every op: the core ops below (scalars, tiles, control flow) and,
through its imports, the later levels' ops (tkir/ops_tma.py, ops_pipeline.py, ops_streamk.py). An
op is defined with tkir/opdef.py; what it computes is the interpreter's (tkir/interp*.py), the
meaning of scalar arithmetic tkir/scalar.py's.

This is the contract between the front end (which builds these ops), the interpreter (which
defines what they mean), the passes and the backend. docs/ir.md documents every op.

Conventions
-----------
* Coordinates of a global access: one i32 per dim of the `gl`; the last two (a tile) or the last
  one (a vector) are in tile units, the leading ones plain indices.
* `bcast = row` on a binary op: the vector operand has one value per tile row (the result of a
  `row_*` reduction) and is broadcast along each row; `bcast = col`: one value per column.
* `tk.mma`: D = op(A) @ op(B) + C, op = transpose where `trans_a`/`trans_b` is true, with f32
  accumulation; A and B are shared or register tiles, C a register tile.
"""

from __future__ import annotations

from tkir import ops_pipeline, ops_streamk, ops_tma, scalar  # noqa: F401  (ops_*: register the later levels' ops)
from tkir.facts import MIN_BLOCKS_ATTR, blocks_per_sm_problem
from tkir.ir import Operation
from tkir.opdef import (
    OPS,
    OpDef,
    OpError,
    expect,
    is_int_scalar,
    is_scalar,
    n_operands,
    n_results,
    reduce_problem,
    register_op,
    same_shape,
)
from tkir.shared_plan import tile_stage_bytes
from tkir.types import FLOAT_DTYPES, GlobalType, ScalarType, TileType, Type, VectorType, is_register, is_shared

# Re-exported: `from tkir.ops import OPS` is the complete catalogue (this module imports every op module).
__all__ = ["CMP_PREDICATES", "CONVERT_VIA", "OPS", "SCALAR_BINARY", "TILE_BINARY", "TILE_BIT", "TILE_UNARY", "OpDef",
           "OpError", "SHIFT_BITS", "register_op"]


# ---------------------------------------------------------------------------------------------
# Checking helpers of this module.


def _coords(op: Operation, g: GlobalType, start: int, tile: Type) -> None:
    coords = op.operands[start:]
    expect(len(coords) == g.rank, f"'{op.name}' needs {g.rank} coordinates for {g}, got {len(coords)}")
    for c in coords:
        expect(is_int_scalar(c.type), f"'{op.name}' coordinates must be i32, got {c.type}")
    tile_rank = 2 if isinstance(tile, TileType) else 1
    expect(g.rank >= tile_rank, f"'{op.name}': a {tile} needs a global tensor of rank >= {tile_rank}")
    expect(g.dtype == tile.dtype, f"'{op.name}': dtype mismatch, {g} and {tile}")


# ---------------------------------------------------------------------------------------------
# Op checkers.


def _const(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 1)
    expect("value" in op.attrs, "'arith.const' needs a 'value' attribute")
    expect(is_scalar(op.result.type), "'arith.const' yields a scalar")
    value, dtype = op.attrs["value"], op.result.type.dtype
    if dtype in scalar.INT_RANGES:
        integral = (isinstance(value, int) and not isinstance(value, bool)) or \
            (isinstance(value, float) and value.is_integer())
        expect(integral, f"'arith.const' of {dtype} holds an integer, not {value!r}")
        lo, hi = scalar.INT_RANGES[dtype]  # LLVM would keep its low 32 bits: 2**32 becomes 0
        expect(lo <= value <= hi, f"'arith.const' {value} does not fit {dtype} ({lo} .. {hi})")


def _scalar_binary(op: Operation) -> None:
    n_operands(op, 2)
    n_results(op, 1)
    a, b = (v.type for v in op.operands)
    expect(is_scalar(a) and is_scalar(b), f"'{op.name}' takes scalars, got {a} and {b}")
    expect(a == b == op.result.type, f"'{op.name}' operand types differ: {a}, {b} -> {op.result.type}")
    expect(op.name.removeprefix("arith.") not in scalar.BIT_NAMES or a.dtype in scalar.INT_DTYPES,
           f"'{op.name}' takes i32 or u32 scalars, got {a}")


def _scalar_cast(op: Operation) -> None:
    n_operands(op, 1)
    n_results(op, 1)
    expect(is_scalar(op.operands[0].type) and is_scalar(op.result.type), "'arith.cast' casts scalars")


def _size(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 1)
    expect(isinstance(op.attrs.get("name"), str), "'tk.size' needs name = \"...\"")
    expect(is_int_scalar(op.result.type), "'tk.size' yields i32")


def _block_id(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 1)
    dim = op.attrs.get("dim")  # an int: -0.0 and true compare equal to 0 and 1 (a fuzzer find)
    expect(type(dim) is int and dim in (0, 1, 2), f"'{op.name}' needs dim = 0, 1 or 2")


def _alloc(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 1)
    expect(is_shared(op.result.type), f"'tk.alloc' allocates st/sv, not {op.result.type}")


def _reuse(op: Operation) -> None:
    n_operands(op, 1)
    n_results(op, 1)
    donor, t = op.operands[0].type, op.result.type
    expect(is_shared(donor) and is_shared(t), f"'tk.reuse' places a shared tile in a shared tile's memory, not {t} "
                                              f"in {donor}")
    expect(not isinstance(donor.get("stages"), int) and not isinstance(t.get("stages"), int),
           "'tk.reuse' takes one-stage tiles (a ring buffer's stages are the pipeline's)")
    expect(tile_stage_bytes(t) <= tile_stage_bytes(donor),
           f"'tk.reuse': {t} ({tile_stage_bytes(t)} B) does not fit in {donor} ({tile_stage_bytes(donor)} B)")
    expect(int(t.get("align") or 16) <= int(donor.get("align") or 16),
           f"'tk.reuse': {t} needs {t.get('align')}-byte alignment, more than {donor} has")


def _load(op: Operation) -> None:
    expect(len(op.operands) >= 1, "'tk.load' needs a source")
    if not op.results:  # global -> shared: tk.load %dst, %src, coords...
        n_operands(op, 2, 7)
        dst, src = op.operands[0].type, op.operands[1].type
        expect(is_shared(dst), f"'tk.load' without a result writes a shared tile, not {dst}")
        expect(isinstance(src, GlobalType), f"'tk.load' into shared memory reads a gl, not {src}")
        _coords(op, src, 2, dst)
        return
    n_results(op, 1)
    res, src = op.result.type, op.operands[0].type
    expect(is_register(res), f"'tk.load' with a result yields a register tile/vector, not {res}")
    if isinstance(src, GlobalType):
        _coords(op, src, 1, res)
    else:
        n_operands(op, 1)
        expect(is_shared(src), f"'tk.load' reads gl or st/sv, not {src}")
        if op.attrs.get("trans") is True:  # element (r, c) of the result is src[c, r]
            expect(isinstance(src, TileType) and isinstance(res, TileType) and res.shape == src.shape[::-1],
                   f"'tk.load' {{trans = true}} of {src} yields the transposed shape, not {res}")
        else:
            expect(same_shape(src, res), f"'tk.load' shape mismatch: {src} -> {res}")
        expect(src.dtype == res.dtype, f"'tk.load' dtype mismatch: {src} -> {res}")
    expect(op.attrs.get("trans") in (None, False) or not isinstance(src, GlobalType),
           "'tk.load' {trans = true} reads a shared tile")
    expect(op.attrs.get(READONLY_ATTR) in (None, True, False), f"'tk.load' {READONLY_ATTR} is true or false")
    expect(not op.attrs.get(READONLY_ATTR) or isinstance(src, GlobalType),
           f"'tk.load' {{{READONLY_ATTR} = true}} reads a gl into registers")
    expect(op.attrs.get(REREAD_ATTR) in (None, False) or op.attrs.get(READONLY_ATTR) is True,
           f"'tk.load' {{{REREAD_ATTR} = true}} needs {READONLY_ATTR} = true")


def _store(op: Operation) -> None:
    n_results(op, 0)
    expect(len(op.operands) >= 2, "'tk.store' needs a destination and a value")
    dst, val = op.operands[0].type, op.operands[1].type
    expect(isinstance(val, (TileType, VectorType)), f"'tk.store' stores a tile or vector, not {val}")
    problem = reduce_problem(op, dst, val)
    expect(problem is None, lambda: str(problem))
    if isinstance(dst, GlobalType):
        _coords(op, dst, 2, val)
    else:
        n_operands(op, 2)
        expect(is_shared(dst), f"'tk.store' writes gl or st/sv, not {dst}")
        expect(is_register(val), f"'tk.store' into shared memory stores a register value, not {val}")
        expect(same_shape(dst, val), f"'tk.store' shape mismatch: {val} -> {dst}")
        expect(dst.dtype == val.dtype, f"'tk.store' dtype mismatch: {val} -> {dst}")


def _fill(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 1)
    expect(isinstance(op.attrs.get("value"), (int, float)), "'tk.fill' needs a numeric value")
    expect(is_register(op.result.type), "'tk.fill' yields a register tile or vector")


def _mma(op: Operation) -> None:
    n_operands(op, 3)
    n_results(op, 1)
    a, b, c = (v.type for v in op.operands)
    d = op.result.type
    for name, t in (("A", a), ("B", b)):
        expect(isinstance(t, TileType), f"'tk.mma' operand {name} must be a tile, got {t}")
    expect(isinstance(c, TileType) and c.space == "rt", f"'tk.mma' accumulator must be an rt, got {c}")
    expect(a.dtype == b.dtype or {a.dtype, b.dtype} <= set(scalar.FP8_DTYPES),  # wgmma pairs e4m3 and e5m2 freely
           f"'tk.mma' operand dtypes differ: {a.dtype} @ {b.dtype}")
    m, ka = (a.cols, a.rows) if op.attrs.get("trans_a") else (a.rows, a.cols)
    kb, n = (b.cols, b.rows) if op.attrs.get("trans_b") else (b.rows, b.cols)
    expect(ka == kb, f"'tk.mma' inner dimensions differ: {m}x{ka} @ {kb}x{n}")
    expect(c.shape == (m, n), f"'tk.mma' accumulator is {c.rows}x{c.cols}, product is {m}x{n}")
    expect(d.bare() == c.bare() or (d.shape == c.shape and d.dtype == c.dtype),
           f"'tk.mma' result {d} must match the accumulator {c}")
    groups = op.attrs.get("async_groups")  # wgmma groups left in flight after it (pipeline)
    expect(groups is None or (isinstance(groups, int) and not isinstance(groups, bool) and groups >= 0),
           f"'tk.mma' async_groups = {groups!r}: the wgmma groups it leaves in flight, an int >= 0")


def _elementwise_type(t: Type) -> bool:
    return isinstance(t, (TileType, VectorType, ScalarType))


def _binary(op: Operation) -> None:
    n_operands(op, 2)
    n_results(op, 1)
    ref = _elementwise_pair(op)
    r = op.result.type
    if ref is not None:
        expect(r.dtype == ref.dtype, lambda: f"'{op.name}' result {r} must have the operands' dtype {ref.dtype}")
        expect(not (op.name == "tk.rem" and ref.dtype in FLOAT_DTYPES),
               lambda: f"'tk.rem' takes integer tiles, got {ref}")
        expect(not (op.name.removeprefix("tk.") in TILE_BIT and ref.dtype not in scalar.INT_DTYPES),
               lambda: f"'{op.name}' takes i32 and u32 tiles, got {ref}")
        expect(ref.dtype != "i1", lambda: f"'{op.name}' does not compute on predicates ({ref})")


def _elementwise_pair(op: Operation) -> TileType | VectorType | None:
    """Check the operand/result shapes of a two-operand elementwise op (tk.add, tk.cmp, ...).

    Returns the tile (or, without bcast, vector) operand whose shape the result has, or None
    for an all-scalar op. Scalar operands of integer tiles must be integers."""
    a, b = (v.type for v in op.operands)
    r = op.result.type
    expect(_elementwise_type(a) and _elementwise_type(b), lambda: f"'{op.name}' on {a} and {b}")
    expect(not is_shared(a) and not is_shared(b) and not is_shared(r),
           lambda: f"'{op.name}' computes on registers; load shared tiles first")
    bcast = op.attrs.get("bcast")
    tiles = [t for t in (a, b) if isinstance(t, TileType)]
    vecs = [t for t in (a, b) if isinstance(t, VectorType)]
    if bcast is not None:
        expect(str(bcast) in ("row", "col"), lambda: f"'{op.name}' bcast must be row or col")
        expect(len(tiles) == 1 and len(vecs) == 1, lambda: f"'{op.name}' bcast needs one tile and one vector")
        t, v = tiles[0], vecs[0]
        want = t.rows if str(bcast) == "row" else t.cols
        expect(v.n == want, lambda: f"'{op.name}': {bcast} broadcast needs a vector of {want}, got {v}")
        expect(isinstance(r, TileType) and r.shape == t.shape and r.space == t.space,
               lambda: f"'{op.name}' result {r} must match {t}")
        expect(t.dtype == v.dtype, lambda: f"'{op.name}' dtype mismatch: {a} and {b}")
        return t
    expect(not (tiles and vecs), lambda: f"'{op.name}' mixes {a} and {b} without bcast = row|col")
    shaped = [t for t in (a, b) if not isinstance(t, ScalarType)]
    if len(shaped) == 2:
        expect(same_shape(a, b), lambda: f"'{op.name}' shape mismatch: {a} and {b}")
    if not shaped:
        expect(a == b and (a == r or op.name == "tk.cmp"), lambda: f"'{op.name}' scalar types differ: {a}, {b} -> {r}")
        return None
    ref = shaped[0]
    expect(same_shape(r, ref), lambda: f"'{op.name}' result {r} does not match {ref}")
    dts = {t.dtype for t in shaped}
    expect(len(dts) == 1, lambda: f"'{op.name}' dtype mismatch: {a} and {b}")
    for t in (a, b):
        if isinstance(t, ScalarType):
            expect((t.dtype in FLOAT_DTYPES) == (ref.dtype in FLOAT_DTYPES),
                   lambda t=t: f"'{op.name}': a {t} scalar with a {ref} operand")
    return ref


def _unary(op: Operation) -> None:
    n_operands(op, 1)
    n_results(op, 1)
    a, r = op.operands[0].type, op.result.type
    expect(_elementwise_type(a) and not is_shared(a), lambda: f"'{op.name}' computes on registers, got {a}")
    if isinstance(a, ScalarType):
        expect(r == a, lambda: f"'{op.name}' result {r} must match {a}")
    else:
        expect(same_shape(a, r) and r.dtype == a.dtype, lambda: f"'{op.name}' result {r} must match {a}")
    expect(a.dtype in FLOAT_DTYPES, lambda: f"'{op.name}' needs a float operand, got {a}")


def _cast(op: Operation) -> None:
    n_operands(op, 1)
    n_results(op, 1)
    a, r = op.operands[0].type, op.result.type
    expect(is_register(a) and is_register(r) and same_shape(a, r), f"'tk.cast' from {a} to {r}")


# tk.reduce kinds: mean and var (the population variance, sum((x - mean)^2) / n) reduce rows only;
# `stats = N` groups a mean and a var of one operand computed in one exchange (passes/fuse_row_stats.py)
REDUCE_KINDS = ("max", "min", "sum", "mean", "var", "argmax", "argmin")
ROW_ONLY_KINDS = ("mean", "var", "argmax", "argmin")
# argmax / argmin: the i32 column of each row's largest (smallest) element, the first one on ties; a NaN
# counts as larger (smaller) than any number, so the first NaN of a row wins, as torch.argmax computes it
ARG_KINDS = ("argmax", "argmin")
STATS_ATTR = "stats"


def _reduce(op: Operation) -> None:
    n_operands(op, 1)
    n_results(op, 1)
    a, r = op.operands[0].type, op.result.type
    expect(isinstance(a, TileType) and a.space == "rt", f"'tk.reduce' reduces an rt, got {a}")
    kind = str(op.attrs.get("kind"))
    expect(kind in REDUCE_KINDS, f"'tk.reduce' kind must be one of {', '.join(REDUCE_KINDS)}")
    axis = str(op.attrs.get("axis"))
    expect(axis in ("row", "col"), "'tk.reduce' axis must be row or col")
    expect(kind not in ROW_ONLY_KINDS or axis == "row", f"'tk.reduce' {{kind = {kind}}} reduces rows only")
    stats = op.attrs.get(STATS_ATTR)
    expect(stats is None or (isinstance(stats, int) and not isinstance(stats, bool) and kind in ROW_ONLY_KINDS),
           f"'tk.reduce' {STATS_ATTR} = N (an int) marks a row mean or var (passes/fuse_row_stats.py)")
    want = a.rows if axis == "row" else a.cols
    expect(isinstance(r, VectorType) and r.space == "rv" and r.n == want,
           f"'tk.reduce' over {axis}s of {a} yields rv of {want}, got {r}")
    if kind in ARG_KINDS:
        expect(a.dtype in FLOAT_DTYPES and r.dtype == "i32",
               f"'tk.reduce' {{kind = {kind}}} takes a float tile and yields rv<i32, {want}>, got {a} -> {r}")


def _gather(op: Operation) -> None:
    """%x = tk.gather %G, coords... : rt<T, R, C>: tk.load's coordinates, but the row one (dim rank-2) is an
    rv<i32|u32, R> of row indices; row r of x is row idx[r] of G (column tile coords[-1] of it)."""
    n_results(op, 1)
    expect(len(op.operands) >= 3, "'tk.gather' needs a global tensor, a row-index vector and a column coordinate")
    g, r = op.operands[0].type, op.result.type
    expect(isinstance(g, GlobalType), f"'tk.gather' reads a gl, not {g}")
    expect(isinstance(r, TileType) and r.space == "rt", f"'tk.gather' yields a register tile, not {r}")
    coords = op.operands[1:]
    expect(len(coords) == g.rank, f"'tk.gather' needs {g.rank} coordinates for {g}, got {len(coords)}")
    expect(g.dtype == r.dtype, f"'tk.gather': dtype mismatch, {g} and {r}")
    for k, c in enumerate(coords):
        if k == g.rank - 2:
            t = c.type
            expect(isinstance(t, VectorType) and t.space == "rv" and t.dtype in ("i32", "u32") and t.n == r.rows,
                   f"'tk.gather' row coordinate must be an rv<i32, {r.rows}> of row indices, got {t}")
        else:
            expect(is_int_scalar(c.type), f"'tk.gather' coordinates but the row one must be i32, got {c.type}")


def _mask_causal(op: Operation) -> None:
    n_operands(op, 3)
    n_results(op, 1)
    t = op.operands[0].type
    expect(isinstance(t, TileType) and t.space == "rt", f"'tk.mask_causal' masks an rt, got {t}")
    expect(all(is_int_scalar(v.type) for v in op.operands[1:]), "'tk.mask_causal' offsets are i32")
    expect(isinstance(op.attrs.get("fill"), float), "'tk.mask_causal' needs fill = <float>")


def _transpose(op: Operation) -> None:
    n_operands(op, 1)
    n_results(op, 1)
    a, r = op.operands[0].type, op.result.type
    expect(isinstance(a, TileType) and a.space == "rt", f"'tk.transpose' takes an rt, got {a}")
    expect(isinstance(r, TileType) and (r.rows, r.cols) == (a.cols, a.rows) and r.dtype == a.dtype,
           f"'tk.transpose' of {a} yields {r}")


def _index(op: Operation) -> None:
    """%i = tk.index %x {axis = row} : rt<i32, R, C>: element (r, c) holds r (axis = col: c)."""
    n_operands(op, 1)
    n_results(op, 1)
    a, r = op.operands[0].type, op.result.type
    expect(isinstance(a, TileType) and a.space == "rt", f"'tk.index' takes the shape of an rt, got {a}")
    expect(str(op.attrs.get("axis")) in ("row", "col"), "'tk.index' axis must be row or col")
    expect(isinstance(r, TileType) and r.space == "rt" and r.shape == a.shape and r.dtype == "i32",
           f"'tk.index' of {a} yields rt<i32, {a.rows}, {a.cols}>, got {r}")


def _tile_cmp(op: Operation) -> None:
    """%c = tk.cmp %a, %b {pred = lt[, bcast = row|col]} : rt<i1, R, C> (or rv<i1, N>)."""
    n_operands(op, 2)
    n_results(op, 1)
    expect(str(op.attrs.get("pred")) in CMP_PREDICATES,
           f"'tk.cmp' needs pred = one of {', '.join(CMP_PREDICATES)}")
    ref = _elementwise_pair(op)
    r = op.result.type
    expect(ref is not None, "'tk.cmp' compares tiles or vectors; scalars use arith.cmp")
    expect(is_register(r) and r.dtype == "i1", f"'tk.cmp' yields an i1 register tile or vector, not {r}")
    expect(ref.dtype != "i1", f"'tk.cmp' does not compare predicates ({ref})")


def _select(op: Operation) -> None:
    """%r = tk.select %c, %a, %b : T: r = c ? a : b elementwise; a, b of type T (shape of c) or scalars."""
    n_operands(op, 3)
    n_results(op, 1)
    c, a, b = (v.type for v in op.operands)
    r = op.result.type
    expect(is_register(c) and c.dtype == "i1", f"'tk.select' condition must be an i1 register tile/vector, got {c}")
    expect(is_register(r) and same_shape(r, c), f"'tk.select' result {r} must have the shape of {c}")
    shaped = [t for t in (a, b) if not isinstance(t, ScalarType)]
    expect(bool(shaped), "'tk.select' needs a tile or vector value operand")
    for t in (a, b):
        if isinstance(t, ScalarType):
            expect((t.dtype in FLOAT_DTYPES) == (r.dtype in FLOAT_DTYPES),
                   f"'tk.select': a {t} scalar for a {r} result")
        else:
            expect(is_register(t) and same_shape(t, c) and t.dtype == r.dtype,
                   f"'tk.select' value {t} must match the result {r}")


def _outer(op: Operation) -> None:
    """%r = tk.outer %a, %b {axis = row|col}: the outer product of each row (col) pair.

    axis = row: a rt<T, R, Ca>, b rt<T, R, Cb> -> rt<T, R, Ca*Cb>, r[i, p*Cb + q] = a[i, p] * b[i, q];
    axis = col: a rt<T, Ra, C>, b rt<T, Rb, C> -> rt<T, Ra*Rb, C>, r[p*Rb + q, j] = a[p, j] * b[q, j]."""
    n_operands(op, 2)
    n_results(op, 1)
    a, b = (v.type for v in op.operands)
    r = op.result.type
    for t in (a, b, r):
        expect(isinstance(t, TileType) and t.space == "rt", f"'tk.outer' takes and yields register tiles, got {t}")
    expect(a.dtype == b.dtype == r.dtype, f"'tk.outer' dtypes differ: {a.dtype}, {b.dtype} -> {r.dtype}")
    expect(a.dtype in FLOAT_DTYPES, f"'tk.outer' multiplies float tiles, got {a}")
    axis = str(op.attrs.get("axis"))
    expect(axis in ("row", "col"), "'tk.outer' axis must be row or col")
    if axis == "row":
        expect(a.rows == b.rows, f"'tk.outer' {{axis = row}} needs operands of one row count: {a} and {b}")
        want = (a.rows, a.cols * b.cols)
    else:
        expect(a.cols == b.cols, f"'tk.outer' {{axis = col}} needs operands of one column count: {a} and {b}")
        want = (a.rows * b.rows, a.cols)
    expect(r.shape == want, f"'tk.outer' {{axis = {axis}}} of {a.bare()} and {b.bare()} yields "
                            f"rt<{a.dtype}, {want[0]}, {want[1]}>, not {r.bare()}")


def _for(op: Operation) -> None:
    expect(len(op.operands) >= 3, "'scf.for' needs lower, upper, step")
    for v in op.operands[:3]:
        expect(is_int_scalar(v.type), f"'scf.for' bounds must be i32, got {v.type}")
    inits = op.operands[3:]
    expect(len(op.regions) == 1, "'scf.for' has one region")
    blk = op.body
    expect(len(blk.args) == 1 + len(inits), "'scf.for' body takes the index and one arg per init")
    expect(is_int_scalar(blk.args[0].type), "'scf.for' index is i32")
    expect(len(op.results) == len(inits), "'scf.for' yields one result per init")
    for init, arg, res in zip(inits, blk.args[1:], op.results, strict=True):
        expect(init.type == arg.type == res.type,
               f"'scf.for' carried value types differ: {init.type}, {arg.type}, {res.type}")
    term = blk.terminator
    expect(term is not None and term.name == "scf.yield", "'scf.for' body ends with scf.yield")
    expect([v.type for v in term.operands] == [r.type for r in op.results],
           "'scf.yield' types must match the loop's results")


def _yield(op: Operation) -> None:
    n_results(op, 0)


def _fence(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 0)


CMP_PREDICATES = tuple(scalar.COMPARE)  # eq ne lt le gt ge: signed for integers, ordered for floats


def _cmp(op: Operation) -> None:
    """%c = arith.cmp %a, %b {pred = lt} : i1"""
    n_operands(op, 2)
    n_results(op, 1)
    a, b = (v.type for v in op.operands)
    expect(is_scalar(a) and a == b, f"'arith.cmp' compares two scalars of one type, got {a} and {b}")
    expect(str(op.attrs.get("pred")) in CMP_PREDICATES,
           f"'arith.cmp' needs pred = one of {', '.join(CMP_PREDICATES)}")
    expect(op.result.type == ScalarType("i1"), f"'arith.cmp' yields i1, not {op.result.type}")


def _if(op: Operation) -> None:
    """scf.if %cond : T... { then } [{ else }]: run one region by the i1 condition.

    One region (no else, no results: stream-k's form) or two (then, else); with results, each region
    ends with an scf.yield of one value per result, of the result's type."""
    n_operands(op, 1)
    expect(op.operands[0].type == ScalarType("i1"), f"'scf.if' condition must be i1, not {op.operands[0].type}")
    expect(len(op.regions) in (1, 2), f"'scf.if' has one or two regions, got {len(op.regions)}")
    expect(all(not r.block.args for r in op.regions), "'scf.if' regions take no arguments")
    expect(len(op.regions) == 2 or not op.results, "'scf.if' with results needs an else region")
    want = [r.type for r in op.results]
    for r in op.regions:
        term = r.block.terminator
        got = [v.type for v in term.operands] if term is not None and term.name == "scf.yield" else None
        if want:
            expect(got == want, f"'scf.if' regions must yield {', '.join(map(str, want))}, got "
                                f"{'no scf.yield' if got is None else ', '.join(map(str, got)) or 'nothing'}")
        else:
            expect(not got, "'scf.if' without results yields nothing")


def _kernel(op: Operation) -> None:
    expect(op.symbol is not None, "'tk.kernel' needs a name: tk.kernel @name")
    expect(len(op.regions) == 1, "'tk.kernel' has one region")
    for a in op.body.args:
        expect(isinstance(a.type, (GlobalType, ScalarType)), f"kernel parameter {a.name}: {a.type}")
    grid = op.attrs.get("grid")
    expect(isinstance(grid, list) and 1 <= len(grid) <= 3 and all(isinstance(g, str) for g in grid),
           "'tk.kernel' needs grid = [\"expr\", ...] (1 to 3 size expressions)")
    if MIN_BLOCKS_ATTR in op.attrs:  # `@blocks_per_sm(B)`
        problem = blocks_per_sm_problem(op.attrs[MIN_BLOCKS_ATTR])
        expect(problem is None, f"'tk.kernel': {problem}")


# tk.load's `l2`: the L2 eviction priority of a global -> register load (set by passes/cache_policy.py,
# emitted by backend/cache_policy.py as createpolicy.fractional.L2::<priority> + ld.global.L2::cache_hint)
L2_ATTR = "l2"
# tk.load's `readonly`: a global -> register load of a tensor the kernel never writes (set by
# passes/readonly_loads.py, emitted as ld.global.nc)
READONLY_ATTR = "readonly"
REREAD_ATTR = "reread"   # with readonly: a second read of what an earlier pass read (ld.global.nc.L1::no_allocate)
L2_PRIORITIES = ("evict_last", "evict_normal", "evict_first", "evict_unchanged")
CONVERT_VIA = ("none", "shuffle", "smem")  # register relabel, warp shuffles, shared round trip


def _convert_layout(op: Operation) -> None:
    """tk.convert_layout %x {via = "smem", smem_bytes = N, shuffles = S} : <x's type, new layout>"""
    n_operands(op, 1)
    n_results(op, 1)
    a, r = op.operands[0].type, op.result.type
    expect(is_register(a) and is_register(r) and same_shape(a, r) and a.dtype == r.dtype,
           f"'tk.convert_layout' changes only the layout: {a} -> {r}")
    expect(op.attrs.get("via") in CONVERT_VIA,
           "'tk.convert_layout' needs via = \"none\", \"shuffle\" or \"smem\"")


SCALAR_BINARY = scalar.BINARY_NAMES  # add sub mul div rem min max cdiv and or xor shl shr (meaning: tkir/scalar.py)
# the bit operations (integer tiles and integer scalars only): and, or, xor; shl and shr by a count read unsigned, a
# count of 32 or more giving 0 (shr of an i32: its sign in every bit), as PTX's shl/shr clamp it (docs/language.md)
TILE_BIT = scalar.BIT_NAMES
SHIFT_BITS = scalar.SHIFT_BITS  # shl/shr: a count of SHIFT_BITS or more clamps (read by the interpreter, backend)
TILE_BINARY = ("add", "sub", "mul", "div", "max", "min", "rem", *TILE_BIT)  # rem and TILE_BIT: integer tiles only
TILE_UNARY = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "neg", "tanh", "sigmoid", "erf")

register_op("arith.const", _const, local=True, summary="a scalar constant")
for _n in SCALAR_BINARY:
    register_op(f"arith.{_n}", _scalar_binary, local=True, summary=f"scalar {_n} (the GPU's 32 bits)")
register_op("arith.cast", _scalar_cast, local=True, summary="scalar conversion")
register_op("tk.size", _size, local=True, summary="run-time value of a symbolic size")
register_op("tk.block_id", _block_id, local=True, summary="block index along grid dim 0/1/2")
register_op("tk.grid_dim", _block_id, local=True, summary="number of blocks along grid dim 0/1/2")
register_op("tk.alloc", _alloc, local=True, pure=False, summary="a shared tile or vector")
register_op("tk.reuse", _reuse, local=True, pure=False,
            summary="a shared tile in the memory of a shared tile dead from here on (reuse-smem)")
register_op("tk.load", _load, local=True, pure=False,
            summary="global->shared, global->register, shared->register")
register_op("tk.store", _store, local=True, pure=False, summary="register/shared -> global, register -> shared")
register_op("tk.fill", _fill, local=True, summary="a register tile or vector filled with a constant")
register_op("tk.mma", _mma, local=True, summary="D = op(A) @ op(B) + C, f32 accumulation")
for _n in TILE_BINARY:
    register_op(f"tk.{_n}", _binary, local=True, summary=f"elementwise {_n}, with bcast = row|col for vectors")
for _n in TILE_UNARY:
    register_op(f"tk.{_n}", _unary, local=True, summary=f"elementwise {_n}")
register_op("tk.cast", _cast, local=True, summary="elementwise dtype conversion (round to nearest even)")
register_op("tk.reduce", _reduce, local=True, summary="row or column reduction (max, min, sum) to an rv")
register_op("tk.gather", _gather, local=True, pure=False,
            summary="global -> registers, rows picked by a vector of row indices (an embedding lookup)")
register_op("tk.mask_causal", _mask_causal, local=True,
            summary="fill elements with col0 + c > row0 + r (causal attention)")
register_op("tk.transpose", _transpose, local=True, summary="register tile transpose")
register_op("tk.outer", _outer, local=True,
            summary="outer product of each row (axis = row) or column (axis = col) pair")
register_op("tk.index", _index, local=True, summary="i32 tile of each element's row (axis = row) or column index")
register_op("tk.cmp", _tile_cmp, local=True,
            summary="elementwise comparison (pred = eq, ne, lt, le, gt, ge) -> i1 tile")
register_op("tk.select", _select, local=True,
            summary="elementwise c ? a : b on an i1 tile; a, b tiles or scalars")
register_op("tk.convert_layout", _convert_layout, local=True,
            summary="move a register tile/vector to another layout (via none, shuffle or smem)")
register_op("tk.fence", _fence, local=True, pure=False,
            summary="memory accesses before it are issued (and ordered at block scope) before those after it")
register_op("scf.for", _for, pure=False, summary="counted loop with loop-carried values")
register_op("scf.yield", _yield, pure=False, terminator=True, summary="loop body terminator")
register_op("arith.cmp", _cmp, local=True, summary="scalar comparison (pred = eq, ne, lt, le, gt, ge) -> i1")
register_op("scf.if", _if, pure=False, summary="run the then or else region by the i1 condition")
register_op("tk.kernel", _kernel, pure=False, summary="a kernel: parameters, grid, body")
