"""fuse-row-stats: compute a row mean and a row variance of the same tile in one pass and one exchange.

Matches, in each block, a `tk.reduce {kind = mean, axis = row}` and a `tk.reduce {kind = var, axis =
row}` of the same operand, and marks both `stats = N` (N numbers the pairs of the kernel). The backend
(rules_registers._row_stats) then lowers the pair once, where the first of the two is: each thread's
mean and sum of squared deviations of its elements, merged over the lanes of a row by butterfly
shuffles (Chan et al.'s pairwise update, two values a step) and over the warps that split the row by
one round trip through shared memory (rules_memory.combine_row_stats), and both results read off the
same merge. Unfused, the mean is a row sum (its own shuffles and its own shared-memory round trip with
two barriers) and the variance a second such exchange.

Why: a row mean and a row variance of one tile are two exchanges (shuffle trees, and with the row
split over warps a shared-memory round trip with two barriers each); one Welford merge yields both.
Measured on the H200 (docs/experiments.md, "readonly-loads, the tuner's rounds, row_mean / row_var";
layernorm written with row_mean and row_var; speed = unfused ms / fused ms): 1.206 and 1.274 at
one row of 16384 a block (N = 4096, 65536), but 0.941 / 0.955 / 0.986 / 0.876 at the latency-bound
points (1 x 768, 128 x 768, 128 x 4096, 4096 x 768), where the fused butterfly's two shuffles and
merge arithmetic a step are longer than the sum's. It stays in the default pipeline for the long rows.
examples/layernorm.tk does not use row_mean / row_var at all: its mean's exchange followed by the
centred values' measured faster than either (the fused form at 0.863-0.996x its speed at these six
points; 0.854-1.039x at eleven configurations in call 3, faster only at 128 x 4096).

Ablation: leave the pass out of `--passes` (the two reductions are then lowered apart, still each
stable). FileCheck test: tests/filecheck/passes/fuse-row-stats.tk.
"""

from __future__ import annotations

from tkir.ir import Module, Operation
from tkir.ops import STATS_ATTR
from tkir.passmanager import Options, Pass


class FuseRowStats(Pass):
    name = "fuse-row-stats"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            group = 0
            for op in list(kernel.walk()):
                for region in op.regions:
                    group = _fuse_block(region.block.ops, group)


def _row(op: Operation, kind: str) -> bool:
    return op.name == "tk.reduce" and str(op.attrs.get("kind")) == kind and str(op.attrs.get("axis")) == "row" \
        and STATS_ATTR not in op.attrs


def _fuse_block(ops: list[Operation], group: int) -> int:
    """Pair each row var of the block with a row mean of the same operand; the next free group number."""
    for var in [o for o in ops if _row(o, "var")]:
        mean = next((o for o in ops if _row(o, "mean") and o.operands[0] is var.operands[0]), None)
        if mean is None:
            continue
        mean.attrs[STATS_ATTR] = var.attrs[STATS_ATTR] = group
        group += 1
    return group
