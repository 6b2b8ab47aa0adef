"""longest-first: launch the blocks with the most work first (FlashAttention-3's causal tile order).

Matches a kernel whose loop trip counts grow with one block index: some `scf.for`'s upper bound is
non-decreasing in `tk.block_id {dim = d}` and depends on it (causal attention:
`kv_blocks = min(cdiv((block.x + 1) * BQ, BKV), cdiv(N, BKV))`, the number of key blocks up to the
diagonal). The GPU hands out blocks in linear order (x fastest, then y, then z), so with
`grid(cdiv(N, BQ), H, B)` every (head, batch) starts with its shortest query block and the last
wave is a mix of long and short blocks: SMs that drew short ones idle while the long ones finish.
Scheduling the longest jobs first (LPT) leaves only short ones for the end.

Rewrites every `tk.block_id {dim = d}` into `tk.grid_dim {dim = d} - 1 - tk.block_id {dim = d}`:
within each (head, batch) the longest block is handed out first, and the shortest ones come last,
where they fill the final wave's gaps. The grid keeps its order, so blocks of one head still run
side by side and share K and V in L2. `longest-first{move_last=true}` also moves dim d last (so it
varies slowest over the whole grid, the global LPT order): measured much slower on the H200 (causal
attention at (8, 16, 4096, 128) 491 vs 600 TFLOP/s, docs/experiments.md), because concurrent blocks
then belong to different heads and each reads its own K and V from HBM. Block ids are only renamed,
so every block still runs exactly once: the interpreter, which runs all blocks, gives the same
result. Not in the default pipeline: reversed in place it measured 0-8% slower on causal attention
(same call, separate processes: (8, 16, 4096, 128) 570 vs 623, head dim 64 329 vs 359; the other
rows within 1%), so the tail it shortens is not where the time goes. Left alone: persistent
kernels (one block per SM: no launch order to change), kernels whose loop bounds do not depend
monotonically on a block index (gemm), and, with move_last, kernels whose moved dim would exceed
the CUDA limit of the last axis (65,535 blocks, checked at launch). Ablation: leave `longest-first`
out of `--passes` (it is not in the default one).
"""

from __future__ import annotations

from tkir.ir import Module, Operation, Value, replace_all_uses
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, Pass, param

# Scalar ops through which "non-decreasing in the block index" is propagated (_monotone).
_SUMS = frozenset({"arith.add", "arith.min", "arith.max"})
_QUOTIENTS = frozenset({"arith.div", "arith.cdiv"})


class LongestFirst(Pass):
    name = "longest-first"
    move_last: bool = param(False, "also move the block dim last, so that it varies slowest over the whole grid "
                                   "(global longest-first; slower: blocks of one head no longer run together)")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            grid = kernel.attrs.get("grid")
            if not isinstance(grid, list) or "NUM_SMS" in " ".join(map(str, grid)):
                continue  # persistent grids: one block per SM, no launch order to change
            dims = {op.attrs["dim"] for op in kernel.walk() if op.name == "tk.block_id"}
            for d in sorted(dims):
                if d < len(grid) and _grows_with(kernel, d):
                    _reorder(kernel, d, len(grid) - 1 if self.move_last else d)
                    break


def _grows_with(kernel: Operation, d: int) -> bool:
    """Whether some loop's upper bound is non-decreasing in block_id{dim=d} and depends on it."""
    memo: dict[int, int | None] = {}
    return any(op.name == "scf.for" and _monotone(op.operands[1], d, memo) == 1 for op in kernel.walk())


def _monotone(v: Value, d: int, memo: dict[int, int | None]) -> int | None:
    """1: non-decreasing in block_id{dim=d} and dependent on it; 0: independent of it; None: unknown."""
    if id(v) in memo:
        return memo[id(v)]
    op = v.owner
    out: int | None = None
    if not isinstance(op, Operation):
        out = None  # a block argument (a loop's iteration variable): not a launch constant
    elif op.name == "tk.block_id":
        out = 1 if op.attrs.get("dim") == d else 0
    elif op.name in ("arith.const", "tk.size", "tk.grid_dim"):
        out = 0
    elif op.name in _SUMS:
        parts = [_monotone(x, d, memo) for x in op.operands]
        out = None if None in parts else max(parts)
    elif op.name == "arith.sub":
        a, b = (_monotone(x, d, memo) for x in op.operands)
        out = a if b == 0 else None
    elif op.name == "arith.mul":
        a, b = (_monotone(x, d, memo) for x in op.operands)
        if a is not None and b is not None:
            if a == b == 0:
                out = 0
            elif _non_negative(op.operands[1] if a == 1 else op.operands[0]) and 0 in (a, b):
                out = 1
    elif op.name in _QUOTIENTS:
        a, b = (_monotone(x, d, memo) for x in op.operands)
        if b == 0 and _positive_const(op.operands[1]):
            out = a
    memo[id(v)] = out
    return out


def _non_negative(v: Value) -> bool:
    op = v.owner
    return isinstance(op, Operation) and (op.name == "tk.size" or (op.name == "arith.const"
                                                                  and isinstance(op.attrs.get("value"), int)
                                                                  and op.attrs["value"] >= 0))


def _positive_const(v: Value) -> bool:
    op = v.owner
    return isinstance(op, Operation) and op.name == "arith.const" and isinstance(op.attrs.get("value"), int) \
        and op.attrs["value"] > 0


def _reorder(kernel: Operation, d: int, last: int) -> None:
    """Block dim d becomes dim `last` (d itself, or the grid's last dim), reversed."""
    grid = list(kernel.attrs["grid"])
    n = len(grid)
    order = [i for i in range(n) if i != d]
    order.insert(last, d)  # new dim k holds old dim order[k]
    new_of = {old: k for k, old in enumerate(order)}
    ids = [op for op in kernel.walk() if op.name == "tk.block_id"]
    for op in ids:
        old = op.attrs["dim"]
        if old != d:
            op.attrs["dim"] = new_of[old]
            continue
        # old block index d = grid_dim(last) - 1 - block_id(last), built right after the op
        blk = op.parent
        nxt = blk.ops[blk.ops.index(op) + 1] if blk.ops.index(op) + 1 < len(blk.ops) else None
        b = OpBuilder(blk, nxt)
        rev = Operation("tk.block_id", [], [op.result.type], {"dim": last}, result_names=["slow"])
        b.add(rev)
        count = b.op("tk.grid_dim", [], "nslow", {"dim": last})
        one = b.const(1, "one")
        top = b.op("arith.sub", [count, one], "top")
        longest = b.op("arith.sub", [top, rev.result], op.result.name or "bx")
        replace_all_uses(kernel, op.result, longest)
        blk.remove(op)
    kernel.attrs["grid"] = [grid[i] for i in order]
