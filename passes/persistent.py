"""persistent: one block per SM loops over output tiles in a grouped (L2-friendly) order.

Rewrites a pipelined kernel (after `pipeline`) whose grid is 2-D, `grid = [TM, TN]` (tiles along the
rows and columns of the output):

* the grid becomes the fewest blocks that take as many rounds as one block per SM would,
  `["cdiv(T, cdiv(T, NUM_SMS))"]` with T = TM * TN (NUM_SMS: the device's multiprocessor count,
  bound by the runtime; 132 on an H200): 512 tiles run on 128 blocks doing 4 tiles each instead of
  132 blocks of which 16 do 3. Same makespan in tiles, 4 SMs idle: measured 0.7-1.0% faster on the
  H200 at 4096^3, 6144^3, 8192^3 and 8192x8192x1024 (less power and L2 traffic for the same
  rounds; docs/experiments.md). `persistent{balanced_grid=0}` gives `["min(T, NUM_SMS)"]`, one block
  per SM (stream-k starts from that grid and then builds its own: passes/stream_k.py);
* each role's body is wrapped in `scf.for %t = block.x to TM*TN step grid.x`, carrying the pipeline's
  iteration count across tiles so that ring-buffer stages and barrier phases continue (each role
  recomputes the same sequence, so producer and consumers stay in step);
* `tk.block_id` dims 0 and 1 are replaced by the tile's coordinates in grouped order (Triton's
  `GROUP_M` swizzle): tiles are visited in groups of `group` tile-rows, column by column within a
  group, so that consecutive blocks share A rows and B columns in L2. `group = 1` is row-major order
  (the ablation baseline). The group size is the parameter `persistent{group_m=G}`, else the
  kernel attr `tile_order = {group = G}` (hand-written IR), else 8.

* one-shot loads before the K loop (pipeline's `once` barrier: attention's Q tile) are refilled per
  tile: the consumers wait for the n-th fill at parity n mod 2 and release the buffer on a new
  `once_empty` barrier after their last read of it (the K loop, or an epilogue op after it that reads
  the buffer); the producer waits for that release before the next fill,
  so the next tile's loads run under this tile's epilogue (before, the producer refilled the buffer
  without waiting and the consumers waited on an already completed phase: a race);
* a tile reuse-smem placed in a one-shot tile's memory (`tk.reuse`) gets its own memory back (a `tk.alloc`; the
  plan's shared memory grows by it), since the next tile's fill of the donor would run under this tile's epilogue;
  where that would not fit, the kernel is left alone with `persistent_skipped`;
* `persistent{linear_grids=true}`, or the kernel attr `persistent_requested` (the source's
  `@persistent(1)`, usually `@persistent(P)` with `P` in the kernel's `@tune` space, so that `tkc tune`
  chooses it per shape), also rewrites 1-D and 3-D grids, tiles in launch order (x fastest).
  Off by default: on the H200 (docs/experiments.md, "Persistent attention") attention at B = H = 16,
  D = 128 gained 10% at N = 768 (fewer prologue/epilogue stalls) but lost 3-6% at N >= 3072, because
  ptxas keeps the wgmma descriptors of a loop nested in the tile loop in per-thread registers (one R2UR
  per wgmma, +5% instructions in the main loop).

* a 3-D grid whose tiles differ in work (scalar arithmetic outside the roles reads block indices:
  causal attention's key-block count, `min(cdiv((block.x + 1) * BQ, BKV), ...)`), when asked for
  (`@persistent(1)` or `linear_grids`): each role recomputes that arithmetic from its tile's
  coordinates, and the tiles go in the *rotated* order (`tile_order = {rotated = 1}`): the grid is
  whole x-rows, `min(T, max(NUM_SMS / X, 1) * X)` blocks, and round r (the next G tiles, head-major)
  hands block pid its tile (pid + r) mod (the round's tiles), so a block's x goes up by one a round and
  the blocks end up with about the same work (launch order would give a block the same x every round),
  while one round's (y, z) pairs are read side by side (their K and V from L2).

* a kernel `multicast` made clusters of 2 CTAs (`tma_multicast`) keeps each cluster's tiles in one tile column:
  the group is rounded up to even, the grid counts whole clusters, `2 * cdiv(P, cdiv(P, floor(NUM_SMS / 2)))`
  over the P = T / 2 tile pairs, and block 2i + r takes tiles 2j + r; multicast's producer drain loop stays after
  the tile loop, from its final iteration count.

sm_80 kernels with roles (the cp.async producer warps) are left as they are unless asked for
(`@persistent(1)`), with `persistent_skipped`: without setmaxnreg the tile loop's state spills.

Kernels without `tk.role`s (not pipelined), with 1-D/3-D grids (unless asked for), or that read block
indices outside their roles in any other way (a 1-D or 2-D grid, or an op that is not scalar arithmetic)
are left unchanged; the last get the attr `persistent_skipped` with the reason.
"""

