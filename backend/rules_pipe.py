"""Lowering rules for shared memory, mbarrier pipelines, TMA copies and warp-specialized roles:
tk.alloc, pipe.barriers / stage / wait / expect / arrive / copy, tk.role.

Rules of backend.rules' table. What they emit:
* shared tiles (`tk.alloc`, `pipe.stage`) -> 32-bit shared-window addresses inside one dynamic
  shared-memory block laid out at compile time (backend.context.plan_shared), base rounded up to 1024 B;
* `pipe.barriers/wait/expect/arrive` -> mbarrier operations (backend.idioms; HOPPER.md §5), the
  try_wait loop in IR; a deferred `pipe.arrive` releases the previous iteration's stage, carried
  around its loop by a loop hook of the scf.for rule;
* `pipe.copy` -> one `cp.async.bulk.tensor` per TMA box (HOPPER.md §4.4), one thread issuing (the
  cp.async form, `pipe.copy {cp_async = true}`, is rules_sm80's);
* `tk.role` -> a branch on the warpgroup index with `setmaxnreg` (HOPPER.md §7.1);
* `pipe.turn_*` -> named barriers of backend.idioms.NAMED_BARRIERS' "turn" ids (pingpong).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from tkir.backend.context import RoleCtx, tile_stage_bytes
from tkir.backend.idioms import (
    NAMED_BARRIERS,
    block_barrier,
    bulk_commit,
    bulk_wait,
    cluster_barrier,
    cluster_ctarank,
    cp_async_wait_all,
    fence_async_proxy,
    fence_mbarrier_init,
    mbarrier_arrive,
    mbarrier_arrive_cluster,
    mbarrier_arrive_expect_tx,
    mbarrier_init,
    mbarrier_slot,
    mbarrier_wait_parity,
    named_barrier_arrive,
    named_barrier_sync,
    wgmma_wait_group,
)
from tkir.backend.rules import loop_hook, rule
from tkir.backend.values import LoweringError, Smem
from tkir.ir import Operation, Value
from tkir.opdef import REDUCE_ATTR
from tkir.target import MBARRIER_BYTES, WARP, WARPS_PER_WARPGROUP
from tkir.types import GlobalType, TileType, VectorType, dtype_bytes

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext


@rule("tk.alloc")
def _op_tk_alloc(cx: LoweringContext, op: Operation) -> None:
    addr = cx.w.op(f"add i32 {cx.smem}, {cx.plan.offsets[id(op.result)]}", op.result.name or "s")
    cx.set(op.result, Smem(addr, op.result.type))


@rule("tk.reuse")
def _op_tk_reuse(cx: LoweringContext, op: Operation) -> None:
    """The tile takes the donor's address (passes/reuse_smem.py). Before its first write: this thread's wgmma
    groups, which may read the donor, are complete (sm_90a), so are the bulk copies reading it where it was a
    TMA store's source, and every thread of the role is past its reads (the role's barrier)."""
    donor = cx.get(op.operands[0])
    assert isinstance(donor, Smem)
    if cx.target == "sm_90a":
        wgmma_wait_group(cx.w, 0)
        if op.attrs.get("after_bulk_reads"):
            cx.wait_for_bulk_reads()
    cx.sync()
    cx.set(op.result, Smem(donor.addr, op.result.type))


@rule("pipe.barriers")
def _op_pipe_barriers(cx: LoweringContext, op: Operation) -> None:
    w = cx.w
    addr = w.op(f"add i32 {cx.smem}, {cx.plan.offsets[id(op.result)]}", op.result.name or "bar")
    cx.set(op.result, Smem(addr, op.result.type))
    lead = w.op(f"icmp eq i32 {cx.tid}, 0", "lead")
    init, done = w.label("bar_init"), w.label("bar_done")
    w.cond_br(lead, init, done)
    w.start_block(init)
    # a ring multicast fills (passes/multicast.py): the consumers of every CTA of the cluster release it
    count = op.attrs["count"] * int(op.attrs.get("cluster") or 1)
    for s in range(op.result.type.n):
        a = w.op(f"add i32 {addr}, {MBARRIER_BYTES * s}", "b")
        mbarrier_init(w, cx.target, a, count)
    if cx.target == "sm_90a":  # sm_90 instructions; on sm_80 the block barrier below orders the init
        fence_mbarrier_init(w)
        fence_async_proxy(w)
    w.br(done)
    w.start_block(done)
    cx.pending_sync = True


def _bar_addr(cx: LoweringContext, bars: Value, s: Value) -> str:
    base = cx.get(bars)
    assert isinstance(base, Smem)
    return mbarrier_slot(cx.w, base.addr, cx.scalar(s))


@rule("pipe.stage")
def _op_pipe_stage(cx: LoweringContext, op: Operation) -> None:
    buf = cx.get(op.operands[0])
    assert isinstance(buf, Smem)
    stride = tile_stage_bytes(buf.type)
    off = cx.w.op(f"mul i32 {cx.scalar(op.operands[1])}, {stride}", "soff")
    cx.set(op.result, Smem(cx.w.op(f"add i32 {buf.addr}, {off}", op.result.name or "st"), op.result.type))


@rule("pipe.wait")
def _op_pipe_wait(cx: LoweringContext, op: Operation) -> None:
    bar = _bar_addr(cx, op.operands[0], op.operands[1])
    mbarrier_wait_parity(cx.w, cx.target, bar, cx.scalar(op.operands[2]))


@rule("pipe.expect")
def _op_pipe_expect(cx: LoweringContext, op: Operation) -> None:
    bar = _bar_addr(cx, op.operands[0], op.operands[1])
    mbarrier_arrive_expect_tx(cx.w, bar, op.attrs["bytes"])


@rule("pipe.arrive")
def _op_pipe_arrive(cx: LoweringContext, op: Operation) -> None:
    w = cx.w
    if op.attrs.get("deferred"):
        d = cx.deferred
        if d is None:
            raise LoweringError(op.loc, "backend: a deferred pipe.arrive must sit in a loop")
        d["next"] = cx.scalar(op.operands[1])
        d["bars"] = op.operands[0]
        arrive_prev(cx, d["prev"], op.operands[0])
        return
    bar = _bar_addr(cx, op.operands[0], op.operands[1])
    if cx.role is not None and cx.role.single_thread:
        _arrive(cx, op.operands[0], bar)
        return
    # one arrival per warp (the barrier counts 4 per consumer warpgroup)
    first = w.op(f"icmp eq i32 {cx.role.lane}, 0", "lane0")  # type: ignore[union-attr]
    go, done = w.label("arrive"), w.label("arrived")
    w.cond_br(first, go, done)
    w.start_block(go)
    _arrive(cx, op.operands[0], bar)
    w.br(done)
    w.start_block(done)


def _cluster_of(bars: Value) -> int:
    """The CTAs whose consumers release the ring of barrier array `bars` (`cluster` of its pipe.barriers,
    set by multicast), 1 for a CTA's own ring."""
    d = bars.owner
    return int(d.attrs.get("cluster") or 1) if isinstance(d, Operation) else 1


