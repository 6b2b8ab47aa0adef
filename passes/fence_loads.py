"""fence-loads: keep a kernel's first global register loads issued before its first reduction.

Matches, in the top-level block of each kernel, the first `tk.reduce` that global register loads
(`tk.load` from a `gl` into an `rt`/`rv`) precede, with only register computation between the last such
load and the reduction (no loop, branch, store, shared-memory access or other op with effects), and no
store to global memory anywhere before it. Inserts `tk.fence` right after that last load. The backend
writes `tk.fence` as `fence.acq_rel.cta`, which ptxas does not move loads across: every load before it
is issued before the reduction's shuffles. Loads inside loops, and kernels whose loads are all behind a
store, are left alone (a fence there would also wait for the stores: a round trip per iteration).

Why it was tried: at a few rows (N = 1 or 128, or D = 768 at N = 4096) a row kernel is a chain of memory
latencies, and ptxas issues loads the reduction does not need (layernorm's W and Bias, hoisted next to X
by hoist-loads) after the reduction's first shuffles, i.e. after X has arrived (the SASS of session 15).
With the fence every LDG is issued before the first SHFL.

A research pass, not in the default pipeline (add it after hoist-loads): measured on the H200 (session
16, docs/experiments.md), the 5-15% a first screen showed at issue 15's ten latency-bound row points was
the timing order (the screen always timed the unfenced kernel first; tkir.bench now rotates the order).
In an A/B with each build timed in both positions it was 0.94-1.05x there, and 0.975-0.984x on three
large rmsnorm configurations.
"""

from __future__ import annotations

from tkir.ir import Block, Module, Operation
from tkir.passes.cache_policy import register_load_from_global
from tkir.passes.hoist_loads import global_store
from tkir.passmanager import Options, Pass
from tkir.types import TileType, VectorType, is_shared

FENCE = "tk.fence"
REDUCTION = "tk.reduce"
# ops that may lie between the last load and the reduction: register computation only
_EFFECTS = ("tk.load", "tk.store", "tk.alloc", "tk.mma", FENCE)


class FenceLoads(Pass):
    name = "fence-loads"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            for r in kernel.regions:
                _fence_block(r.block)


def _register_compute(op: Operation) -> bool:
    """An op without effects on memory, control flow or other threads' data beyond its own results:
    scalar arithmetic and element-wise register tile/vector work."""
    if op.regions or op.name in _EFFECTS or op.name.startswith(("pipe.", "tma.", "scf.")):
        return False
    return all(not (isinstance(v.type, TileType | VectorType) and is_shared(v.type))
               for v in (*op.operands, *op.results))


def _fence_block(blk: Block) -> bool:
    """Insert the fence in `blk` (see the module docstring); whether one was inserted."""
    last_load: Operation | None = None
    for op in blk.ops:
        if any(global_store(inner) for inner in op.walk()):
            return False  # a store before the reduction: the fence would wait for it
        if register_load_from_global(op):
            last_load = op
            between_ok = True
            continue
        if op.name == REDUCTION:
            if last_load is None or not between_ok:
                return False
            blk.insert_after(last_load, Operation(FENCE, loc=last_load.loc))
            return True
        if last_load is not None and not _register_compute(op):
            between_ok = False
    return False
