"""Where each shared allocation of a kernel lives in the block's dynamic shared memory.

The backend lays the block's shared memory out with `plan_shared` (backend/context.py re-exports it);
passes that add an allocation after plan-occupancy (stage-epilogue) use the same function to know
exactly how many bytes the block grows by.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tkir.ir import Operation
from tkir.types import TileType, VectorType


@dataclass
class SharedPlan:
    offsets: dict[int, int] = field(default_factory=dict)  # id(Value) -> byte offset
    total: int = 0


def tile_stage_bytes(t: TileType | VectorType) -> int:
    """Bytes of one stage of a shared tile: padded rows (bank-conflicts' fix where no swizzle fits)
    take rows * (row bytes + pad), rounded up to the tile's alignment."""
    size = t.nbytes + (t.rows if isinstance(t, TileType) else 1) * int(t.get("pad") or 0)
    align = int(t.get("align") or 16)
    return -(-size // align) * align


def plan_shared(kernel: Operation) -> SharedPlan:
    """Byte offsets of every shared allocation and barrier array in the block's dynamic shared memory."""
    plan = SharedPlan()
    off = 0
    for op in kernel.walk():
        if op.name in ("tk.alloc", "pipe.barriers"):
            t = op.result.type
            align = int(t.get("align") or (8 if op.name == "pipe.barriers" else 16))
            off = -(-off // align) * align
            plan.offsets[id(op.result)] = off
            off += tile_stage_bytes(t) * int(t.get("stages") or 1) if op.name == "tk.alloc" else t.nbytes
    plan.total = off
    return plan