def _arrive(cx: LoweringContext, bars: Value, bar: str) -> None:
    """One arrival on `bar`, in every CTA of the cluster where the ring is shared (multicast)."""
    ctas = _cluster_of(bars)
    if ctas > 1:
        mbarrier_arrive_cluster(cx.w, bar, ctas)
    else:
        mbarrier_arrive(cx.w, cx.target, bar)


def arrive_prev(cx: LoweringContext, prev: str, bars: Value) -> None:
    """Arrive (lane 0 of each warp) on bars[prev] unless prev < 0 (nothing to release yet)."""
    w = cx.w
    has = w.op(f"icmp sge i32 {prev}, 0", "has_prev")
    lane0 = w.op(f"icmp eq i32 {cx.role.lane}, 0", "lane0")  # type: ignore[union-attr]
    go_c = w.op(f"and i1 {has}, {lane0}", "release")
    go, done = w.label("release"), w.label("released")
    w.cond_br(go_c, go, done)
    w.start_block(go)
    base = cx.get(bars)
    assert isinstance(base, Smem)
    _arrive(cx, bars, mbarrier_slot(w, base.addr, prev))
    w.br(done)
    w.start_block(done)


@dataclass
class DeferredRelease:
    """A loop whose `pipe.arrive {deferred}` releases the previous iteration's stage (early-release):
    the stage index is carried around the loop, -1 on entry (nothing to release yet), and the last
    iteration's stage is released after the loop. A backend.rules.LoopCarry (`_deferred_release` is
    its loop hook); `cx.deferred` holds its state while the body is lowered."""

    state: dict | None = None
    outer: dict | None = None  # the enclosing loop's state (restored after this loop)
    hint: ClassVar[str] = "prev_stage"

    def initial(self) -> list[str]:
        return ["-1"]

    def enter(self, cx: LoweringContext, phis: list[str]) -> None:
        self.outer = cx.deferred
        self.state = cx.deferred = {"prev": phis[0], "next": None, "bars": None}

    def latch(self, cx: LoweringContext) -> list[str]:
        return [self.state["next"]]

    def leave(self, cx: LoweringContext) -> None:
        arrive_prev(cx, self.state["prev"], self.state["bars"])
        cx.deferred = self.outer


