"""stream-k: split the K loops of a persistent GEMM's last partial round (or, with fewer tiles than
blocks, of all its tiles) across the blocks.

A persistent kernel (after `persistent`) over `T` output tiles on `P` blocks runs `ceil(T / P)`
rounds; when `T % P` is not 0 the last round keeps only `T % P` blocks busy (4096^3 with 128x256
tiles: 512 tiles on 132 SMs, 3.88 rounds of work in 4), and with `T < P` (a skinny, decode-time GEMM:
M = 1, N = 4096 is 16 tiles) most SMs idle. This pass keeps the first `T - R` tiles data-parallel
(whole tiles, as before), `R = T % P` (all T when T < P), and spreads the K iterations of the
remaining `R` tiles evenly over `Q` blocks (Stream-K, Osama et al., PPoPP 2023: "data-parallel +
one-tile stream-K" after a full round, plain Stream-K when there is none): block `p < Q` takes
iterations `[p * S / Q, (p + 1) * S / Q)` of the `S = R * nk` left. After a full round `Q = P`; with
fewer tiles than blocks `Q = min(P, R * nk / min_iters)`, so each block gets at least `min_iters`.

Rewrites, in each role of a kernel it applies to:
* the persistent tile loop's upper bound becomes `%sk_dp_tiles`;
* a second loop follows, over this block's segments: (tile, first iteration, end iteration) pieces
  of its range. It clones the tile body with the K loop running `%sk_len` iterations from `%sk_kb`
  (the pipeline's iteration counter continues, so stages and barrier phases stay in step);
* in the consumer role, the tile's epilogue runs only in the tile's *owner*, the block whose
  segment starts at iteration 0; a block whose segment starts later stores its f32 accumulator to
  its workspace slot (`tk.partial_store`, slot = its block index, flagged with the launch count),
  and the owner adds the partials of the blocks after it (`tk.partial_add`, which waits for each
  flag) before the epilogue. The owner does its piece last and its helpers do theirs first, so it
  rarely waits.
Kernel-level ops compute the schedule and declare the workspace (`tk.workspace`, one f32 tile per
block plus one flag per block and consumer warpgroup) and `tk.launch_count`. The kernel gains
`stream_k = {min_iters = N, max_tail_pct = P}`, and its grid becomes stream_k_grid's: one block per SM
when T >= NUM_SMS, else the Q blocks of the split (T when it does not split).

It applies when the consumer's K loop (from 0, step 1) carries exactly one value, an f32
accumulator that starts at 0 (`tk.fill`) and is only updated by `tk.mma` (so partial sums over K add
up to the whole), and the producer's K loop carries none. At run time the R tiles are split only if
they fill at most `max_tail` percent of the Q blocks (`stream-k{max_tail=P}`, default MAX_TAIL_PCT)
and every block gets at least `min_iters` iterations (`stream-k{min_iters=N}`, default MIN_ITERS; a
kernel's own `@stream_k(1, min_iters=I)`, the attr `stream_k_min_iters`, takes its place, so `@tune` can
choose it per shape); otherwise the schedule is the plain persistent one.

The default pipeline runs `stream-k{opt_in=true}`: only kernels whose source asks (`@stream_k(1)`,
the kernel attr `stream_k_requested`, which the rewrite consumes) change, so `@tune` can choose it
per shape (examples/gemm.tk's SK). A kernel `multicast` made clusters of (`tma_multicast`) is left alone
(`stream_k_skipped`): a cluster's CTAs load their shared tiles together. Named without opt_in
(`--passes=...,persistent,stream-k,canonicalize`) it rewrites every kernel it applies to. On sm_80 there are
no roles or persistent loop, so it leaves a kernel alone there. Requires every block to be resident at once
(the grid is at most one block per SM), since owners wait for other blocks.
"""

from __future__ import annotations

import ast as pyast
from dataclasses import dataclass

from tkir.facts import MAX_STREAM_K_MIN_ITERS, MULTICAST_ATTR
from tkir.ir import Block, Module, Operation, Region, Value, clone_op, uses_of
from tkir.layout import layout_of
from tkir.ops import TILE_BINARY, TILE_UNARY
from tkir.passes.analysis import const_is, one_block_per_sm
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, ParamError, Pass, param
from tkir.types import I32, GlobalType, ScalarType, TileType

