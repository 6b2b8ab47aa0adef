"""coarsen-rows: a row kernel that adds into global tensors runs a bounded grid, each block walking rows.

A kernel written plainly, one row (tile) a block, `grid(N)`, that sums over its rows into a global tensor
(`DW[0] += col_sum(dyf * xhat)`: `tk.store %DW, %v, %c0 {reduce = "add"}`) issues N global reduce-adds of
the whole vector (red.global.add per element): a LayerNorm backward at D = 4096 ran at 146 GB/s, 0.13x
torch, on an H100 (docs/experiments.md, "coarsen-rows"). The hand-written examples (layernorm_bwd.tk,
rmsnorm_bwd.tk) avoid it with a grid-stride loop and per-block partial sums; this pass makes that schedule
the compiler's decision. It rewrites

* the grid `[E]` into `["min(E, NUM_SMS * K)"]` blocks (NUM_SMS: the device's multiprocessor count, bound
  by the runtime, as in persistent's grids), K the blocks per SM (below);
* the body into a grid-stride loop `scf.for %row = block.x to E step grid.x`, in which `block.x` is the
  loop index (each iteration is what block %row did);
* each reduce-add store at block-independent indices into an add to a value the loop carries (same type
  and layout as the stored value, initialised to 0), stored with `reduce = "add"` once after the loop: G
  reduce-adds instead of E. Every other op (the row's own stores, DX) stays in the loop, per row; the
  scalar arithmetic that does not depend on the block (constants, sizes, the stores' indices) stays
  before it.

K, the parameter `coarsen-rows{blocks_per_sm=K}`: unset, the blocks per SM the backend asks ptxas to keep
resident (`.minnctapersm`, tkir.launch_bounds.streaming_blocks_per_sm) under the occupancy plan of the
rewritten kernel, so that the grid is one wave of resident blocks (more would run in a second wave, each
adding its partial sums once more; fewer would leave SM slots idle in a memory-bound kernel). This pass
writes FALLBACK_BLOCKS_PER_SM and the attr COARSEN_PENDING_ATTR (passes/analysis.py); plan-occupancy, which
makes that plan next, sets K from it and removes the attr (a pass does not import another: the plan is
plan-occupancy's). Without plan-occupancy in the pipeline, K stays FALLBACK_BLOCKS_PER_SM. `blocks_per_sm=0`
leaves every kernel as it is (the ablation switch, as `--passes` without the pass or `@passes(-coarsen-rows)`).

Where it runs: after infer-layouts (the accumulators take the stored values' layouts) and cluster-rows (a
clustered kernel is declined), right before plan-occupancy, so that the register plan counts the carried
accumulators (acc_regs) and the blocks per SM it chooses are those the grid is sized for.

Preconditions; a kernel with a reduce-add store that fails one is left unchanged with the attr
`coarsen_skipped` saying why (a kernel without any reduce-add store is not a candidate and gets nothing):
a 1-D grid; a register row kernel (no shared memory, tk.mma, pipeline, TMA, roles, workspace or cluster);
no read of the grid size (`grid.x` would change); `block.x` used only as the row index of loads and stores;
and at least one reduce-add store that can be carried: at the kernel's top level (not in a loop or branch),
of f32 (bf16/f16 sums carried in registers would round differently from the adds they replace), at indices
computed from constants and sizes only (not from the block index), into a tensor the kernel does not
otherwise read or write.
"""

from __future__ import annotations

from tkir.ir import Block, Module, Operation, Region, Value
from tkir.launch_bounds import MIN_BLOCKS_STREAMING
from tkir.passes.analysis import COARSEN_DONE_ATTR, COARSEN_PENDING_ATTR, coarsen_match, invariant_ops
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, ParamError, Pass, param
from tkir.types import I32