from __future__ import annotations

from tkir.diagnostics import CompileError
from tkir.facts import MULTICAST_ATTR, OccupancyPlan
from tkir.ir import Block, Module, Operation, Region, Value, clone_op, uses_of
from tkir.passes.analysis import (
    MULTICAST_DRAIN_ATTR,
    grow_plan_smem,
    loop_trip_count,
    persistent_grid,
    smem_growth_problem,
)
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, ParamError, Pass, param
from tkir.scalar import I32_MAX
from tkir.shared_plan import plan_shared
from tkir.target import WARPS_PER_WARPGROUP
from tkir.types import I32, VectorType

REQUEST_ATTR = "persistent_requested"  # the kernel attr `@persistent(1)` sets (frontend/annotations.py PERSISTENT_ATTR)
# Triton's matmul tutorial and CUTLASS's raster swizzle use 8. Up to 8 the group is used as it is: its
# tiles, 8 * TN, fit i32 (TN = N / BN < 2**27 with N < 2**31 and BN >= 16); a larger one is min(G, TM) at
# run time, whose tiles are at most the grid's TM * TN
DEFAULT_GROUP = 8
BALANCED_GRID = 1  # the fewest blocks that give the same number of rounds (balanced_grid=0: min(T, NUM_SMS))


class Persistent(Pass):
    name = "persistent"
    group_m: int | None = param(None, "tile-rows per group of the tile order (1 = row-major); "
                                      f"unset: the kernel attr tile_order = {{group = G}}, else {DEFAULT_GROUP}")
    balanced_grid: bool = param(bool(BALANCED_GRID), "the fewest blocks for the rounds (false: min(T, NUM_SMS))")
    linear_grids: bool = param(False, "also 1-D and 3-D grids, tiles in launch order (attention: +10% at N = 768, "
                                      "-3% at N = 3072 on the H200; off by default)")

    def __post_init__(self) -> None:
        if self.group_m is not None and self.group_m < 1:
            raise ParamError("group_m", f"persistent: group_m={self.group_m}: the group must be at least one tile-row")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            roles = [op for op in kernel.body.ops if op.name == "tk.role"]
            grid = kernel.attrs.get("grid")
            if not roles or not isinstance(grid, list) or not 1 <= len(grid) <= 3:
                continue
            if len(grid) != 2 and not (self.linear_grids or kernel.attrs.get(REQUEST_ATTR)):
                continue
            if any(isinstance(r.attrs.get("warps"), int) for r in roles) and not kernel.attrs.get(REQUEST_ATTR):
                kernel.attrs["persistent_skipped"] = SM80_ROLES_REASON
                continue
            chain = _outside_chain(kernel, roles)
            if chain is None or (chain and len(grid) != 3):
                kernel.attrs["persistent_skipped"] = UNEQUAL_REASON
                continue
            problem = _own_memory_back(kernel)
            if problem is not None:
                kernel.attrs["persistent_skipped"] = problem
                continue
            if len(grid) == 2:
                _make_persistent(kernel, roles, grid, self.group_m, self.balanced_grid)
            elif chain:
                _make_persistent_rotated(kernel, roles, grid, chain)
            else:
                _make_persistent_linear(kernel, roles, grid, self.balanced_grid)