# When the split pays (measured on the H200, docs/experiments.md): the stream-K phase ran at about 75%
# of the data-parallel rate (partials cost a 128 KB store and load each; blocks at different K offsets
# share less of L2), so splitting a tail wave that is more than about 60% full loses (4096^3: 116 of
# 132 tiles, -4%; 4096x4096x8192, -11%), while a tail near half full wins (8192^3: 68 of 132, +1.6%).
# Opt-in: the kernel that carries both schedules measured 1-4% slower where the split does not happen
# (2048^3: 609 vs 637 TFLOP/s; its SASS is 2.6x longer) and 1-2% faster where it does (8192^3), so the
# default pipeline runs it only for kernels that ask (@stream_k(1); `tkc tune` chooses per shape).
MIN_ITERS = 16       # K iterations per block below which the tail is not split (fix-up would dominate)
MAX_TAIL_PCT = 60    # split only tails that fill at most this percentage of the blocks they are split over
I1 = ScalarType("i1")
REQUEST_ATTR = "stream_k_requested"  # the kernel attr `@stream_k(1)` sets (frontend/annotations.py STREAM_K_ATTR)
MIN_ITERS_ATTR = "stream_k_min_iters"  # `@stream_k(1, min_iters=I)` (frontend/annotations.py STREAM_K_MIN_ITERS_ATTR)


class StreamK(Pass):
    name = "stream-k"
    min_iters: int = param(MIN_ITERS, "K iterations each block must get for the tail to be split")
    max_tail: int = param(MAX_TAIL_PCT, "split only tails that fill at most this percentage of the blocks")
    opt_in: bool = param(False, "rewrite only kernels whose source asks (@stream_k(1)); false: every kernel "
                                "the pass applies to (the default pipeline runs stream-k{opt_in=true})")

    def __post_init__(self) -> None:
        if not 1 <= self.min_iters <= MAX_STREAM_K_MIN_ITERS:
            raise ParamError("min_iters", f"stream-k: min_iters={self.min_iters}: must be 1..{MAX_STREAM_K_MIN_ITERS}")
        if not 0 <= self.max_tail <= 100:
            raise ParamError("max_tail", f"stream-k: max_tail={self.max_tail}: a percentage from 0 to 100")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            if self.opt_in and not kernel.attrs.get(REQUEST_ATTR):
                continue
            if MULTICAST_ATTR in kernel.attrs:  # multicast's clusters: a block's pair must run the same tiles
                kernel.attrs["stream_k_skipped"] = "multicast: the cluster's CTAs load their shared tiles together"
                continue
            plan = match(kernel)
            if plan is not None:
                min_iters = kernel_min_iters(kernel, self.min_iters)
                grid = kernel.attrs.get("grid")
                if isinstance(grid, list) and len(grid) == 1 and isinstance(grid[0], str):
                    kernel.attrs["grid"] = [stream_k_grid(grid[0], size_text(plan.nk), min_iters, self.max_tail)]
                _rewrite(kernel, plan, min_iters, self.max_tail)
                kernel.attrs.pop(REQUEST_ATTR, None)
                kernel.attrs.pop(MIN_ITERS_ATTR, None)


