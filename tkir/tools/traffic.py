"""The DRAM bytes one launch of a kernel should move, predicted from its IR (`tkc report --measure`).

    pred = predict_dram(module, {"N": 4096})
    pred.read_bytes, pred.write_bytes, pred.tensors[0].name

Each global tensor (`gl` kernel parameter) the kernel reads counts its whole extent once, each one it
writes once more, a reducing store (`{reduce = "add"}`: read, add, write back) both: every element
crosses the DRAM bus once per direction. That is the traffic of a memory-bound row kernel (each row
read and written by one block) and the floor of any kernel: blocks that re-read a tile (a GEMM's A and
B panels, attention's K and V) read it from the L2 when the L2 holds the working set, so for them the
prediction is a lower bound, and `memory_bound` (no tk.mma in the kernel) says when it is meant to be
met. Whether a tensor is read or written comes from the ops that touch it: loads and copies into shared
memory or registers (tk.load, tma.load, pipe.copy, pipe.async_copy) read, the stores (tk.store,
tma.store, the staged epilogue's tk.store_staged and tk.store_warp_staged) write. The runtime's
workspaces (stream-K partials) are not parameters and are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tkir import symexpr
from tkir.ir import Module
from tkir.opdef import REDUCE_ATTR
from tkir.types import DTYPE_BYTES, GlobalType

READ_OPS = frozenset({"tk.load", "tma.load", "pipe.copy", "pipe.async_copy"})
WRITE_OPS = frozenset({"tk.store", "tma.store", "tk.store_staged", "tk.store_warp_staged"})


@dataclass(frozen=True)
class TensorTraffic:
    name: str
    dtype: str
    bytes: int        # the tensor's extent at the given sizes
    read: bool
    written: bool
    reduced: bool = False  # a reducing store: read and written back


@dataclass
class DramPrediction:
    tensors: list[TensorTraffic] = field(default_factory=list)
    memory_bound: bool = True  # no tk.mma: the prediction is the kernel's traffic, not only its floor

    @property
    def read_bytes(self) -> int:
        return sum(t.bytes for t in self.tensors if t.read or t.reduced)

    @property
    def write_bytes(self) -> int:
        return sum(t.bytes for t in self.tensors if t.written)

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.write_bytes

    def as_dict(self) -> dict:
        return {"read_bytes": self.read_bytes, "write_bytes": self.write_bytes, "memory_bound": self.memory_bound,
                "tensors": [{"name": t.name, "dtype": t.dtype, "bytes": t.bytes, "read": t.read or t.reduced,
                             "written": t.written} for t in self.tensors]}


def predict_dram(module: Module, sizes: dict[str, int]) -> DramPrediction:
    """Each global tensor's bytes read and written by one launch at `sizes` (the module docstring)."""
    kernel = module.kernel
    params = [a for a in kernel.body.args if isinstance(a.type, GlobalType)]
    read: set[int] = set()
    written: set[int] = set()
    reduced: set[int] = set()
    mma = False
    for op in kernel.walk():
        mma |= op.name == "tk.mma"
        touched = {id(v) for v in op.operands if isinstance(v.type, GlobalType)}
        if not touched:
            continue
        if op.name in READ_OPS:
            read |= touched
        elif op.name in WRITE_OPS:
            written |= touched
            if op.attrs.get(REDUCE_ATTR) is not None:
                reduced |= touched
    out = DramPrediction(memory_bound=not mma)
    for p in params:
        if id(p) not in read | written:
            continue
        t: GlobalType = p.type  # type: ignore[assignment]
        extent = math.prod(symexpr.evaluate(d, sizes) for d in t.dims)
        out.tensors.append(TensorTraffic(p.name or "?", t.dtype, extent * DTYPE_BYTES[t.dtype], id(p) in read,
                                         id(p) in written, id(p) in reduced))
    return out