@loop_hook
def _deferred_release(cx: LoweringContext, loop: Operation) -> DeferredRelease | None:
    if any(i.name == "pipe.arrive" and i.attrs.get("deferred") for i in loop.body.ops):
        return DeferredRelease()
    return None


@rule("pipe.copy", when=lambda cx, op: not op.attrs.get("cp_async"))
def _op_pipe_copy(cx: LoweringContext, op: Operation) -> None:
    w = cx.w
    dst = cx.get(op.operands[0])
    assert isinstance(dst, Smem)
    bar = _bar_addr(cx, op.operands[1], op.operands[2])
    desc_sym = op.attrs["desc"].name
    desc = cx.module.lookup(desc_sym)
    if desc is None:
        raise LoweringError(op.loc, f"backend: no tma.desc @{desc_sym}")
    tmap = cx.tmaps[desc_sym]
    src = op.operands[3].type
    assert isinstance(src, GlobalType)
    t = dst.type
    coords = [cx.scalar(c) for c in op.operands[4:]]
    box = list(desc.attrs["box"])
    rank = len(box)
    if isinstance(t, VectorType):  # a shared vector: one box [n] along the innermost dim
        _copy_vector(cx, op, dst, tmap, bar, coords)
        return
    assert isinstance(t, TileType)
    # coordinates innermost first: tile units -> elements for the tile dims, plain for the rest
    tile_dims = [t.cols, t.rows]
    elem = []
    for i in range(rank):
        c = coords[len(coords) - 1 - i]
        if i < 2:
            elem.append(w.op(f"mul i32 {c}, {tile_dims[i]}", "x"))
        else:
            elem.append(c)
    panel_cols = box[0]
    panels = max(1, t.cols // panel_cols)
    panel_bytes = t.rows * panel_cols * dtype_bytes(t.dtype)
    mc = op.attrs.get("multicast")
    base, suffix, extra, cons = dst.addr, "", [], []
    if isinstance(mc, dict):  # this CTA's share of the rows, written into every CTA of the cluster
        ctas = int(mc["ctas"])
        tmap = cx.tmaps[mc["desc"].name]
        part = t.rows // ctas
        rank_ = cluster_ctarank(w)
        elem[1] = w.op(f"add i32 {elem[1]}, {w.op(f'mul i32 {rank_}, {part}', 'mc_row')}", "y")
        off = w.op(f"mul i32 {rank_}, {part * panel_cols * dtype_bytes(t.dtype)}", "mc_off")
        base = w.op(f"add i32 {dst.addr}, {off}", "dst")
        suffix, extra, cons = ".multicast::cluster", [("i16", str((1 << ctas) - 1))], ["h"]
    for p in range(panels):
        x0 = w.op(f"add i32 {elem[0]}, {p * panel_cols}", "x") if p else elem[0]
        d = w.op(f"add i32 {base}, {p * panel_bytes}", "dst") if p else base
        regs = ", ".join(f"${3 + i}" for i in range(rank))
        mask = f", ${3 + rank}" if extra else ""
        w.asm("void", [f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes{suffix} "
                       f"[$0], [$1, {{{regs}}}], [$2]{mask};"],
              ["r", "l", "r"] + ["r"] * rank + cons,
              [("i32", d), ("ptr", tmap), ("i32", bar)] + [("i32", e) for e in [x0, *elem[1:]]] + extra)


def _copy_vector(cx: LoweringContext, op: Operation, dst: Smem, tmap: str, bar: str, coords: list[str]) -> None:
    """One `cp.async.bulk.tensor` of a shared vector's box [n]: its coordinate (the last) counts vectors,
    the others elements (create-tma gives the leading dims box 1)."""
    w, n, rank = cx.w, dst.type.n, len(coords)
    elem = [w.op(f"mul i32 {coords[-1]}, {n}", "x"), *reversed(coords[:-1])]
    regs = ", ".join(f"${3 + i}" for i in range(rank))
    w.asm("void", [f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes "
                   f"[$0], [$1, {{{regs}}}], [$2];"],
          ["r", "l", "r"] + ["r"] * rank, [("i32", dst.addr), ("ptr", tmap), ("i32", bar)] + [("i32", e) for e in elem])


@rule("tma.store", targets=("sm_90a",), when=lambda cx, op: isinstance(op.operands[1].type, TileType))
def tma_store(cx: LoweringContext, op: Operation) -> None:
    """A shared tile to global memory with one `cp.async.bulk.tensor` store per TMA box, issued by one
    thread after every thread's writes are fenced into the async proxy and synced; the issuing
    thread waits until the copy engine has read the tile before the threads meet again (the tile
    may be overwritten after that). Out-of-bounds elements are not written (TMA clips)."""
    w = cx.w
    src = cx.get(op.operands[1])
    assert isinstance(src, Smem)
    desc_sym = op.attrs["desc"].name
    desc = cx.module.lookup(desc_sym)
    if desc is None:
        raise LoweringError(op.loc, f"backend: no tma.desc @{desc_sym}")
    tmap = cx.tmaps[desc_sym]
    t = src.type
    assert isinstance(t, TileType)
    coords = [cx.scalar(c) for c in op.operands[2:]]
    box = list(desc.attrs["box"])
    rank = len(box)
    tile_dims = [t.cols, t.rows]
    inner_first = coords[::-1]
    elem = [w.op(f"mul i32 {inner_first[i]}, {tile_dims[i]}", "x") if i < 2 else inner_first[i] for i in range(rank)]
    panel_cols = box[0]
    panels = max(1, t.cols // panel_cols)
    panel_bytes = t.rows * panel_cols * dtype_bytes(t.dtype)
    # `reduce = "add"` (G[i, j] += t): the copy engine adds the tile into global memory (PTX ISA
    # cp.reduce.async.bulk.tensor; the element type is the tensor map's, f32 here)
    reduce = op.attrs.get(REDUCE_ATTR)
    copy, kind = ("cp.reduce.async.bulk.tensor", f".{reduce}.tile") if reduce is not None \
        else ("cp.async.bulk.tensor", "")
    deferred = id(op.operands[1]) in cx.deferred_bulk_reads
    if not (deferred and _just_stored(op)):  # (that store fenced its writes and synced the role after them)
        cx.fence_async()
        cx.sync()
    lead = w.op(f"icmp eq i32 {cx.thread_index()}, 0", "lead")

    def issue() -> None:
        for p in range(panels):
            x0 = w.op(f"add i32 {elem[0]}, {p * panel_cols}", "x") if p else elem[0]
            s_ = w.op(f"add i32 {src.addr}, {p * panel_bytes}", "src") if p else src.addr
            regs = ", ".join(f"${2 + i}" for i in range(rank))
            w.asm("void", [f"{copy}.{rank}d.global.shared::cta{kind}.bulk_group [$0, {{{regs}}}], [$1];"],
                  ["l", "r"] + ["r"] * rank, [("ptr", tmap), ("i32", s_)] + [("i32", e) for e in [x0, *elem[1:]]])
        bulk_commit(w)
        if not deferred:
            bulk_wait(w, 0, read=True)

    cx.if_then(lead, issue)
    if not deferred:  # else the copy stays in flight: the tile's next write (or the loop's end) waits for it
        cx.sync()


def _just_stored(op: Operation) -> bool:
    """Whether the op right before `op` in its block is the register store into the tile `op` copies."""
    ops = op.parent.ops if op.parent is not None else []
    i = next((k for k, o in enumerate(ops) if o is op), 0)
    prev = ops[i - 1] if i > 0 else None
    return prev is not None and prev.name == "tk.store" and prev.operands[0] is op.operands[1] \
        and not prev.attrs.get(REDUCE_ATTR)


@dataclass
class DeferredBulkReads:
    """A loop that writes a shared staging tile and adds it into global memory (`tk.store %stage, ...` then
    `tma.store %G, %stage {reduce = "add"}`: create-tma's staged reduce-add): the reduce is left in flight,
    so the consumers go on to their next mmas while the copy engine reads the tile and adds it in L2. The
    issuing thread waits for that read right before the tile's next write (backend/rules_memory.py, whose
    store then syncs the role, so nobody overwrites it early) and once after the loop (the block's shared
    memory must outlive the read). A backend.rules.LoopCarry with nothing carried."""

    tiles: set[int]
    hint: ClassVar[str] = "bulk"

    def initial(self) -> list[str]:
        return []

    def enter(self, cx: LoweringContext, phis: list[str]) -> None:
        cx.deferred_bulk_reads |= self.tiles

    def latch(self, cx: LoweringContext) -> list[str]:
        return []

    def leave(self, cx: LoweringContext) -> None:
        cx.wait_for_bulk_reads()
        cx.deferred_bulk_reads -= self.tiles


@loop_hook
def _deferred_bulk_reads(cx: LoweringContext, loop: Operation) -> DeferredBulkReads | None:
    if cx.target != "sm_90a" or cx.role is None:
        return None
    written = {id(o.operands[0]) for o in loop.walk() if o.name == "tk.store" and not o.attrs.get(REDUCE_ATTR)}
    tiles = {id(o.operands[1]) for o in loop.walk()
             if o.name == "tma.store" and o.attrs.get(REDUCE_ATTR) is not None and id(o.operands[1]) in written
             and _innermost_loop(o) is loop}
    return DeferredBulkReads(tiles) if tiles else None


def _innermost_loop(op: Operation) -> Operation | None:
    """The scf.for nearest around `op` (the loop whose iterations the deferred read-wait spans)."""
    block = op.parent
    while block is not None:
        owner = block.parent.parent if block.parent is not None else None
        if owner is None or owner.name == "scf.for":
            return owner
        block = owner.parent
    return None


# --- roles ---------------------------------------------------------------------------------


TURNS = NAMED_BARRIERS["turn"]  # warpgroup w of a consumer role waits for its turn on the turn id w
TURN_THREADS = 256  # a turn barrier: the waiting warpgroup's 128 threads + the 128 arrivals of the previous one


def _turn_barrier(cx: LoweringContext, op: Operation, offset: int) -> str:
    role = cx.role
    if role is None or role.warpgroups < 2:
        raise LoweringError(op.loc, f"backend: '{op.name}' needs a role of two or more warpgroups")
    if role.warpgroups > TURNS.count:
        raise LoweringError(op.loc, f"backend: pingpong over {role.warpgroups} warpgroups needs named barriers "
                                    f"{TURNS.first}..{TURNS.first + role.warpgroups - 1} "
                                    f"({NAMED_BARRIERS.total} exist)")
    w = cx.w
    wg = w.op(f"add i32 {role.wg}, {offset}", "turn") if offset else role.wg
    if offset:
        wg = w.op(f"urem i32 {wg}, {role.warpgroups}", "turn")
    return NAMED_BARRIERS.emit_id(w, "turn", wg, "turn_bar")


@rule("pipe.turn_init")
def _op_turn_init(cx: LoweringContext, op: Operation) -> None:
    """Warpgroup 0 arrives on its own turn barrier: its first turn_wait completes at once."""
    bar = _turn_barrier(cx, op, 0)
    first = cx.w.op(f"icmp eq i32 {cx.role.wg}, 0", "first_wg")  # type: ignore[union-attr]
    cx.if_then(first, lambda: named_barrier_arrive(cx.w, bar, TURN_THREADS))


@rule("pipe.turn_wait")
def _op_turn_wait(cx: LoweringContext, op: Operation) -> None:
    """Wait on this warpgroup's turn barrier: 128 own threads + 128 arrivals of the previous one."""
    named_barrier_sync(cx.w, _turn_barrier(cx, op, 0), TURN_THREADS)


@rule("pipe.turn_pass")
def _op_turn_pass(cx: LoweringContext, op: Operation) -> None:
    named_barrier_arrive(cx.w, _turn_barrier(cx, op, 1), TURN_THREADS)


@rule("tk.role")
def _op_tk_role(cx: LoweringContext, op: Operation) -> None:
    """A branch on the warp index into the role's warps (roles take consecutive warps in IR order):
    warpgroups on sm_90a, with setmaxnreg; `warps = N` on sm_80, which has no setmaxnreg (every thread
    keeps the launch's registers). A TMA producer runs on one thread; a cp.async producer (sm_80) on all
    of its threads, which wait for their last copies before they exit."""
    w = cx.w
    if cx.pending_sync:  # the barriers' init before any use: in every CTA of the cluster where they are shared
        cluster_barrier(w) if cx.multicast > 1 else block_barrier(w)
        cx.pending_sync = False
    kind = str(op.attrs["kind"])
    by_warps = isinstance(op.attrs.get("warps"), int)
    n = int(op.attrs["warps"]) if by_warps else int(op.attrs["warpgroups"])
    n_warps = n if by_warps else n * WARPS_PER_WARPGROUP
    first_warp = cx.next_warp
    cx.next_warp += n_warps
    if (first_warp + n_warps) * WARP > cx.threads:  # a role no thread would run
        raise LoweringError(op.loc, f"backend: role '{op.attrs['kind']}' needs warps {first_warp}.."
                                    f"{first_warp + n_warps - 1} but the block has {cx.threads} threads "
                                    "(plan-occupancy and pipeline disagree)")
    if not by_warps and first_warp % WARPS_PER_WARPGROUP:
        raise LoweringError(op.loc, f"backend: role '{kind}' of warpgroups starts at warp {first_warp}, inside a "
                                    "warpgroup")
    if by_warps:
        warp_all = w.op(f"lshr i32 {cx.tid}, 5", "warp_all")
        ge = w.op(f"icmp uge i32 {warp_all}, {first_warp}", "ge")
        lt = w.op(f"icmp ult i32 {warp_all}, {first_warp + n_warps}", "lt")
    else:
        wg_all = w.op(f"lshr i32 {cx.tid}, 7", "wg")
        first_wg = first_warp // WARPS_PER_WARPGROUP
        ge = w.op(f"icmp uge i32 {wg_all}, {first_wg}", "ge")
        lt = w.op(f"icmp ult i32 {wg_all}, {first_wg + n}", "lt")
    inside = w.op(f"and i1 {ge}, {lt}", "in_role")
    body, after = w.label(f"role_{kind}"), w.label(f"after_{kind}")
    w.cond_br(inside, body, after)
    w.start_block(body)
    regs = int(op.attrs.get("regs") or 0)
    if regs and cx.target == "sm_90a" and not by_warps:  # setmaxnreg.sync.aligned: whole warpgroups only
        which = "dec" if regs < cx.init_cap else "inc"
        w.call("void", f"llvm.nvvm.setmaxnreg.{which}.sync.aligned.u32", [("i32", str(regs))])
    cp_async = kind == "producer" and _copies_by_threads(op)
    ctx = RoleCtx(kind, first_warp // WARPS_PER_WARPGROUP, n if not by_warps else -(-n // WARPS_PER_WARPGROUP),
                  single_thread=(kind == "producer" and not cp_async), warps=n if by_warps else 0)
    ctx.tid = w.op(f"sub i32 {cx.tid}, {first_warp * WARP}", "rtid")
    ctx.wg = w.op(f"lshr i32 {ctx.tid}, 7", "rwg")
    ctx.lane = w.op(f"and i32 {cx.tid}, 31", "lane")
    t128 = w.op(f"and i32 {ctx.tid if by_warps else cx.tid}, 127", "t128")
    ctx.warp = w.op(f"lshr i32 {t128}, 5", "warp")
    cx.role = ctx
    end = w.label(f"end_{kind}")
    if ctx.single_thread:
        lead = w.op(f"icmp eq i32 {ctx.tid}, 0", "leader")
        issue = w.label("issue")
        w.cond_br(lead, issue, end)
        w.start_block(issue)
    with cx.scope():  # a role's thread index differs from the next role's
        for inner in op.body.ops:
            cx.lower_op(inner)
    if cp_async:  # the block's shared memory must outlive this thread's last copies
        cp_async_wait_all(w)
    if cx.staged_stores:  # TMA stores must finish reading shared memory before the block exits
        lead = w.op(f"icmp eq i32 {w.op(f'and i32 {ctx.tid}, 127', 't')}, 0", "wglead")
        cx.if_then(lead, lambda: bulk_wait(w, 0))
        cx.staged_stores = False
    w.br(end)
    w.start_block(end)
    w.emit("ret void")
    cx.role = None
    w.start_block(after)


def _copies_by_threads(role: Operation) -> bool:
    """A role whose copies are cp.async (`pipe.copy {cp_async = true}`): every thread issues its share."""
    return any(o.name == "pipe.copy" and o.attrs.get("cp_async") for o in role.walk())
