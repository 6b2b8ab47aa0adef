"""The numpy reference interpreter: it defines what a tile-IR kernel means.

    interpret(module, A, B, C)                   # runs every block of the grid, writes C in place

The kernel's `gl` parameters are bound, in order, to numpy arrays; symbolic dims (`gl<bf16>[M, K]`)
take their sizes from the arrays' shapes. The body runs once per block of the `grid`, blocks in
row-major order. One table, `HANDLERS`, maps each op name to a small function that computes it on
whole tiles with numpy; later passes add their ops with `register_handler`.

How values are held:
* float tiles and vectors (register or shared) are float32 arrays whose values are representable in
  the IR dtype: every op computes in f32 and its result is rounded to its result type (bf16, f16,
  fp8 via ml_dtypes, round to nearest even) by `interpret` itself, so handlers never round;
* shared tiles (`st`/`sv`) are mutable buffers: `tk.alloc` makes one, `tk.load`/`tk.store` write
  into it; register values are never modified in place;
* scalars are Python ints (i32/u32: integer division floors) or floats.

Type attributes the passes add (swizzle, layout, stages, ...) do not change meaning and are ignored.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable, Sequence

import numpy as np

from tkir import symexpr
from tkir.diagnostics import TkirError
from tkir.ir import Block, Module, Operation, Value
from tkir.ops import OPS
from tkir.requires import module_requires, requirement_failure
from tkir.target import NUM_SMS
from tkir.types import FLOAT_DTYPES, NUMPY_DTYPES, GlobalType, ScalarType, TileType, Type, VectorType, is_shared


class InterpError(TkirError, ValueError):
    """A kernel cannot run on the given arrays (binding, sizes) or holds an op with no meaning here."""


# Grids may name the device's multiprocessor count (persistent kernels); the interpreter uses an
# H100/H200's (HOPPER.md §7.3).


class Frame:
    """The state of one block's execution: values by SSA value, sizes, the block index."""

    def __init__(self, module: Module, sizes: dict[str, int], block_id: tuple[int, int, int],
                 poison: bool, shared: dict | None = None, num_sms: int = NUM_SMS):
        self.module = module
        self.shared = {} if shared is None else shared  # state every block of one run sees (workspaces)
        self.num_sms = num_sms
        self.sizes = sizes
        self.block_id = block_id
        self.poison = poison
        self.env: dict[Value, object] = {}
        self.grid: tuple[int, ...] = (1, 1, 1)

    def run_block(self, block: Block, args: Sequence[object]) -> list[object]:
        """Bind the block's arguments, run its ops; return the operands of its terminator, if any."""
        env = self.env
        for a, v in zip(block.args, args, strict=True):
            env[a] = v
        for op in block.ops:
            d = OPS.get(op.name)
            if d is not None and d.terminator:
                return [env[v] for v in op.operands]
            self.run_op(op)
        return []

    def run_op(self, op: Operation) -> None:
        fn = HANDLERS.get(op.name)
        if fn is None:
            raise InterpError(f"{_where(op)}the interpreter has no meaning for op '{op.name}'")
        env = self.env
        args = [env[v] for v in op.operands]
        try:
            out = fn(op, args, self)
        except InterpError:
            raise
        except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError) as e:
            raise InterpError(f"{_where(op)}'{op.name}' failed: {e}") from e
        res = op.results
        if len(res) == 1:
            env[res[0]] = round_to_type(out, res[0].type)
        elif res:
            for r, v in zip(res, out, strict=True):
                env[r] = round_to_type(v, r.type)


# A handler computes one op: (op, operand values, frame) -> its result (one result), a tuple of
# results (several), or None (none). Results are rounded to their types by the caller.
Handler = Callable[[Operation, list, Frame], object]
HANDLERS: dict[str, Handler] = {}


def register_handler(name: str, fn: Handler) -> Handler:
    """Give the op `name` its meaning (passes that introduce ops register theirs)."""
    HANDLERS[name] = fn
    return fn