def _own_memory_back(kernel: Operation) -> str | None:
    """A tile reuse-smem placed in a one-shot tile's memory (`tk.reuse`) gets memory of its own again: the next
    output tile's fill of the donor would overwrite it under this tile's epilogue. The block's shared memory and
    the plan grow by it; where that no longer fits, the reuses stay and the reason is returned (persistent then
    leaves the kernel alone)."""
    reuses = [op for op in kernel.walk() if op.name == "tk.reuse"]
    if not reuses:
        return None
    body = kernel.body
    before = plan_shared(kernel).total
    at = max((i for i, o in enumerate(body.ops) if o.name in ("tk.alloc", "pipe.barriers")), default=-1) + 1
    allocs = []
    for r in reuses:
        a = Operation("tk.alloc", [], [], loc=r.loc)
        a.results = [r.result]
        allocs.append(a)
    for a in reversed(allocs):
        body.insert(at, a)
    grow = plan_shared(kernel).total - before
    plan = OccupancyPlan.of(kernel)
    problem = smem_growth_problem(plan, grow, "giving the tiles reuse-smem placed in one-shot tiles their own memory")
    if problem is not None:
        for a in allocs:
            body.remove(a)
        return problem
    for r, a in zip(reuses, allocs, strict=True):
        r.parent.remove(r)
        r.result.owner = a
    grow_plan_smem(kernel, plan, grow)
    return None


def _make_persistent(kernel: Operation, roles: list[Operation], grid: list[str], group_m: int | None,
                     balanced: bool = False) -> None:
    body = kernel.body
    tile_order = kernel.attrs.get("tile_order")
    group = group_m or (tile_order.get("group", DEFAULT_GROUP) if isinstance(tile_order, dict) else DEFAULT_GROUP)
    if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group <= I32_MAX:
        raise CompileError(kernel.loc, f"persistent: the kernel's tile_order group = {group!r}: must be an integer "
                                       f"1..{I32_MAX} (tile-rows per group)")
    first_role = roles[0]
    b = OpBuilder(body, first_role)
    sizes = {op.attrs["name"]: op.result for op in body.ops if op.name == "tk.size"}
    tiles_m = b.expr(grid[0], sizes)
    tiles_n = b.expr(grid[1], sizes)
    ntiles = b.op("arith.mul", [tiles_m, tiles_n], rname="ntiles")
    pid = b.op("tk.block_id", [], "pid", {"dim": 0})
    nprog = b.op("tk.grid_dim", [], "nprog", {"dim": 0})
    c0 = b.const(0, "zero")
    c_group = b.const(group, "group_m")
    pairs = _multicast_ctas(kernel)
    if pairs > 1 and group % pairs:  # a cluster's tiles (2i, 2i + 1) must share their tile column
        group += pairs - group % pairs
        c_group = b.const(group, "group_m")
    if group > DEFAULT_GROUP:  # min(G, TM): a group of all the tile-rows, so G * TN cannot pass 2**31 - 1
        c_group = b.op("arith.min", [c_group, tiles_m], rname="group_m")

    def decode(bb: OpBuilder, t: Value) -> dict[int, Value]:
        """Grouped order (Triton's GROUP_M swizzle)."""
        in_group = bb.op("arith.mul", [c_group, tiles_n], rname="tiles_per_group")
        gid = bb.op("arith.div", [t, in_group], rname="group_id")
        first_m = bb.op("arith.mul", [gid, c_group], rname="first_m")
        left = bb.op("arith.sub", [tiles_m, first_m], rname="rows_left")
        gsize = bb.op("arith.min", [left, c_group], rname="group_rows")
        pos = bb.op("arith.rem", [t, in_group], rname="in_group")
        off_m = bb.op("arith.rem", [pos, gsize], rname="off_m")
        tile_m = bb.op("arith.add", [first_m, off_m], rname="tile_m")
        tile_n = bb.op("arith.div", [pos, gsize], rname="tile_n")
        return {0: tile_m, 1: tile_n}

    _wrap_roles(kernel, roles, decode, ntiles, pid, nprog, c0)
    if pairs > 1:  # whole clusters: an even grid over the clusters' tile pairs (multicast makes TM even)
        # cdiv rather than `/`: a division in a grid is a launch requirement (exact), and NUM_SMS is no size
        per = f"cdiv(({grid[0]}) * ({grid[1]}), {pairs})"
        clusters = f"cdiv(NUM_SMS - {pairs - 1}, {pairs})"  # floor(NUM_SMS / pairs)
        over = f"cdiv({per}, cdiv({per}, {clusters}))" if balanced else f"min({per}, {clusters})"
        kernel.attrs["grid"] = [f"{pairs} * {over}"]
    else:
        kernel.attrs["grid"] = [persistent_grid(f"({grid[0]}) * ({grid[1]})", balanced)]
    kernel.attrs["tile_order"] = {"group": group}