def kernel_min_iters(kernel: Operation, default: int) -> int:
    """The kernel's own `stream_k_min_iters` (`@stream_k(1, min_iters=I)`) where it has one, else the
    pass's `min_iters`."""
    value = kernel.attrs.get(MIN_ITERS_ATTR, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STREAM_K_MIN_ITERS:
        raise ParamError("min_iters", f"stream-k: the kernel's {MIN_ITERS_ATTR} = {value!r}: must be an integer "
                                      f"1..{MAX_STREAM_K_MIN_ITERS}")
    return value


def stream_k_grid(grid: str, nk: str | None, min_iters: int, max_tail: int) -> str:
    """The launch grid of the stream-K schedule over the persistent grid `grid`'s T tiles, with `nk`
    K iterations per tile (a size expression; None: unknown).

    T >= NUM_SMS: one block per SM (the last round is spread over all of them). T < NUM_SMS: the
    blocks the split uses, Q = min(T * nk / min_iters, NUM_SMS) (each gets at least min_iters
    iterations), when the T tiles fill at most max_tail percent of them; otherwise T blocks (no split).
    The kernel computes the same Q from its grid (sk_blocks), so the two agree. With nk unknown the
    grid is NUM_SMS and the kernel's own Q leaves the blocks past it idle."""
    tiles = _persistent_tiles(grid)
    if tiles is None:
        return grid
    if nk is None:
        return "NUM_SMS"
    q = f"min(({tiles}) * ({nk}) / {min_iters}, NUM_SMS)"
    split = f"min(max({max_tail} * {q} - 100 * ({tiles}) + 1, 0), 1)"
    return f"max(min({tiles}, NUM_SMS), {split} * {q})"


def _persistent_tiles(grid: str) -> str | None:
    """T of a persistent grid, `cdiv(T, cdiv(T, NUM_SMS))` (balanced) or `min(T, NUM_SMS)`; else None."""
    try:
        call = pyast.parse(one_block_per_sm(grid), mode="eval").body
    except SyntaxError:
        return None
    if (isinstance(call, pyast.Call) and isinstance(call.func, pyast.Name) and call.func.id == "min"
            and len(call.args) == 2 and isinstance(call.args[1], pyast.Name) and call.args[1].id == "NUM_SMS"):
        return pyast.get_source_segment(one_block_per_sm(grid), call.args[0])
    return None


_SIZE_OPS = {"arith.add": "+", "arith.sub": "-", "arith.mul": "*", "arith.div": "/"}


def size_text(v: Value, depth: int = 0) -> str | None:
    """The size expression (tkir.symexpr) an i32 value computes from sizes and constants, or None."""
    op = v.owner
    if not isinstance(op, Operation) or depth > 16:
        return None
    if op.name == "arith.const" and isinstance(op.attrs.get("value"), int):
        return str(op.attrs["value"])
    if op.name == "tk.size":
        return str(op.attrs["name"])
    args = [size_text(x, depth + 1) for x in op.operands]
    if len(args) != 2 or None in args:
        return None
    if op.name in _SIZE_OPS:
        return f"({args[0]}) {_SIZE_OPS[op.name]} ({args[1]})"
    if op.name in ("arith.cdiv", "arith.min", "arith.max"):
        return f"{op.name.removeprefix('arith.')}({args[0]}, {args[1]})"
    return None


@dataclass
class RolePlan:
    role: Operation
    tiles: Operation        # the persistent loop over tiles
    kloop: Operation        # the K loop inside it
    consumer: bool


@dataclass
class Plan:
    roles: list[RolePlan]
    pid: Value
    ntiles: Value
    nprog: Value
    nk: Value
    acc: TileType


def match(kernel: Operation) -> Plan | None:
    """The kernel's persistent loops and K loops, or None when the pass does not apply."""
    if "tile_order" not in kernel.attrs or "stream_k" in kernel.attrs:
        return None
    roles = [op for op in kernel.body.ops if op.name == "tk.role"]
    plans: list[RolePlan] = []
    acc: TileType | None = None
    for role in roles:
        loops = [op for op in role.body.ops if op.name == "scf.for"]
        if len(loops) != 1:
            return None
        tiles = loops[0]
        kloops = [op for op in tiles.body.ops if op.name == "scf.for" and "stages" in op.attrs]
        if len(kloops) != 1:
            return None
        kloop = kloops[0]
        if not (const_is(kloop.operands[0], 0) and const_is(kloop.operands[2], 1)):
            return None  # the schedule counts iterations from 0 in steps of 1
        consumer = str(role.attrs.get("kind")) == "consumer"
        if consumer:
            acc = _summed_accumulator(kloop)
            if acc is None:
                return None
        elif len(kloop.operands) != 3:
            return None
        plans.append(RolePlan(role, tiles, kloop, consumer))
    if acc is None or sum(p.consumer for p in plans) != 1:
        return None
    pid, ntiles, nprog, _ = plans[0].tiles.operands
    nk = plans[0].kloop.operands[1]
    if any(p.tiles.operands[:3] != [pid, ntiles, nprog] or p.kloop.operands[1] is not nk for p in plans):
        return None
    return Plan(plans, pid, ntiles, nprog, nk, acc)


def _summed_accumulator(kloop: Operation) -> TileType | None:
    """The accumulator type if the loop carries one f32 tile, zero-initialised, updated only by
    tk.mma (acc = a @ b + acc) and read by nothing else in the loop."""
    if len(kloop.operands) != 4 or len(kloop.results) != 1:
        return None
    init, arg = kloop.operands[3], kloop.body.args[1]
    t = arg.type
    if not (isinstance(t, TileType) and t.space == "rt" and t.dtype == "f32"):
        return None
    fill = init.owner
    if not (isinstance(fill, Operation) and fill.name == "tk.fill" and float(fill.attrs.get("value", 1)) == 0.0):
        return None
    term = kloop.body.terminator
    upd = term.operands[0].owner if term is not None and term.operands else None
    if not (isinstance(upd, Operation) and upd.name == "tk.mma" and upd.operands[2] is arg):
        return None
    if [u for u, _ in uses_of(kloop, arg)] != [upd]:
        return None
    return t


def _rewrite(kernel: Operation, plan: Plan, min_iters: int, max_tail: int) -> None:
    body = kernel.body
    b = OpBuilder(body, plan.roles[0].role)
    nk, pid, nprog, ntiles = plan.nk, plan.pid, plan.nprog, plan.ntiles
    c0, c1 = b.const(0, "sk_zero"), b.const(1, "sk_one")
    rem = b.op("arith.rem", [ntiles, nprog], "sk_rem")  # the last round's tiles; all T when T < P
    full = b.op("arith.min", [b.op("arith.div", [ntiles, nprog]), c1], "sk_full_round")
    work = b.op("arith.mul", [rem, nk], "sk_tail_iters")
    mi = b.const(min_iters, "sk_min_iters")
    # the blocks the split uses: all P after a full round; else (T < P) as many as get min_iters each
    want = b.op("arith.max", [b.op("arith.div", [work, mi]), b.op("arith.mul", [full, nprog])], "sk_want")
    blocks = b.op("arith.max", [b.op("arith.min", [nprog, want]), c1], "sk_blocks")
    floor = b.op("arith.mul", [blocks, mi], "sk_floor")
    enough = b.op("arith.min", [b.op("arith.div", [work, floor]), c1], "sk_enough")
    # 100 * rem <= max_tail * blocks, as 0 or 1: min(max(max_tail * blocks - 100 * rem + 1, 0), 1)
    room = b.op("arith.sub", [b.op("arith.mul", [blocks, b.const(max_tail, "sk_max_tail")]),
                              b.op("arith.mul", [rem, b.const(100)])])
    small = b.op("arith.min", [b.op("arith.max", [b.op("arith.add", [room, c1]), c0]), c1], "sk_small_tail")
    sk_tiles = b.op("arith.mul", [b.op("arith.mul", [rem, enough]), small], "sk_tiles")
    dp_tiles = b.op("arith.sub", [ntiles, sk_tiles], "sk_dp_tiles")
    total = b.op("arith.mul", [sk_tiles, nk], "sk_iters")
    # blocks past sk_blocks get the empty range [total, total)
    lo = b.op("arith.min", [pid, blocks], "sk_slot")
    hi = b.op("arith.min", [b.op("arith.add", [pid, c1]), blocks], "sk_slot_end")
    begin = b.op("arith.div", [b.op("arith.mul", [lo, total]), blocks], "sk_begin")
    end = b.op("arith.div", [b.op("arith.mul", [hi, total]), blocks], "sk_end")
    first = b.op("arith.div", [begin, nk], "sk_first_tile")
    nonempty = b.op("arith.min", [b.op("arith.sub", [end, begin]), c1], "sk_nonempty")
    nsegs = b.op("arith.mul", [nonempty, b.op("arith.sub", [b.op("arith.cdiv", [end, nk]), first])], "sk_segments")
    acc = plan.acc
    lay = layout_of(acc)
    wg = lay.wg if lay is not None and lay.wg is not None else 1
    part = b.op("tk.workspace", [], "sk_part", {"name": "sk_part"},
                GlobalType("f32", ("NUM_SMS", acc.rows * acc.cols)))
    flags = b.op("tk.workspace", [], "sk_flags", {"name": "sk_flags"}, GlobalType("i32", ("NUM_SMS", wg)))
    epoch = b.op("tk.launch_count", [], "sk_epoch", {"name": "sk_epoch"})
    sched = dict(c0=c0, c1=c1, dp_tiles=dp_tiles, total=total, begin=begin, end=end, first=first, nk=nk,
                 pid=pid, blocks=blocks, part=part, flags=flags, epoch=epoch)
    for rp in plan.roles:
        _add_segment_loop(rp, nsegs, sched)
    kernel.attrs["stream_k"] = {"min_iters": min_iters, "max_tail_pct": max_tail}


def _add_segment_loop(rp: RolePlan, nsegs: Value, s: dict[str, Value]) -> None:
    tiles = rp.tiles
    tiles.operands[1] = s["dp_tiles"]
    blk = Block()
    seg = blk.add_arg(Value(I32, "seg"))
    it0 = blk.add_arg(Value(I32, "sk_iter0"))
    b = OpBuilder(blk)
    t_local = b.op("arith.add", [s["first"], seg], "sk_tile_local")
    tile = b.op("arith.add", [s["dp_tiles"], t_local], "sk_tile")
    tbase = b.op("arith.mul", [t_local, s["nk"]], "sk_tile_base")
    kb = b.op("arith.max", [b.op("arith.sub", [s["begin"], tbase]), s["c0"]], "sk_kb")
    ke = b.op("arith.min", [b.op("arith.sub", [s["end"], tbase]), s["nk"]], "sk_ke")
    length = b.op("arith.sub", [ke, kb], "sk_len")
    mapping: dict[Value, Value] = {tiles.body.args[0]: tile, tiles.body.args[1]: it0}
    term = tiles.body.terminator
    next_op = term.operands[0].owner if term is not None and term.operands else None
    kloop_clone: Operation | None = None
    epilogue: list[Operation] = []  # consumer ops after the K loop: they move into the owner's branch
    tail: list[Operation] = []      # iteration bookkeeping and the yield: they stay last
    for op in tiles.body.ops:
        new = clone_op(op, mapping)
        if op is rp.kloop:
            kloop_clone = new
            _offset_k_loop(new, s["c0"], length, kb)
            blk.append(new)
        elif kloop_clone is None:
            blk.append(new)
        elif op is next_op:  # iter_next = iter0 + (iterations run here)
            new.operands = [length if v is s["nk"] else v for v in new.operands]
            tail.append(new)
        elif op is term:
            tail.append(new)
        elif rp.consumer:
            epilogue.append(new)
        else:
            blk.append(new)
    assert kloop_clone is not None
    if rp.consumer:
        _owner_epilogue(blk, kloop_clone, epilogue, kb, t_local, s)
    for op in tail:
        blk.append(op)
    loop = Operation("scf.for", [s["c0"], nsegs, s["c1"], tiles.result], [I32], regions=[Region(blk)],
                     result_names=["sk_iters_done"])
    rp.role.body.append(loop)


def _offset_k_loop(kloop: Operation, c0: Value, length: Value, kb: Value) -> None:
    """Run the loop `length` iterations; the body sees k = index + kb, except the pipeline's
    iteration counter (index + iter0), which counts iterations actually run."""
    kloop.operands[0], kloop.operands[1] = c0, length
    body = kloop.body
    idx = body.args[0]
    first = body.ops[0]
    k = Operation("arith.add", [idx, kb], [I32], result_names=["sk_k"])
    body.insert_before(first, k)
    for op in kloop.walk():
        if op is k or op is kloop or op.attrs.get("iteration") is True:
            continue
        op.operands = [k.result if v is idx else v for v in op.operands]


def _owner_epilogue(blk: Block, kloop: Operation, epilogue: list[Operation], kb: Value, t_local: Value,
                    s: dict[str, Value]) -> None:
    b = OpBuilder(blk)
    acc = kloop.result
    helper = b.op("arith.cmp", [kb, s["c0"]], "sk_helper", {"pred": "ne"}, I1)
    owner = b.op("arith.cmp", [kb, s["c0"]], "sk_owner", {"pred": "eq"}, I1)
    rows = _valid_rows(b, acc, epilogue)
    extra = [rows] if rows is not None else []
    store = Block()
    store.append(Operation("tk.partial_store", [s["part"], s["flags"], acc, s["pid"], s["epoch"], *extra]))
    blk.append(Operation("scf.if", [helper], regions=[Region(store)]))
    own = Block()
    ob = OpBuilder(own)
    p0 = ob.op("arith.add", [s["pid"], s["c1"]], "sk_peer0")
    span = ob.op("arith.mul", [ob.op("arith.mul", [ob.op("arith.add", [t_local, s["c1"]]), s["nk"]]),
                                s["blocks"]])
    last = ob.op("arith.div", [ob.op("arith.sub", [span, s["c1"]]), s["total"]], "sk_last_peer")
    stop = ob.op("arith.add", [last, s["c1"]], "sk_peer_end")
    red = Block()
    red.add_arg(Value(I32, "peer"))
    a = red.add_arg(Value(acc.type, "sk_acc"))
    add = Operation("tk.partial_add", [s["part"], s["flags"], a, red.args[0], s["epoch"], *extra], [acc.type],
                    result_names=["sk_sum"])
    red.append(add)
    red.append(Operation("scf.yield", [add.result]))
    reduce = Operation("scf.for", [p0, stop, s["c1"], acc], [acc.type], regions=[Region(red)],
                       result_names=["sk_total_acc"])
    own.append(reduce)
    for op in epilogue:
        op.operands = [reduce.result if v is acc else v for v in op.operands]
        own.append(op)
    blk.append(Operation("scf.if", [owner], regions=[Region(own)]))


# Ops of an epilogue through which each output row depends only on the same row of the accumulator:
# elementwise math, casts, selects, loads of the epilogue's operands and the stores of its result.
_ROW_LOCAL = frozenset({"tk.cast", "tk.select", "tk.cmp", "tk.fill", "tk.load", "tk.store", "tk.store_staged",
                        "tk.store_warp_staged", "tk.size", "tk.block_id", "tk.index", *(f"tk.{n}" for n in TILE_BINARY),
                        *(f"tk.{n}" for n in TILE_UNARY)})
_STORES = ("tk.store", "tk.store_staged", "tk.store_warp_staged")


def _valid_rows(b: OpBuilder, acc: Value, epilogue: list[Operation]) -> Value | None:
    """How many of the accumulator tile's rows lie inside the output: `M - tile_row * rows`, from the
    epilogue's store of the tile (its global's first dim and its row coordinate), so that the partials
    of a skinny GEMM (M = 1: one row of 64) move only the rows the epilogue stores. None (every row
    moves) unless the epilogue only computes row by row (`_ROW_LOCAL`) and every store of a tile with
    the accumulator's rows is to a 2-D global at one row coordinate along one extent."""
    t = acc.type
    if not isinstance(t, TileType) or any(not (op.name.startswith("arith.") or op.name in _ROW_LOCAL)
                                          for op in epilogue):
        return None
    found: tuple[Value, object] | None = None
    for op in epilogue:
        if op.name not in _STORES:
            continue
        dst, val = op.operands[0].type, op.operands[1].type
        if not isinstance(dst, GlobalType):
            continue  # a register -> shared store: the staging of a store counted below
        if not (isinstance(val, TileType) and val.rows == t.rows and dst.rank == 2):
            return None
        coord = op.operands[3] if op.name != "tk.store" else op.operands[2]
        if found is not None and (found[0] is not coord or found[1] != dst.dims[0]):
            return None
        found = (coord, dst.dims[0])
    if found is None:
        return None
    coord, extent = found
    if coord.owner in epilogue:
        return None  # computed after the K loop: not available where the helper stores its partial
    if isinstance(extent, int):
        m = b.const(extent)
    elif isinstance(extent, str) and extent.isidentifier():
        m = b.op("tk.size", [], None, {"name": extent})
    else:
        return None  # an expression of sizes: every row moves
    start = b.op("arith.mul", [coord, b.const(t.rows)], "sk_row0")
    return b.op("arith.sub", [m, start], "sk_rows")
