"""The interpreter's meaning of the stream-K level's ops (tkir/ops_streamk.py).

A workspace is one zeroed array per run (every block of one `interpret` call sees it); the launch
count is 1. `tk.partial_add` of a partial nobody has written is an error, not a hang: the
interpreter runs a stream-K kernel's blocks last first (tkir/interp/run.py), so a tile's owner finds
the partials of the higher-numbered blocks it waits for.
"""

from __future__ import annotations

import numpy as np

from tkir.interp.frame import Frame, InterpError, register_handler, where
from tkir.ir import Operation


def _workspace(op: Operation, args: list, frame: Frame) -> np.ndarray:
    shared = frame.shared  # one per interpret() call: every block sees the same memory
    if id(op) not in shared:
        dims = [d if isinstance(d, int) else frame.num_sms for d in op.result.type.dims]
        dtype = np.float32 if op.result.type.dtype == "f32" else np.int32
        shared[id(op)] = np.zeros(dims, dtype)
    return shared[id(op)]


def _rows(args: list, acc: np.ndarray) -> int:
    """The tile rows a partial op covers: its optional `rows` operand, clamped to the tile."""
    return max(0, min(int(args[5]), acc.shape[0])) if len(args) > 5 else acc.shape[0]


def _partial_store(op: Operation, args: list, frame: Frame) -> None:
    part, flags, acc, slot, epoch = args[:5]
    acc = np.asarray(acc, np.float32)
    tile = np.full(acc.shape, np.nan, np.float32)  # rows past `rows` are not stored: never read back
    n = _rows(args, acc)
    tile[:n] = acc[:n]
    part[slot] = tile.ravel()
    flags[slot, :] = epoch


def _partial_add(op: Operation, args: list, frame: Frame) -> np.ndarray:
    part, flags, acc, slot, epoch = args[:5]
    if not (flags[slot] == epoch).all():
        raise InterpError(f"{where(op)}tk.partial_add: the partial tile of block {slot} has not "
                          f"been written (the kernel's blocks ran in the wrong order)")
    out = np.array(acc, np.float32)
    n = _rows(args, out)
    out[:n] += part[slot].reshape(out.shape)[:n]
    return out


register_handler("tk.workspace", _workspace)
register_handler("tk.launch_count", lambda op, args, frame: 1)
register_handler("tk.partial_store", _partial_store)
register_handler("tk.partial_add", _partial_add)