def _multicast_ctas(kernel: Operation) -> int:
    """The CTAs of a cluster sharing tiles (passes/multicast.py's kernel attr), 1 without."""
    mc = kernel.attrs.get(MULTICAST_ATTR)
    return int(mc.get("ctas", 1)) if isinstance(mc, dict) else 1


def _make_persistent_linear(kernel: Operation, roles: list[Operation], grid: list[str], balanced: bool) -> None:
    """A 1-D or 3-D grid: tiles in the hardware's launch order, x fastest (attention: the query tiles of
    one (batch, head) run side by side and share its K and V in L2)."""
    body = kernel.body
    b = OpBuilder(body, roles[0])
    sizes = {op.attrs["name"]: op.result for op in body.ops if op.name == "tk.size"}
    extents = [b.expr(g, sizes) for g in grid]
    ntiles = extents[0]
    for e in extents[1:]:
        ntiles = b.op("arith.mul", [ntiles, e], rname="ntiles")
    pid = b.op("tk.block_id", [], "pid", {"dim": 0})
    nprog = b.op("tk.grid_dim", [], "nprog", {"dim": 0})
    c0 = b.const(0, "zero")

    def decode(bb: OpBuilder, t: Value) -> dict[int, Value]:
        ids: dict[int, Value] = {}
        rest = t
        for d, e in enumerate(extents):
            if d == len(extents) - 1:
                ids[d] = rest
            else:
                ids[d] = bb.op("arith.rem", [rest, e], rname=f"tile_{'xyz'[d]}")
                rest = bb.op("arith.div", [rest, e], rname="tile_rest")
        return ids

    _wrap_roles(kernel, roles, decode, ntiles, pid, nprog, c0)
    tiles = " * ".join(f"({g})" for g in grid)
    kernel.attrs["grid"] = [persistent_grid(tiles, balanced)]
    kernel.attrs["tile_order"] = {"group": 1}


# roles sized in warps (sm_80's cp.async producer): every thread has the launch's registers (no setmaxnreg),
# and the tile loop's state spills at 168: gemm 256x128x64 on the H200 ran 1.5-3% slower persistent
# (docs/experiments.md, "cp.async producer warps on the mma.sync path")
SM80_ROLES_REASON = "sm_80 roles (no setmaxnreg): the tile loop spills the consumers' registers"
UNEQUAL_REASON = "block indices used outside the roles (tiles of unequal work)"


def _outside_chain(kernel: Operation, roles: list[Operation]) -> list[Operation] | None:
    """The top-level ops outside the roles that read block indices, directly or through each other, in
    program order (causal attention's key-block count: `min(cdiv((block.x + 1) * BQ, BKV), ...)`), when
    every one is scalar arithmetic with one result (each role can then recompute them per tile); None when
    another kind of op reads them (or one nested in a region)."""
    ids = {op.result for op in kernel.body.ops if op.name == "tk.block_id"}
    tainted = set(ids)
    chain: list[Operation] = []
    for op in kernel.body.ops:
        if op.name in ("tk.role", "tk.block_id"):
            continue
        if not any(v in tainted for inner in op.walk() for v in inner.operands):
            continue
        if op.regions or len(op.results) != 1 or not op.name.startswith("arith."):
            return None
        chain.append(op)
        tainted.add(op.result)
    return chain


