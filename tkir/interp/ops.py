"""The interpreter's handlers of the core ops (tkir/ops.py): scalars, memory, tile math, control flow.

Scalar arithmetic, comparisons and casts compute with tkir/scalar.py; tiles with numpy in f32
(results are rounded to their dtypes by the frame, tkir/interp/frame.py).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np

from tkir import scalar
from tkir.diagnostics import TkirWarning
from tkir.interp.frame import Frame, Handler, InterpError, register_handler, shape_of, where, zeros
from tkir.ir import Operation
from tkir.opdef import REDUCE_ATTR
from tkir.ops import SHIFT_BITS
from tkir.types import GlobalType, TileType, Type, VectorType

# ---------------------------------------------------------------------------------------------
# Global memory access: the last two coordinates (a tile) or the last one (a vector) count tiles;
# parts outside the tensor read as zero and are not written (TMA out-of-bounds fill).


def _window(t: Type, g: np.ndarray, coords: list[int]) -> tuple[tuple, tuple] | None:
    """(index into the global array, index into the tile) of the in-bounds part, or None if empty."""
    box = shape_of(t)
    lead = coords[: len(coords) - len(box)]
    g_idx: list = []
    for c, ext in zip(lead, g.shape, strict=False):
        if not 0 <= c < ext:
            return None
        g_idx.append(c)
    t_idx = []
    for c, n, ext in zip(coords[len(lead):], box, g.shape[len(lead):], strict=True):
        lo = c * n
        a, b = max(lo, 0), min(lo + n, ext)
        if a >= b:
            return None
        g_idx.append(slice(a, b))
        t_idx.append(slice(a - lo, b - lo))
    return tuple(g_idx), tuple(t_idx)


def _read_global(t: TileType | VectorType, g: np.ndarray, coords: list[int]) -> np.ndarray:
    w = _window(t, g, coords)
    out = zeros(t)
    if w is not None:
        out[w[1]] = g[w[0]]
    return out


def _write_global(g: np.ndarray, val: np.ndarray, t: Type, coords: list[int], reduce: object = None) -> None:
    """Write (or with `reduce = "add"`, add) the part of `val` inside the tensor; the rest is clipped."""
    w = _window(t, g, coords)
    if w is None:
        return
    if reduce is None:
        g[w[0]] = val[w[1]].astype(g.dtype)
    else:  # "add" (the only kind, tkir/opdef.py REDUCE_KINDS), in the tensor's dtype as red/TMA add
        g[w[0]] = (g[w[0]] + val[w[1]].astype(g.dtype)).astype(g.dtype)


# ---------------------------------------------------------------------------------------------
# Handlers.


def _arith_binary(name: str) -> Handler:
    """`arith.<name>` as the GPU computes it (tkir/scalar.py runtime_binary): an integer result that passes
    the 32 bits wraps there and here, with a warning naming the op (once per op)."""
    def run(op: Operation, args: list, frame: Frame) -> object:
        dtype = op.result.type.dtype
        if dtype in scalar.INT_DTYPES and scalar.runtime_wraps(name, args[0], args[1]):
            warnings.warn(f"{where(op)}'{op.name}' on {dtype} passes 32 bits and wraps, as on the GPU "
                          "(run-time integers are 32 bits)", IntegerOverflowWarning, stacklevel=2)
        return scalar.runtime_binary(name, args[0], args[1], dtype)
    return run


class IntegerDivisionWarning(TkirWarning):
    """An integer tile op divides an element by zero: undefined on the GPU, 0 in the interpreter."""


class IntegerOverflowWarning(TkirWarning):
    """A run-time integer op whose exact result does not fit its 32 bits: the interpreter wraps it, as
    the GPU does (tkir/scalar.py), and says where (once per op: the message names its location)."""

for _name in scalar.BINARY_NAMES:
    register_handler(f"arith.{_name}", _arith_binary(_name))

register_handler("arith.const", lambda op, args, frame: op.attrs["value"])
register_handler("arith.cast", lambda op, args, frame: scalar.runtime_convert(args[0], op.result.type.dtype))
register_handler("tk.block_id", lambda op, args, frame: frame.block_id[op.attrs["dim"]])
register_handler("tk.grid_dim", lambda op, args, frame: frame.grid[op.attrs["dim"]])


def _size(op: Operation, args: list, frame: Frame) -> int:
    name = op.attrs["name"]
    if name not in frame.sizes:
        raise InterpError(f"{where(op)}size '{name}' is unknown: no parameter has it as a dim; "
                          f"pass sizes={{'{name}': ...}}")
    return frame.sizes[name]


register_handler("tk.size", _size)


def _alloc(op: Operation, args: list, frame: Frame) -> np.ndarray:
    t = op.result.type
    stages = t.get("stages") if isinstance(t, (TileType, VectorType)) else None
    if isinstance(stages, int):  # a ring buffer (pipeline pass): one tile per stage
        return np.stack([zeros(t, frame.poison) for _ in range(stages)])
    return zeros(t, frame.poison)


register_handler("tk.alloc", _alloc)


def _reuse(op: Operation, args: list, frame: Frame) -> np.ndarray:
    """The tile lives in the donor's memory from here on: the donor's contents are gone (poisoned) and a later
    read of it is an error (Frame._check_reused)."""
    donor = args[0]
    if np.issubdtype(donor.dtype, np.floating):
        donor.fill(np.nan)
    at = f" at {op.loc}" if op.loc else ""
    frame.reused[id(op.operands[0])] = f"'tk.reuse' of %{op.result.name}{at}"
    return zeros(op.result.type, frame.poison)


register_handler("tk.reuse", _reuse)
register_handler("tk.fence", lambda op, args, frame: None)  # orders issue on the GPU; the interpreter runs in order
register_handler("tk.fill", lambda op, args, frame: np.full(
    shape_of(op.result.type), op.attrs["value"],
    np.int64 if op.result.type.dtype in scalar.INT_DTYPES else np.float32))  # integers exact, past 2**24 too


def load(op: Operation, args: list, frame: Frame) -> np.ndarray | None:
    if not op.results:  # global -> shared, into the buffer
        dst, src, *coords = args
        w = _window(op.operands[0].type, src, coords)
        if w is None or dst[w[1]].shape != dst.shape:
            dst.fill(0.0)
        if w is not None:
            dst[w[1]] = src[w[0]]
        return None
    src, *coords = args
    if coords or isinstance(op.operands[0].type, GlobalType):
        return _read_global(op.result.type, src, coords)
    if op.attrs.get("trans") is True:
        return src.T.copy()
    return src.copy()  # shared -> register: a snapshot; the buffer may be rewritten later


def store(op: Operation, args: list, frame: Frame) -> None:
    dst, val, *coords = args
    if isinstance(op.operands[0].type, GlobalType):
        _write_global(dst, val, op.operands[1].type, coords, op.attrs.get(REDUCE_ATTR))
    else:
        dst[...] = val


register_handler("tk.load", load)
register_handler("tk.store", store)


def gather(op: Operation, args: list, frame: Frame) -> np.ndarray:
    """Row r of the result is row idx[r] of the tensor (the plane the leading coordinates pick), column tile
    coords[-1] of it; columns past the tensor's edge read zero, as a load's. An index outside the tensor's
    rows is an error here (on the GPU such a row reads zeros: docs/language.md, "Gathers")."""
    src, *coords = args
    g = op.operands[0].type
    t = op.result.type
    lead, idx, col = coords[:-2], np.asarray(coords[-2]).astype(np.int64), coords[-1]
    for k, (c, ext) in enumerate(zip(lead, src.shape, strict=False)):
        if not 0 <= c < ext:
            raise InterpError(f"{where(op)}'tk.gather': coordinate {c} of dim {k} is outside {g} (extent {ext})")
    plane = src[tuple(lead)]
    rows = plane.shape[0]
    bad = np.flatnonzero((idx < 0) | (idx >= rows))
    if bad.size:
        r = int(bad[0])
        vec = f"%{op.operands[-2].name}" if op.operands[-2].name else "the row-index vector"
        raise InterpError(f"{where(op)}'tk.gather': row index {int(idx[r])} (element {r} of {vec}) is outside the "
                          f"{rows} rows of %{op.operands[0].name} ({g}); {bad.size} of {idx.size} indices are out "
                          "of range (on the GPU such a row reads zeros)")
    out = zeros(t)
    lo = col * t.cols
    a, b = max(lo, 0), min(lo + t.cols, plane.shape[1])
    if a < b:
        out[:, a - lo:b - lo] = plane[idx, a:b]
    return out


register_handler("tk.gather", gather)


def _mma(op: Operation, args: list, frame: Frame) -> np.ndarray:
    a, b, c = args
    if op.attrs.get("trans_a"):
        a = a.T
    if op.attrs.get("trans_b"):
        b = b.T
    return np.matmul(a, b, dtype=np.float32) + c


register_handler("tk.mma", _mma)


def _bcast(op: Operation, a: object, b: object) -> tuple[object, object]:
    """Reshape the vector operand of a `bcast = row|col` op to broadcast against the tile."""
    kind = op.attrs.get("bcast")
    if kind is None:
        return a, b
    shape = (-1, 1) if str(kind) == "row" else (1, -1)
    if isinstance(op.operands[0].type, VectorType):
        return a.reshape(shape), b
    return a, b.reshape(shape)


def _tile_binary(name: str, fn: Callable[[object, object], object]) -> Handler:
    def handler(op: Operation, args: list, frame: Frame) -> object:
        a, b = _bcast(op, args[0], args[1])
        if op.result.type.dtype in scalar.INT_DTYPES:
            return _int_tile_binary(op, name, a, b)
        return fn(a, b)

    return handler


def _int_tile_binary(op: Operation, name: str, a: object, b: object) -> np.ndarray:
    """An i32 / u32 tile op as the GPU computes it (docs/language.md, "Integer tiles"): on 32 bits, add, sub
    and mul wrap (two's complement; a warning names the op where a result passes the 32 bits), div and rem
    truncate toward zero (`sdiv`/`srem`; `udiv`/`urem` for u32), min, max signed for i32 and unsigned for
    u32; and, or, xor on the bits; shl and shr by a count read unsigned, 0 from a count of 32 on (shr of an i32:
    arithmetic, its sign in every bit), as PTX clamps it. An element divided by zero is undefined on the GPU:
    here it is 0, with a warning naming the op (rows past a tensor's edge load as zeros, so a ragged tile divides
    by zero where nothing is stored)."""
    dtype = op.result.type.dtype
    a64, b64 = (np.asarray(x).astype(np.int64) for x in (a, b))
    if dtype == "u32":  # the same 32 bits, read unsigned
        a64, b64 = a64 % scalar.WORD, b64 % scalar.WORD
    if name in ("div", "rem"):
        zero = b64 == 0
        if np.any(zero):
            warnings.warn(f"{where(op)}'{op.name}' divides by zero: the GPU's result is undefined (0 here)",
                          IntegerDivisionWarning, stacklevel=2)
            b64 = np.where(zero, 1, b64)
        q = np.abs(a64) // np.abs(b64) * np.sign(a64) * np.sign(b64)  # toward zero
        q = np.where(zero, 0, q)
        exact = q if name == "div" else np.where(zero, 0, a64 - b64 * q)
    elif name in ("shl", "shr"):  # the count read unsigned; from 32 on: 0, or an i32's sign (PTX clamps it)
        n = np.minimum(b64 % scalar.WORD, SHIFT_BITS - 1)
        if name == "shr":
            exact = a64 >> n  # arithmetic for i32; a u32 was read unsigned above, so it shifts in zeros
            past_zero = dtype == "u32"
        else:
            exact = (a64 << n) % scalar.WORD  # the bits shifted past 32 are gone, not a wrap
            past_zero = True
        if past_zero:
            exact = np.where(b64 % scalar.WORD > SHIFT_BITS - 1, 0, exact)
        return np.asarray(exact % scalar.WORD).astype(np.uint32).astype(scalar_numpy(dtype))
    elif name in ("and", "or", "xor"):  # on the 32 bits, whatever they mean
        exact = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[name](a64 % scalar.WORD,
                                                                                           b64 % scalar.WORD)
        return np.asarray(exact).astype(np.uint32).astype(scalar_numpy(dtype))
    else:
        exact = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                 "max": np.maximum, "min": np.minimum}[name](a64, b64)
    lo, hi = scalar.INT_RANGES[dtype]
    if np.any((exact < lo) | (exact > hi)):
        warnings.warn(f"{where(op)}'{op.name}' on {dtype} passes 32 bits and wraps, as on the GPU "
                      "(integer tiles are 32 bits)", IntegerOverflowWarning, stacklevel=2)
    return np.asarray(exact % scalar.WORD).astype(np.uint32).astype(scalar_numpy(dtype))


def scalar_numpy(dtype: str) -> type:
    """The numpy type of an integer tile's elements."""
    return np.uint32 if dtype == "u32" else np.int32


_TILE_BINARY: dict[str, Callable[[object, object], object]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum, "rem": np.fmod,  # rem: integer tiles only (the verifier)
    # the bit operations: integer tiles only (the verifier), computed by _int_tile_binary
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "shl": np.left_shift, "shr": np.right_shift,
}
for _name, _fn in _TILE_BINARY.items():
    register_handler(f"tk.{_name}", _tile_binary(_name, _fn))


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.float32(1.0) / np.sqrt(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in f32: exp overflows to inf for x < -88, giving the exact limit 0."""
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x: np.ndarray) -> np.ndarray:
    """erf rounded to f32 (numpy has no erf: math.erf in f64, exact to f32 after rounding)."""
    return _erf64(x.astype(np.float64)).astype(np.float32)


_TILE_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": _rsqrt, "abs": np.abs, "neg": np.negative, "tanh": np.tanh, "sigmoid": _sigmoid,
    "erf": _erf,
}
for _name, _ufn in _TILE_UNARY.items():
    register_handler(f"tk.{_name}", lambda op, args, frame, _f=_ufn: _f(np.asarray(args[0], np.float32)))

def _cast(op: Operation, args: list, frame: Frame) -> np.ndarray:
    """Float to integer: toward zero, saturating at the integer's range, NaN giving 0 (PTX cvt.rzi.s32.f32 /
    .u32.f32, as torch's .to(torch.int32) on the GPU); integer to integer keeps the 32 bits; the rest
    (to a float: round to nearest even) round_to_type does."""
    src, dst = op.operands[0].type.dtype, op.result.type.dtype
    x = args[0]
    if dst not in scalar.INT_DTYPES:
        return x
    if src in scalar.INT_DTYPES:
        return np.asarray(x).astype(np.int64) % scalar.WORD
    lo, hi = scalar.INT_RANGES[dst]
    f = np.asarray(x, np.float64)
    return np.where(np.isnan(f), 0, np.trunc(np.clip(np.nan_to_num(f, nan=0.0), lo, hi))).astype(np.int64)


register_handler("tk.cast", _cast)
register_handler("tk.convert_layout", lambda op, args, frame: args[0])  # layouts do not change values
register_handler("tk.transpose", lambda op, args, frame: args[0].T.copy())


def _outer(op: Operation, args: list, frame: Frame) -> np.ndarray:
    """Row-wise (face-splitting) or column-wise outer product, each product exact in f32 and rounded
    once to the result's dtype by the frame (a product of two 16-bit floats fits f32's mantissa)."""
    a, b = (np.asarray(x, np.float32) for x in args)
    if str(op.attrs["axis"]) == "row":
        return (a[:, :, None] * b[:, None, :]).reshape(a.shape[0], -1)
    return (a[:, None, :] * b[None, :, :]).reshape(-1, a.shape[1])


register_handler("tk.outer", _outer)

_REDUCE = {"max": np.max, "min": np.min, "sum": np.sum,
           # the first largest (smallest) element's column; numpy, as torch, takes the first NaN where there is one
           "argmax": np.argmax, "argmin": np.argmin,
           # mean and the population variance in f64, rounded once to the result's dtype by the frame
           "mean": lambda a, axis: np.mean(np.asarray(a, np.float64), axis=axis),
           "var": lambda a, axis: np.var(np.asarray(a, np.float64), axis=axis)}


def _reduce(op: Operation, args: list, frame: Frame) -> np.ndarray:
    axis = 1 if str(op.attrs["axis"]) == "row" else 0  # row: one value per row
    return _REDUCE[str(op.attrs["kind"])](args[0], axis=axis)


register_handler("tk.reduce", _reduce)


def _mask_causal(op: Operation, args: list, frame: Frame) -> np.ndarray:
    t, row0, col0 = args
    rows, cols = t.shape
    masked = (col0 + np.arange(cols))[None, :] > (row0 + np.arange(rows))[:, None]
    return np.where(masked, np.float32(op.attrs["fill"]), t)


register_handler("tk.mask_causal", _mask_causal)


def _index(op: Operation, args: list, frame: Frame) -> np.ndarray:
    rows, cols = op.result.type.shape
    if str(op.attrs["axis"]) == "row":
        return np.broadcast_to(np.arange(rows, dtype=np.int32)[:, None], (rows, cols)).copy()
    return np.broadcast_to(np.arange(cols, dtype=np.int32)[None, :], (rows, cols)).copy()


def _tile_cmp(op: Operation, args: list, frame: Frame) -> np.ndarray:
    """Elementwise comparison, as IEEE 754, numpy and torch compare floats: a comparison with a NaN is
    false, except `ne`, which is true (LLVM fcmp une; the others ordered)."""
    a, b = _bcast(op, args[0], args[1])
    return np.asarray(scalar.COMPARE[str(op.attrs["pred"])](a, b), np.bool_)


register_handler("tk.index", _index)
register_handler("tk.select", lambda op, args, frame: np.where(args[0], args[1], args[2]))


def _for(op: Operation, args: list, frame: Frame) -> object:
    """The counted loop as the GPU runs it: `i = lo; while i < hi: ...; i += step` on an i32 counter. Where
    that counter would pass 2**31 - 1 (and wrap, so the GPU loop never ends), or the step is not positive
    with a body to run, the interpreter refuses to run it instead of hanging."""
    lo, hi, step, *carried = args
    if lo < hi and step <= 0:
        raise InterpError(f"{where(op)}the loop from {lo} to {hi} has step {step}: it would never end "
                          "(a step is positive)")
    if lo < hi and lo + (hi - 1 - lo) // step * step + step > scalar.I32_MAX:
        last = lo + (hi - 1 - lo) // step * step
        raise InterpError(f"{where(op)}the loop counter passes {scalar.I32_MAX} (from {lo} to {hi} step {step}: "
                          f"{last} + {step}): on the GPU the i32 counter wraps and the loop never ends")
    for i in range(lo, hi, step):
        carried = frame.run_block(op.body, [i, *carried])
    if len(op.results) == 1:
        return carried[0]
    return tuple(carried)


register_handler("scf.for", _for)

register_handler("arith.cmp", lambda op, args, frame: scalar.runtime_compare(
    str(op.attrs["pred"]), args[0], args[1], op.operands[0].type.dtype))
register_handler("tk.cmp", _tile_cmp)


def _if(op: Operation, args: list, frame: Frame) -> object:
    if args[0]:
        out = frame.run_block(op.regions[0].block, [])
    elif len(op.regions) > 1:
        out = frame.run_block(op.regions[1].block, [])
    else:
        out = []
    if len(op.results) == 1:
        return out[0]
    return tuple(out) if op.results else None


register_handler("scf.if", _if)
