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
from tkir.passes.analysis import COARSEN_DONE_ATTR, COARSEN_PENDING_ATTR
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, ParamError, Pass, param
from tkir.types import I32, TileType, VectorType, is_shared

SKIPPED_ATTR = "coarsen_skipped"   # why a kernel with a reduce-add store was left unchanged
DONE_ATTR = COARSEN_DONE_ATTR      # what the rewrite chose: {blocks_per_sm = K, carried = n}
# K where the rewritten kernel's occupancy plan cannot be made: the resident blocks the backend asks ptxas
# for in a kernel without warp roles (tkir.launch_bounds.MIN_BLOCKS_STREAMING: one block's loads overlap
# another's math)
FALLBACK_BLOCKS_PER_SM = MIN_BLOCKS_STREAMING
# Ops of kernels that are not register row kernels: shared memory, tensor cores, the pipeline's and TMA's
# ops, warp roles, workspaces and stream-K's partial tiles.
FOREIGN_OPS = frozenset({"tk.mma", "tk.mma_wait", "tk.role", "tk.alloc", "tk.workspace", "tk.partial_add",
                         "tk.partial_store", "tk.store_staged", "tk.store_warp_staged", "tk.launch_count"})
FOREIGN_PREFIXES = ("pipe.", "tma.")
# Kernel attrs of schedules another pass already chose (cluster-rows, persistent, stream-k).
FOREIGN_ATTRS = ("cluster", "tile_order", "stream_k")
# Ops that may stay before the loop when they do not depend on the block: scalar arithmetic and sizes.
INVARIANT_PREFIX = "arith."
INVARIANT_OPS = frozenset({"tk.size"})
ACCESS_OPS = frozenset({"tk.load", "tk.store", "tk.gather"})
CARRIED_DTYPE = "f32"


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
            stores = [op for op in kernel.walk() if op.name == "tk.store" and op.attrs.get("reduce") == "add"]
            if not stores:
                continue
            reason = _kernel_reason(kernel)
            carried: list[Operation] = []
            if reason is None:
                carried, reason = _carried_stores(kernel, stores)
            if reason is not None:
                kernel.attrs[SKIPPED_ATTR] = reason
                continue
            _coarsen(kernel, carried, self.blocks_per_sm)


def _line(op: Operation) -> str:
    return f" at line {op.loc.line}" if op.loc is not None and op.loc.line else ""


def _kernel_reason(kernel: Operation) -> str | None:
    """Why the kernel as a whole cannot be coarsened, or None."""
    grid = kernel.attrs.get("grid")
    if not isinstance(grid, list) or len(grid) != 1:
        return f"a {len(grid) if isinstance(grid, list) else '?'}-D grid (coarsen-rows walks a 1-D grid of rows)"
    for attr in FOREIGN_ATTRS:
        if attr in kernel.attrs:
            return f"the kernel's schedule is set already ({attr})"
    for op in kernel.walk():
        if op.name in FOREIGN_OPS or op.name.startswith(FOREIGN_PREFIXES) or any(is_shared(r.type) for r in op.results):
            return (f"'{op.name}'{_line(op)}: not a register row kernel (shared memory, mma, pipeline or TMA); "
                    "coarsen-rows rewrites register row kernels only")
        if op.name == "tk.grid_dim":
            return f"the kernel reads the grid size{_line(op)}, which the rewrite changes"
    ids = {op.result for op in kernel.walk() if op.name == "tk.block_id"}
    for op in kernel.walk():
        if op.name == "tk.block_id" and op.attrs.get("dim") != 0:
            return f"block index dim {op.attrs.get('dim')} read{_line(op)} (coarsen-rows walks block.x only)"
        for i, v in enumerate(op.operands):
            if v in ids and not _row_index(op, i):
                return (f"block.x used other than as a row index by '{op.name}'{_line(op)} "
                        "(coarsen-rows walks rows: block.x must be the first index of loads and stores)")
    return None


def _row_index(op: Operation, i: int) -> bool:
    """Operand i of `op` is the first (row) index of a global access: tk.load X, r, ...; tk.store X, v, r, ..."""
    return (op.name in ("tk.load", "tk.gather") and i == 1) or (op.name == "tk.store" and i == 2)


def _invariant_ops(kernel: Operation) -> list[Operation]:
    """The top-level ops that stay before the loop: scalar arithmetic and sizes that depend on neither the
    block index nor anything the loop computes (constants, `tk.size`, the reduce-add stores' indices)."""
    out: list[Operation] = []
    inside: set[Value] = set()
    for op in kernel.body.ops:
        if (not op.regions and (op.name.startswith(INVARIANT_PREFIX) or op.name in INVARIANT_OPS)
                and not any(v in inside for v in op.operands)):
            out.append(op)
        else:
            inside.update(op.results)
    return out


def _carried_stores(kernel: Operation, stores: list[Operation]) -> tuple[list[Operation], str | None]:
    """The reduce-add stores whose values the loop can carry, or none and why not (the first store's reason)."""
    params = set(kernel.body.args)
    outside = {v for op in _invariant_ops(kernel) for v in op.results} | params
    carried: list[Operation] = []
    reasons: list[str] = []
    for st in stores:
        dest, value, idx = st.operands[0], st.operands[1], st.operands[2:]
        name = dest.name or "?"
        what = f"the reduce-add into {name}{_line(st)}"
        accesses = [op for op in kernel.walk() if op.name in ACCESS_OPS and op.operands and op.operands[0] is dest
                    and not (op.name == "tk.store" and op.attrs.get("reduce") == "add")]
        if st.parent is not kernel.body:
            reasons.append(f"{what} is inside a loop or branch")
        elif not isinstance(value.type, (TileType, VectorType)) or value.type.dtype != CARRIED_DTYPE:
            dtype = getattr(value.type, "dtype", value.type)
            reasons.append(f"{what} adds {dtype} (only {CARRIED_DTYPE} sums are carried: registers would round "
                           "others differently)")
        elif not all(v in outside for v in idx):
            reasons.append(f"{what}: its indices depend on the block index (or on what a block computes)")
        elif accesses:
            reasons.append(f"{what}: the kernel also accesses {name} ('{accesses[0].name}'{_line(accesses[0])})")
        else:
            carried.append(st)
    if carried:
        return carried, None
    return [], reasons[0] + "; nothing to gain"


def _coarsen(kernel: Operation, carried: list[Operation], blocks_per_sm: int | None) -> None:
    body = kernel.body
    grid = kernel.attrs["grid"][0]
    stay = _invariant_ops(kernel)
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

