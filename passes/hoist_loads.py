"""hoist-loads: issue a kernel's later global loads right after its first one, so that their memory
round trips overlap instead of following each other.

Matches, in each block of a kernel that asks for it (`@hoist_loads(1)` in the source, the kernel attr
`hoist_loads_requested`; `hoist-loads{all=true}` takes every kernel), the `tk.load`s from a global
tensor into registers (`rt`/`rv`) after the block's first such load. Each one whose operands are all
defined before that first load (kernel arguments, block ids, constants) moves, in program order, to
just after the first load (after the loads moved before it). Nothing moves past a `tk.store` to global
memory (a later load may read what it wrote), nor out of or into a loop or branch: only loads of the
same block before its first store (or its first loop or branch that stores) are candidates.

Why: the row kernels (layernorm, rmsnorm) load W (and Bias) after the row reductions, so that those
vectors are not live while X streams in (registers, at many rows per SM). At a few rows (N = 1 or 128)
the kernel is one memory latency after another: X, the reduction, then W and Bias from DRAM again.
Hoisted, W and Bias are read alongside X: one round trip. ptxas keeps the loads where they are put
only if a block-wide barrier follows them (a cross-warp reduction: infer-layouts' `split_idle_warps`
gives a one-row block that); behind shuffles alone it sinks them back below the reduction
(docs/experiments.md, "cp.async producer warps on the mma.sync path"). Off unless asked: at many rows the
hoisted loads cost registers and compete with X for bandwidth (layernorm at 4096 x 8192: 79% of copy
bandwidth without, 61% with; docs/experiments.md, "Row kernels: the sweep's misses diagnosed"), so the
examples offer `HOIST=[0, 1]` to `tkc tune`, which picks per shape.

**Decided from the problem size** (`latency`, on by default): a kernel that does not say (no `@hoist_loads`),
has no tk.mma and was compiled for a size bucket (tkir.compile(sizes=...), every call of a kernel with auto consts:
the kernel attr `problem_sizes`) at which its grid fits in one wave whatever the plan (at most NUM_SMS x 16 blocks:
analysis.latency_bound_rows) is hoisted: every block then starts at once, and the kernel is its chain of round
trips. Measured on an H100 (docs/experiments.md, "... row kernels with two consts").

Ablation: `hoist-loads` left out of `--passes`, `hoist-loads{latency=false}` (only where asked), or
`@hoist_loads(0)`.
"""

from __future__ import annotations

from tkir.ir import Block, Module, Operation
from tkir.passes.analysis import classify_copy, global_store, latency_bound_rows
from tkir.passmanager import Options, Pass, param

REQUEST_ATTR = "hoist_loads_requested"  # frontend/annotations.py HOIST_LOADS_ATTR
DONE_ATTR = "hoisted_loads"             # on the kernel: how many loads moved (visible in --emit tkir)


class HoistLoads(Pass):
    name = "hoist-loads"
    all: bool = param(False, "hoist in every kernel, not only those that ask (@hoist_loads(1))")
    latency: bool = param(True, "also, without a request, in a kernel without tk.mma compiled for a size bucket "
                                "whose grid fits in one wave (false: only where asked)")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            decided = self.latency and REQUEST_ATTR not in kernel.attrs and latency_bound_rows(kernel) is not None
            if not (self.all or kernel.attrs.get(REQUEST_ATTR) or decided):
                continue
            moved = sum(_hoist_block(r.block) for op in list(kernel.walk()) for r in op.regions)
            if moved:
                kernel.attrs[DONE_ATTR] = moved


def _global_load(op: Operation) -> bool:
    """A tk.load from a global tensor into registers."""
    c = classify_copy(op)
    return op.name == "tk.load" and c is not None and c[0] == "register"


def _hoist_block(blk: Block) -> int:
    """Move the block's later global register loads up behind its first; the count moved."""
    ops = list(blk.ops)
    first = next((i for i, op in enumerate(ops) if _global_load(op)), None)
    if first is None:
        return 0
    anchor = ops[first]
    defined_after = {id(v) for v in anchor.results}  # values defined at or after the first load so far
    moved = 0
    for op in ops[first + 1:]:
        if any(global_store(inner) for inner in op.walk()):  # a store here, or in a loop or branch here
            break
        if _global_load(op) and not any(id(v) in defined_after for v in op.operands):
            blk.remove(op)
            blk.insert_after(anchor, op)
            anchor = op
            moved += 1
            continue
        for inner in op.walk():
            defined_after.update(id(v) for v in inner.results)
    return moved