def interpret(module: Module, *arrays: np.ndarray, sizes: dict[str, int] | None = None,
              scalars: dict[str, float] | None = None, poison: bool = False, num_sms: int = NUM_SMS,
              check_requires: bool = True) -> None:
    """Run the module's kernel on `arrays` (one per `gl` parameter, in order), writing outputs in place.

    `sizes` names sizes the arrays do not determine (or cross-checks those they do); `scalars`
    binds scalar parameters by name. `poison` fills fresh shared buffers with NaN instead of zeros,
    so reading memory nobody wrote shows up in the outputs. `num_sms` is the NUM_SMS that persistent
    grids and workspaces see (small values exercise multi-tile and stream-K schedules on small inputs).
    Blocks run in row-major order, or last first for a stream-K kernel (tkir/ops_streamk.py).
    The kernel's `requires` (tkir.requires) are checked first, with the launch's message;
    `check_requires=False` runs anyway (tests of the out-of-bounds semantics themselves).
    """
    try:
        kernel = module.kernel
    except ValueError as e:
        raise InterpError(str(e)) from None
    params = kernel.body.args
    bound_sizes = _bind_sizes(kernel, arrays, dict(sizes or {}))
    values = _bind_params(params, arrays, scalars or {})
    env = {"NUM_SMS": num_sms, **_const_sizes(kernel), **bound_sizes}
    if check_requires:
        _check_requires(module, env)
    try:
        grid = [symexpr.evaluate(g, env) for g in kernel.attrs["grid"]]
    except symexpr.SymExprError as e:
        raise InterpError(f"grid of @{kernel.symbol}: {e}") from None
    grid += [1] * (3 - len(grid))
    with np.errstate(all="ignore"):  # exp2(-inf), log(0), inf - inf: IEEE results, as on the GPU
        blocks = list(itertools.product(*(range(n) for n in grid)))
        if kernel.attrs.get("stream_k"):
            blocks.reverse()  # a tile's owner waits for partials of higher-numbered blocks
        shared: dict = {}
        for block_id in blocks:
            frame = Frame(module, bound_sizes, block_id, poison, shared, num_sms)
            frame.grid = tuple(grid)
            frame.run_block(kernel.body, values)


def _check_requires(module: Module, sizes: dict[str, int]) -> None:
    """The kernel's run-time conditions (tkir.requires), checked as the launch checks them:
    a kernel the GPU would refuse is refused here, with the same message."""
    name = module.kernel.symbol or "kernel"
    for req in module_requires(module):
        try:
            failure = requirement_failure(name, req, sizes)
        except symexpr.SymExprError as e:
            raise InterpError(f"{name}: {e}") from None
        if failure:
            raise InterpError(failure)


# ---------------------------------------------------------------------------------------------
# Binding parameters and sizes.


def _where(op: Operation) -> str:
    return f"{op.loc}: " if op.loc else ""


def _const_sizes(kernel: Operation) -> dict[str, int]:
    consts = kernel.attrs.get("consts")
    if not isinstance(consts, dict):
        return {}
    return {k: v for k, v in consts.items() if isinstance(v, int)}


def _bind_sizes(kernel: Operation, arrays: Sequence[np.ndarray], sizes: dict[str, int]) -> dict[str, int]:
    gl_params = [a for a in kernel.body.args if isinstance(a.type, GlobalType)]
    if len(arrays) != len(gl_params):
        names = ", ".join(a.name or "?" for a in gl_params)
        raise InterpError(f"@{kernel.symbol} takes {len(gl_params)} arrays ({names}), got {len(arrays)}")
    origin = {k: "sizes=" for k in sizes}
    for p, arr in zip(gl_params, arrays, strict=True):
        t: GlobalType = p.type
        if not isinstance(arr, np.ndarray):
            raise InterpError(f"parameter {p.name}: expected a numpy array, got {type(arr).__name__}")
        want = NUMPY_DTYPES.get(t.dtype)
        if arr.dtype != want:
            raise InterpError(f"parameter {p.name}: {t} needs dtype {want}, got {arr.dtype}")
        if arr.ndim != t.rank:
            raise InterpError(f"parameter {p.name}: {t} has rank {t.rank}, array has shape {arr.shape}")
        for i, (dim, ext) in enumerate(zip(t.dims, arr.shape, strict=True)):
            if isinstance(dim, int):
                if dim != ext:
                    raise InterpError(f"parameter {p.name}: {t} dim {i} is {dim}, array has {ext}")
                continue
            if dim in sizes and sizes[dim] != ext:
                raise InterpError(f"size {dim}: parameter {p.name} ({t}) dim {i} is {ext}, "
                                  f"but {dim} = {sizes[dim]} from {origin[dim]}")
            sizes[dim] = int(ext)
            origin.setdefault(dim, f"parameter {p.name}")
    return sizes