def _make_persistent_rotated(kernel: Operation, roles: list[Operation], grid: list[str],
                             chain: list[Operation]) -> None:
    """A 3-D grid whose tiles differ in work (block indices read outside the roles: causal attention, where
    query tile x does x + 1 key blocks). Static round-robin in launch order would give a block the same x
    in every round; here the grid is a whole number of x-rows, G = max(NUM_SMS / X, 1) * X blocks
    (X = grid[0]), and round r (tiles r*G .. r*G + n_r - 1, head-major: one round covers G / X (y, z)
    pairs, whose K and V are read by their X tiles side by side, from L2) hands its tile (pid + r) mod n_r
    to block pid, so a block's x advances by one every round and each block does about the same work.
    The arithmetic outside the roles that read block indices is recomputed in each role per tile."""
    body = kernel.body
    b = OpBuilder(body, roles[0])
    sizes = {op.attrs["name"]: op.result for op in body.ops if op.name == "tk.size"}
    ex, ey, ez = (b.expr(g, sizes) for g in grid)
    heads = b.op("arith.mul", [ey, ez], rname="heads")
    ntiles = b.op("arith.mul", [ex, heads], rname="ntiles")
    pid = b.op("tk.block_id", [], "pid", {"dim": 0})
    nprog = b.op("tk.grid_dim", [], "nprog", {"dim": 0})
    c0 = b.const(0, "zero")

    def decode(bb: OpBuilder, t: Value) -> dict[int, Value]:
        rnd = bb.op("arith.div", [t, nprog], rname="round")
        start = bb.op("arith.mul", [rnd, nprog], rname="round_start")
        left = bb.op("arith.sub", [ntiles, start], rname="round_left")
        n_r = bb.op("arith.min", [nprog, left], rname="round_tiles")
        q = bb.op("arith.rem", [bb.op("arith.add", [pid, rnd], rname="rotated"), n_r], rname="in_round")
        tile = bb.op("arith.add", [start, q], rname="tile_id")
        x = bb.op("arith.rem", [tile, ex], rname="tile_x")
        head = bb.op("arith.div", [tile, ex], rname="tile_head")
        y = bb.op("arith.rem", [head, ey], rname="tile_y")
        z = bb.op("arith.div", [head, ey], rname="tile_z")
        return {0: x, 1: y, 2: z}

    _wrap_roles(kernel, roles, decode, ntiles, pid, nprog, c0, chain)
    tiles = " * ".join(f"({g})" for g in grid)
    kernel.attrs["grid"] = [f"min({tiles}, max(NUM_SMS / ({grid[0]}), 1) * ({grid[0]}))"]
    kernel.attrs["tile_order"] = {"rotated": 1}


def _wrap_roles(kernel: Operation, roles: list[Operation], decode, ntiles: Value, pid: Value, nprog: Value,
                c0: Value, chain: list[Operation] | None = None) -> None:
    body = kernel.body
    old_ids = {op.attrs["dim"]: op for op in body.ops if op.name == "tk.block_id" and op.result is not pid}
    once = _once_barriers(roles)
    empty = None
    if once:
        consumers = sum(int(r.attrs.get("warpgroups") or 1) for r in roles if str(r.attrs.get("kind")) == "consumer")
        empty = OpBuilder(body, roles[0]).op(
            "pipe.barriers", [], "once_empty", {"count": WARPS_PER_WARPGROUP * consumers},
            VectorType("sv", "i64", 1))
    for role in roles:
        _wrap_role(role, decode, ntiles, pid, nprog, c0, old_ids, once, empty, chain or [])
    for op in [*reversed(chain or []), *old_ids.values()]:  # what the roles now recompute per tile
        if not uses_of(kernel, op.result):
            body.remove(op)


def _once_barriers(roles: list[Operation]) -> set[Value]:
    """The barriers of the one-shot loads before the K loop (pipeline's `once`: attention's Q tile):
    those a producer expects bytes on outside its loops."""
    return {op.operands[0] for r in roles if str(r.attrs.get("kind")) == "producer"
            for op in r.body.ops if op.name == "pipe.expect"}