SKIPPED_ATTR = "coarsen_skipped"   # why a kernel with a reduce-add store was left unchanged
DONE_ATTR = COARSEN_DONE_ATTR      # what the rewrite chose: {blocks_per_sm = K, carried = n}
# K where the rewritten kernel's occupancy plan cannot be made: the resident blocks the backend asks ptxas
# for in a kernel without warp roles (tkir.launch_bounds.MIN_BLOCKS_STREAMING: one block's loads overlap
# another's math)
FALLBACK_BLOCKS_PER_SM = MIN_BLOCKS_STREAMING


class CoarsenRows(Pass):
    name = "coarsen-rows"
    blocks_per_sm: int | None = param(None, "K of the grid min(E, NUM_SMS * K); unset: the resident blocks per SM "
                                            "of the rewritten kernel's plan; 0: the pass does nothing (ablation)")

    def __post_init__(self) -> None:
        if self.blocks_per_sm is not None and self.blocks_per_sm < 0:
            raise ParamError("blocks_per_sm", f"coarsen-rows: blocks_per_sm={self.blocks_per_sm} must be >= 0")

    def run(self, module: Module, options: Options) -> None:
        if self.blocks_per_sm == 0:
            return
        for kernel in module.kernels():
            carried, reason = coarsen_match(kernel)
            if reason is not None:
                kernel.attrs[SKIPPED_ATTR] = reason
            elif carried:
                _coarsen(kernel, carried, self.blocks_per_sm)


def _coarsen(kernel: Operation, carried: list[Operation], blocks_per_sm: int | None) -> None:
    body = kernel.body
    grid = kernel.attrs["grid"][0]
    stay = invariant_ops(kernel)
    moved = [op for op in body.ops if op not in stay and op.name != "tk.block_id"]
    old_ids = [op for op in body.ops if op.name == "tk.block_id"]
    for op in list(body.ops):
        body.remove(op)
    for op in stay:
        body.append(op)
    b = OpBuilder(body)
    sizes = {op.attrs["name"]: op.result for op in stay if op.name == "tk.size"}
    extent = b.expr(grid, sizes)
    pid = b.op("tk.block_id", [], "bx", {"dim": 0})
    nprog = b.op("tk.grid_dim", [], "nblocks", {"dim": 0})
    inits = [b.op("tk.fill", [], f"{_stem(st)}_acc", {"value": 0.0}, st.operands[1].type) for st in carried]

    blk = Block()
    row = blk.add_arg(Value(I32, "row"))
    accs = [blk.add_arg(Value(st.operands[1].type, f"{_stem(st)}_acc")) for st in carried]
    mapping: dict[Value, Value] = {op.result: row for op in old_ids}
    slot = {id(st): i for i, st in enumerate(carried)}
    nexts: list[Value | None] = [None] * len(carried)
    for op in moved:
        for inner in op.walk():
            inner.operands = [mapping.get(v, v) for v in inner.operands]
        if id(op) in slot:
            i = slot[id(op)]
            add = Operation("tk.add", [accs[i], op.operands[1]], [accs[i].type], {}, result_names=[accs[i].name],
                            loc=op.loc)
            blk.append(add)
            accs[i] = add.result
            nexts[i] = add.result
        else:
            blk.append(op)
    blk.append(Operation("scf.yield", [v for v in nexts if v is not None]))
    loop = Operation("scf.for", [pid, extent, nprog, *inits], [v.type for v in inits], {},
                     regions=[Region(blk)], result_names=[f"{_stem(st)}_sum" for st in carried])
    body.append(loop)
    for st, total in zip(carried, loop.results, strict=True):
        st.operands = [st.operands[0], total, *st.operands[2:]]
        body.append(st)
    k = blocks_per_sm if blocks_per_sm is not None else FALLBACK_BLOCKS_PER_SM
    kernel.attrs["grid"] = [f"min({grid}, NUM_SMS * {k})"]
    kernel.attrs[DONE_ATTR] = {"blocks_per_sm": k, "carried": len(carried)}
    if blocks_per_sm is None:  # K from the plan: plan-occupancy (size_coarsened_grid)
        kernel.attrs[COARSEN_PENDING_ATTR] = grid


def _stem(st: Operation) -> str:
    return (st.operands[0].name or "sum").lower()