def _bind_params(params: list[Value], arrays: Sequence[np.ndarray], scalars: dict[str, float]) -> list:
    it = iter(arrays)
    out: list[object] = []
    for p in params:
        if isinstance(p.type, GlobalType):
            out.append(next(it))
            continue
        if p.name not in scalars:
            raise InterpError(f"scalar parameter {p.name}: {p.type} needs a value in scalars=")
        out.append(round_to_type(scalars[p.name], p.type))
    return out


# ---------------------------------------------------------------------------------------------
# Rounding to IR dtypes.


def round_to_type(x: object, t: Type) -> object:
    """`x` as a value of type `t`: float arrays f32 holding `t.dtype`'s values, scalars int/float."""
    if isinstance(t, ScalarType):
        if t.dtype in FLOAT_DTYPES:
            return float(np.asarray(x, np.float32).astype(NUMPY_DTYPES[t.dtype]))
        return bool(x) if t.dtype == "i1" else int(x)
    if isinstance(t, (TileType, VectorType)) and not is_shared(t):
        return round_array(x, t.dtype)
    return x  # shared buffers (already hold their dtype's values), global arrays, pass-defined types


def round_array(x: object, dtype: str) -> np.ndarray:
    """`x` rounded to `dtype` (nearest even); float dtypes come back as float32 arrays."""
    if dtype not in FLOAT_DTYPES:
        return np.asarray(x).astype(NUMPY_DTYPES[dtype], copy=False)
    a = np.asarray(x, np.float32)
    return a if dtype == "f32" else a.astype(NUMPY_DTYPES[dtype]).astype(np.float32)


def _shape(t: TileType | VectorType) -> tuple[int, ...]:
    return t.shape if isinstance(t, TileType) else (t.n,)


def _zeros(t: TileType | VectorType, poison: bool = False) -> np.ndarray:
    if t.dtype not in FLOAT_DTYPES:
        return np.zeros(_shape(t), NUMPY_DTYPES[t.dtype])
    return np.full(_shape(t), np.nan if poison else 0.0, np.float32)


# ---------------------------------------------------------------------------------------------
# Global memory access: the last two coordinates (a tile) or the last one (a vector) count tiles;
# parts outside the tensor read as zero and are not written (TMA out-of-bounds fill).


def _window(t: Type, g: np.ndarray, coords: list[int]) -> tuple[tuple, tuple] | None:
    """(index into the global array, index into the tile) of the in-bounds part, or None if empty."""
    box = _shape(t)
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
    out = _zeros(t)
    if w is not None:
        out[w[1]] = g[w[0]]
    return out


def _write_global(g: np.ndarray, val: np.ndarray, t: Type, coords: list[int]) -> None:
    w = _window(t, g, coords)
    if w is not None:
        g[w[0]] = val[w[1]].astype(g.dtype)


# ---------------------------------------------------------------------------------------------
# Handlers.


def _arith_binary(fn: Callable[[object, object], object]) -> Handler:
    return lambda op, args, frame: fn(args[0], args[1])


def _int_or_float(int_fn: Callable, float_fn: Callable) -> Callable[[object, object], object]:
    return lambda a, b: int_fn(a, b) if isinstance(a, int) and isinstance(b, int) else float_fn(a, b)


