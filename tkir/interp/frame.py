"""The interpreter's machinery: the handler table, one block's execution frame, rounding to IR dtypes.

A handler computes one op on numpy values (tkir/interp/ops.py for the core ops, tma.py,
pipeline.py, streamk.py for the later levels); `Frame.run_op` looks it up in
`HANDLERS`, runs it and rounds its result to the result's type, so handlers never round.
The package `tkir.interp` (which imports every handler module) is the entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tkir.diagnostics import TkirError
from tkir.ir import Block, Module, Operation, Value
from tkir.ops import OPS
from tkir.scalar import FP8_DTYPES, saturate_fp8
from tkir.target import NUM_SMS
from tkir.types import FLOAT_DTYPES, NUMPY_DTYPES, ScalarType, TileType, Type, VectorType, is_shared


class InterpError(TkirError, ValueError):
    """A kernel cannot run on the given arrays (binding, sizes) or holds an op with no meaning here."""


def where(op: Operation) -> str:
    """The op's location as a message prefix ("file:line:col: "), or nothing."""
    return f"{op.loc}: " if op.loc else ""


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
        # shared tiles whose memory a `tk.reuse` gave to another tile (id(value) -> the reuse): a later read
        # of one is an error, not a computation with the new tile's bytes (reuse-smem)
        self.reused: dict[int, str] = {}
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

    def _check_reused(self, op: Operation) -> None:
        for v in op.operands:
            at = self.reused.get(id(v))
            if at is not None:
                raise InterpError(f"{where(op)}'{op.name}' reads %{v.name} after its memory was given to "
                                  f"another tile ({at}): the tile's writes may have overwritten it")

    def run_op(self, op: Operation) -> None:
        fn = HANDLERS.get(op.name)
        if fn is None:
            raise InterpError(f"{where(op)}the interpreter has no meaning for op '{op.name}'")
        env = self.env
        if self.reused:
            self._check_reused(op)
        args = [env[v] for v in op.operands]
        try:
            out = fn(op, args, self)
        except InterpError:
            raise
        except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError) as e:
            raise InterpError(f"{where(op)}'{op.name}' failed: {e}") from e
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


# ---------------------------------------------------------------------------------------------
# Rounding to IR dtypes and fresh buffers.


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
    if dtype in FP8_DTYPES:  # satfinite, as PTX cvt.rn.satfinite (tkir/scalar.py)
        a = saturate_fp8(a, dtype)
    return a if dtype == "f32" else a.astype(NUMPY_DTYPES[dtype]).astype(np.float32)


def shape_of(t: TileType | VectorType) -> tuple[int, ...]:
    return t.shape if isinstance(t, TileType) else (t.n,)


def zeros(t: TileType | VectorType, poison: bool = False) -> np.ndarray:
    if t.dtype not in FLOAT_DTYPES:
        return np.zeros(shape_of(t), NUMPY_DTYPES[t.dtype])
    return np.full(shape_of(t), np.nan if poison else 0.0, np.float32)
