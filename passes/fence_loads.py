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
by hoist-loads) after the reduction's first shuffles, i.e. after X has arrived (the SASS of the row
kernels at those points). With the fence every LDG is issued before the first SHFL.

In the default pipeline as `fence-loads{opt_in=true}`: only kernels whose source asks
(`@fence_loads(1)`, the kernel attr `fence_loads_requested`) are rewritten, and (`latency`, on by default)
kernels that do not say, have no tk.mma, were compiled for a size bucket (the kernel attr `problem_sizes`) at
which their grid fits in one wave (analysis.latency_bound_rows) and row-reduce rows of at most NARROW_ROW
elements; and the row examples offer
`FENCE = [0, 1]` to `tkc tune` where the row is narrow (D <= 1024), which picks per shape. Named without
opt_in (`--passes=...,hoist-loads,fence-loads,...`) it rewrites every kernel it applies to.

Measured on the H200 (docs/experiments.md, "Row kernels: fencing loads per shape"): a first screen (5-15% at
the sweep's ten latency-bound row points) was the timing order (it always timed the unfenced kernel first; tkir.bench
now rotates the order); its A/B with each build timed in both positions gave 0.94-1.05x there and
0.975-0.984x on three large rmsnorm configurations, so the pass stayed out of the default pipeline.
The tuned kernel and the fenced one timed in one rotated run beside eager torch and torch.compile (40
reps) measured it faster at all six points with D = 768
(layernorm N = 1 / 128 / 4096: 3.94 -> 3.68, 4.38 -> 3.97, 7.18 -> 6.91 us; rmsnorm N = 1 / 128: 3.68 ->
3.46, 4.16 -> 3.74; softmax N = 1: 3.71 -> 3.52) and slower at both with D = 4096 (layernorm N = 1 / 128:
4.00 -> 4.16, 4.42 -> 4.48): a per-shape choice, hence a tune-space switch rather than a default.
"""

from __future__ import annotations

from tkir.ir import Block, Module, Operation
from tkir.passes.analysis import global_store, latency_bound_rows, register_load_from_global
from tkir.passmanager import Options, Pass, param
from tkir.types import TileType, VectorType, is_shared

FENCE = "tk.fence"
REDUCTION = "tk.reduce"
REQUEST_ATTR = "fence_loads_requested"  # frontend/annotations.py FENCE_LOADS_ATTR
# The widest row (elements) of a row-reduced tile the size-based decision fences: measured faster at D = 768 and
# slower at D = 4096 (the module docstring), so rows up to 1024
NARROW_ROW = 1024
# ops that may lie between the last load and the reduction: register computation only
_EFFECTS = ("tk.load", "tk.store", "tk.alloc", "tk.mma", FENCE)


class FenceLoads(Pass):
    name = "fence-loads"
    opt_in: bool = param(False, "rewrite only kernels whose source asks (@fence_loads(1)); false: every kernel "
                                "the pass applies to (the default pipeline runs fence-loads{opt_in=true})")

    latency: bool = param(True, "also, without a request, in a kernel without tk.mma compiled for a size bucket "
                                "whose grid fits in one wave and whose row-reduced tiles have rows of at most "
                                f"{NARROW_ROW} elements (false: only where asked)")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            decided = self.latency and REQUEST_ATTR not in kernel.attrs and _narrow_latency_bound(kernel)
            if self.opt_in and not (kernel.attrs.get(REQUEST_ATTR) or decided):
                continue
            for r in kernel.regions:
                _fence_block(r.block)


def _narrow_latency_bound(kernel: Operation) -> bool:
    """A kernel the size-based rule fences: latency-bound at its size bucket (analysis.latency_bound_rows), with
    every row-reduced register tile at most NARROW_ROW columns wide."""
    if latency_bound_rows(kernel) is None:
        return False
    widths = [op.operands[0].type.cols for op in kernel.walk() if op.name == REDUCTION
              and str(op.attrs.get("axis")) == "row" and isinstance(op.operands[0].type, TileType)]
    return bool(widths) and max(widths) <= NARROW_ROW


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