_ARITH: dict[str, Callable[[object, object], object]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": _int_or_float(lambda a, b: a // b, lambda a, b: a / b),
    "rem": lambda a, b: a % b,
    "min": min,
    "max": max,
    "cdiv": _int_or_float(lambda a, b: -(-a // b), lambda a, b: float(np.ceil(a / b))),
}
for _name, _fn in _ARITH.items():
    register_handler(f"arith.{_name}", _arith_binary(_fn))

register_handler("arith.const", lambda op, args, frame: op.attrs["value"])
register_handler("arith.cast", lambda op, args, frame: args[0])  # round_to_type converts
register_handler("tk.block_id", lambda op, args, frame: frame.block_id[op.attrs["dim"]])
register_handler("tk.grid_dim", lambda op, args, frame: frame.grid[op.attrs["dim"]])


def _size(op: Operation, args: list, frame: Frame) -> int:
    name = op.attrs["name"]
    if name not in frame.sizes:
        raise InterpError(f"{_where(op)}size '{name}' is unknown: no parameter has it as a dim; "
                          f"pass sizes={{'{name}': ...}}")
    return frame.sizes[name]


register_handler("tk.size", _size)
def _alloc(op: Operation, args: list, frame: Frame) -> np.ndarray:
    t = op.result.type
    stages = t.get("stages") if isinstance(t, (TileType, VectorType)) else None
    if isinstance(stages, int):  # a ring buffer (pipeline pass): one tile per stage
        return np.stack([_zeros(t, frame.poison) for _ in range(stages)])
    return _zeros(t, frame.poison)


register_handler("tk.alloc", _alloc)
register_handler("tk.fill", lambda op, args, frame: np.full(_shape(op.result.type), op.attrs["value"],
                                                             np.float32))


def _load(op: Operation, args: list, frame: Frame) -> np.ndarray | None:
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


def _store(op: Operation, args: list, frame: Frame) -> None:
    dst, val, *coords = args
    if isinstance(op.operands[0].type, GlobalType):
        _write_global(dst, val, op.operands[1].type, coords)
    else:
        dst[...] = val


register_handler("tk.load", _load)
register_handler("tk.store", _store)


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


def _tile_binary(fn: Callable[[object, object], object]) -> Handler:
    def handler(op: Operation, args: list, frame: Frame) -> object:
        a, b = _bcast(op, args[0], args[1])
        return fn(a, b)

    return handler


_TILE_BINARY: dict[str, Callable[[object, object], object]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum,
}
for _name, _fn in _TILE_BINARY.items():
    register_handler(f"tk.{_name}", _tile_binary(_fn))


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

register_handler("tk.cast", lambda op, args, frame: args[0])  # round_to_type converts
register_handler("tk.convert_layout", lambda op, args, frame: args[0])  # layouts do not change values
register_handler("tk.transpose", lambda op, args, frame: args[0].T.copy())

_REDUCE = {"max": np.max, "min": np.min, "sum": np.sum}


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
    """Elementwise comparison; on floats every predicate is ordered (PTX setp: NaN gives false, ne too)."""
    a, b = _bcast(op, args[0], args[1])
    out = np.asarray(_CMP[str(op.attrs["pred"])](a, b), np.bool_)
    if str(op.attrs["pred"]) == "ne":  # numpy's != is true for NaN; the ordered ne is false
        out &= ~(np.isnan(np.asarray(a, np.float64)) | np.isnan(np.asarray(b, np.float64)))
    return out


register_handler("tk.index", _index)
register_handler("tk.select", lambda op, args, frame: np.where(args[0], args[1], args[2]))


def _for(op: Operation, args: list, frame: Frame) -> object:
    lo, hi, step, *carried = args
    for i in range(lo, hi, step):
        carried = frame.run_block(op.body, [i, *carried])
    if len(op.results) == 1:
        return carried[0]
    return tuple(carried)


register_handler("scf.for", _for)

_CMP: dict[str, Callable[[object, object], bool]] = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}
register_handler("arith.cmp", lambda op, args, frame: _CMP[str(op.attrs["pred"])](args[0], args[1]))
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


def _register_late_handlers() -> None:
    """Op modules imported while this one was loading (tkir.ops imports them) register their handlers now.

    Each defines `register_interp_handlers()`, which does nothing useful before `HANDLERS` exists.
    """
    for name in LATE_HANDLER_MODULES:
        hook = getattr(sys.modules.get(name), "register_interp_handlers", None)
        if hook is not None:
            hook()


LATE_HANDLER_MODULES = ("tkir.ops_tma", "tkir.ops_pipeline", "tkir.ops_streamk")
_register_late_handlers()