def _wrap_role(role: Operation, decode, ntiles: Value, pid: Value, nprog: Value, c0: Value,
               old_ids: dict[int, Operation], once: set[Value], once_empty: Value | None,
               chain: list[Operation]) -> None:
    # multicast's drain loop runs once, after the tile loop, from the tile loop's final iteration count
    tail = [op for op in role.body.ops if op.attrs.get(MULTICAST_DRAIN_ATTR)]
    for op in tail:
        role.body.remove(op)
    inner_ops = list(role.body.ops)
    for op in inner_ops:
        role.body.remove(op)
    blk = Block()
    t = blk.add_arg(Value(I32, "tile"))
    it = blk.add_arg(Value(I32, "iter0"))
    b = OpBuilder(blk)
    ids = decode(b, t)
    mapping = {old.result: ids[d] for d, old in old_ids.items() if d in ids}
    used = {v for op in inner_ops for inner in op.walk() for v in inner.operands}
    needed = {op.result for op in chain if op.result in used}
    for op in reversed(chain):  # what the role reads, and what that reads
        if op.result in needed:
            needed.update(op.operands)
    for op in chain:  # recomputed from this tile's coordinates, before the role's own ops
        if op.result in needed:
            blk.append(clone_op(op, mapping))
    for op in inner_ops:
        op.operands = [mapping.get(v, v) for v in op.operands]
        for inner in op.walk():
            inner.operands = [mapping.get(v, v) for v in inner.operands]
        blk.append(op)
    # the pipeline's iteration counter continues across tiles: it = k + iter0 (stage, phase follow)
    kloop = next(op for op in inner_ops if op.name == "scf.for")
    marked = [i for i in kloop.walk() if i.attrs.get("iteration") is True]
    if not marked:
        raise CompileError(kloop.loc, "persistent: the K loop has no pipeline iteration counter "
                                      "(run pipeline first)")
    for i in marked:
        i.operands = [i.operands[0], it]
    if once and once_empty is not None:
        _once_per_tile(role, blk, kloop, t, pid, nprog, c0, once, once_empty)
    # next tile's base iteration
    nxt = b.op("arith.add", [it, loop_trip_count(b, kloop, c0)], rname="iter_next")
    y = Operation("scf.yield", [nxt])
    blk.append(y)
    loop = Operation("scf.for", [pid, ntiles, nprog, c0], [I32], regions=[Region(blk)], result_names=["iters"])
    role.body.append(loop)
    for op in tail:
        for inner in op.walk():
            if inner.attrs.get("drain_base"):
                inner.operands = [inner.operands[0], loop.result]
        role.body.append(op)


def _once_per_tile(role: Operation, blk: Block, kloop: Operation, t: Value, pid: Value, nprog: Value,
                   c0: Value, once: set[Value], once_empty: Value) -> None:
    """The one-shot loads become one per tile, in a single buffer guarded like a one-stage ring: the
    consumers wait for the n-th fill at parity n mod 2 and release the buffer (`once_empty`) after their
    last reader (_last_once_reader); the producer waits for that release (parity 1 - n mod 2: at once for the
    block's first tile) before it refills the buffer for the next tile, so the next tile's loads run
    under this tile's epilogue."""
    waits = [op for op in blk.ops if op.name == "pipe.wait" and op.operands[0] in once]
    expects = [op for op in blk.ops if op.name == "pipe.expect" and op.operands[0] in once]
    if not waits and not expects:
        return
    first = (waits + expects)[0]
    b = OpBuilder(blk, first)
    local = b.op("arith.div", [b.op("arith.sub", [t, pid], rname="tile_off"), nprog], rname="tile_seq")
    phase = b.op("arith.rem", [local, b.const(2, "two")], rname="once_phase")
    if str(role.attrs.get("kind")) == "producer":
        free = b.op("arith.sub", [b.const(1, "one"), phase], rname="once_free")
        b.void("pipe.wait", [once_empty, c0, free])
    for w in waits:
        w.operands = [w.operands[0], w.operands[1], phase]
    if str(role.attrs.get("kind")) == "consumer":
        blk.insert_after(_last_once_reader(role, blk, kloop, once), Operation("pipe.arrive", [once_empty, c0]))


def _last_once_reader(role: Operation, blk: Block, kloop: Operation, once: set[Value]) -> Operation:
    """The consumer's last op in the tile body that reads a buffer the producer fills on a `once` barrier:
    the K loop (attention's q), or an op after it (an epilogue reading a tile loaded before the loop:
    examples/linear_dgrad.tk's Z), so that the release does not let the next tile's fill overwrite the
    buffer under that read."""
    tiles = {op.operands[0] for r in role.parent.ops if r.name == "tk.role" and str(r.attrs.get("kind")) == "producer"
             for op in r.walk() if op.name == "pipe.copy" and op.operands[1] in once}
    ops = blk.ops
    last = kloop
    for op in ops[ops.index(kloop) + 1:]:
        if any(v in tiles for inner in op.walk() for v in inner.operands):
            last = op
    return last
