"""pipeline: ring-buffer the shared tiles (and vectors) a loop loads by TMA, and split warpgroups into roles.

Rewrites a kernel whose `scf.for` loads shared tiles with `tma.load` and consumes them (tk.mma)
into the warp-specialized form (HOPPER.md §5.4, §7.2; CUTLASS `PipelineTmaAsync`):

* each loaded tile's `tk.alloc` becomes an S-stage ring buffer (`stages=S` in its type), and so does each
  shared vector the loop TMA-loads beside its tiles (FlashAttention-3's backward loads each query block's
  log-sum-exp and dO·O row sums with its Q and dO tiles: `sv<f32, BQ, stages=S>`, one TMA box each);
* two barrier arrays: `%full` (count 1: the producer's arrive.expect_tx; TMA completes the bytes)
  and `%empty` (count = 4 x consumer warpgroups: one arrival per consumer warp);
* `tk.role {kind = producer}`: a copy of the loop that, per iteration it = k + base (the op marked
  `iteration = true`; base is 0 here, `persistent` makes it count across tiles) with stage
  s = it % S and phase p = (it / S) % 2, waits `empty[s]` at parity 1 - p (the buffers start empty), arrives on
  `full[s]` expecting the stage's bytes, and issues one `pipe.copy` per load;
* `tk.role {kind = consumer}`: the original loop, which waits `full[s]` at parity p, reads the
  stage views (`pipe.stage`), and arrives on `empty` after its last use of the stage; the mma gets
  `async_groups = 1` (one wgmma group stays in flight) and the arrive `deferred = true`: it
  releases the previous iteration's stage, whose mma is then known complete; the backend releases
  the last stage after the loop. The ops after the loop (the epilogue) run in the consumer role.

S is the loop's `stages` attribute (`@stages(n)`) or the kernel's `occupancy.stages` chosen by
plan-occupancy (which must run first); roles and their registers come from `occupancy.roles`.
Kernels without such a loop are left unchanged. Assumes `create-tma` turned the loads into
`tma.load`.

sm_80 (no TMA, no transaction counts, no setmaxnreg; CUTLASS's sm90 `KernelCpAsyncWarpSpecialized`
schedule on the mma.sync path): where plan-occupancy planned a producer role of `warps = P`
(`plan-occupancy{producer_warps}`), the loop's `tk.load`s of shared tiles (pipeline-cp-async's
conditions) become `pipe.copy {cp_async = true}`: every producer thread copies its 16-byte chunks and
arrives on `full[s]` when they land, so `full` counts 32 P x copies per stage and there is no
`pipe.expect`; `empty` counts the consumer warps; the mma is synchronous (mma.sync), so each consumer
warp releases the stage right after its last read, not deferred. Roles are sized in warps.

Loops with another lower bound or step count stages by the iteration number
(k - lo) / step.
"""

from __future__ import annotations

from dataclasses import dataclass

from tkir.diagnostics import CompileError
from tkir.facts import OccupancyPlan, RolePlan
from tkir.ir import Block, Module, Operation, Region, Value
from tkir.passes.analysis import copies_to_shared, cp_async_loop_loads
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, Pass
from tkir.target import WARP, WARPS_PER_WARPGROUP
from tkir.types import I32, Ident, TileType, VectorType


class Pipeline(Pass):
    name = "pipeline"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            loop = _pipelinable_loop(kernel)
            if loop is not None:
                _pipeline(kernel, loop)


def _pipelinable_loop(kernel: Operation) -> Operation | None:
    """The first top-level loop that TMA-loads shared tiles, in a kernel that plan-occupancy made warp
    specialized (a planned `compute` role has no producer to issue the copies: its TMA loads stay
    one-shot copies in the loop). The shared vectors such a loop TMA-loads are ring-buffered with its
    tiles; a loop that TMA-loads only vectors stays as it is (the backend copies them in place)."""
    plan = OccupancyPlan.of(kernel)
    if plan is not None and plan.role("producer") is None:
        return None  # plan-occupancy chose no warp specialization: one role runs the whole block
    if _cp_async_plan(plan):  # sm_80: the loads are tk.load, under pipeline-cp-async's conditions
        return next((op for op in kernel.body.ops if op.name == "scf.for"
                     and cp_async_loop_loads(kernel, op) is not None), None)
    for op in kernel.body.ops:
        loads = [i for i in op.body.ops if i.name == "tma.load"] if op.name == "scf.for" else []
        if any(isinstance(i.operands[0].type, TileType) for i in loads):
            return op
    return None


def _cp_async_plan(plan: OccupancyPlan | None) -> bool:
    """A producer role sized in warps: plan-occupancy's sm_80 cp.async producer."""
    prod = plan.role("producer") if plan is not None else None
    return prod is not None and prod.warps is not None


@dataclass(frozen=True)
class _Ring:
    """What both roles share: the stage count, the two barrier arrays, and the constants and loop
    bounds the stage/phase arithmetic reads (all defined in the kernel body before the roles)."""

    stages: int
    full: Value
    empty: Value
    nstages: Value
    one: Value
    two: Value
    zero: Value  # the iteration base (`persistent` replaces it to count across tiles)
    lo: Value
    step: Value
    unit: bool   # the loop runs from 0 with step 1: the iteration number is its index
    cp_async: bool = False  # the producer's threads copy with cp.async (sm_80); else one thread, TMA
    copiers: int = 1        # threads that arrive on `full` per copy (cp.async: the producer's)


def _pipeline(kernel: Operation, loop: Operation) -> None:
    """The rewrite of the module docstring, one step per helper below."""
    plan = OccupancyPlan.of(kernel)
    stages = loop.attrs.get("stages") or (plan.stages if plan is not None else None)
    if not isinstance(stages, int) or stages < 1:
        raise CompileError(loop.loc, "pipeline: no stage count; add @stages(n) or run plan-occupancy first")
    unplanned = RolePlan(regs=0, warpgroups=1)
    consumer = (plan.role("consumer") if plan is not None else None) or unplanned
    producer = (plan.role("producer") if plan is not None else None) or unplanned
    cp_async = _cp_async_plan(plan)
    if cp_async:
        loads = cp_async_loop_loads(kernel, loop) or []
        size = "warps"
    else:
        loads = [op for op in loop.body.ops if op.name == "tma.load"]
        size = "warpgroups"
    n_consumers = (consumer.warps if cp_async else consumer.warpgroups) or 1
    n_producers = (producer.warps if cp_async else producer.warpgroups) or 1

    buffers = _ring_buffers(kernel, loop, loads, stages)
    ring = _barriers(kernel.body, loop, stages, n_consumers, WARP * n_producers if cp_async else 0, len(loads))
    prod_role = Operation("tk.role", attrs={"kind": Ident("producer"), size: n_producers,
                                            "regs": producer.regs}, regions=[Region()])
    cons_role = Operation("tk.role", attrs={"kind": Ident("consumer"), size: n_consumers,
                                            "regs": consumer.regs}, regions=[Region()])
    _split_roles(kernel.body, loop, prod_role, cons_role, ring)
    prod_role.body.append(_producer_loop(loop, loads, ring))
    _consume_stages(loop, loads, buffers, ring)


def _ring_buffers(kernel: Operation, loop: Operation, loads: list[Operation], stages: int) -> list[Value]:
    """Step 1: each tile or vector the loop loads becomes an S-stage ring buffer (`stages=S` in its type)."""
    buffers: list[Value] = []
    for ld in loads:
        buf = ld.operands[0]
        if buf not in buffers:
            _check_only_used_in_loop(kernel, loop, buf, stages)
            buf.type = buf.type.with_attr("stages", stages)
            buffers.append(buf)
    return buffers


def _barriers(body: Block, loop: Operation, stages: int, n_consumers: int, copiers: int = 0,
              copies: int = 0) -> _Ring:
    """Step 2: the `full` and `empty` barrier arrays and the constants of the stage/phase arithmetic,
    right before the loop. `n_consumers` counts warpgroups (TMA) or, on sm_80, where `copiers` producer
    threads each arrive once per copy (`copies` per stage), warps."""
    b = OpBuilder(body, loop)
    bars_t = VectorType("sv", "i64", stages)
    cp_async = copiers > 0
    full = b.op("pipe.barriers", [], "full", {"count": copiers * copies if cp_async else 1}, bars_t)
    consumer_warps = n_consumers if cp_async else WARPS_PER_WARPGROUP * n_consumers
    empty = b.op("pipe.barriers", [], "empty", {"count": consumer_warps}, bars_t)
    nstages, one, two = b.const(stages, "nstages"), b.const(1, "one"), b.const(2, "two")
    lo, _, step = loop.operands[:3]
    unit = _is_const(lo, 0) and _is_const(step, 1)
    zero = lo if unit else b.const(0, "zero")
    return _Ring(stages, full, empty, nstages, one, two, zero, lo, step, unit, cp_async, max(copiers, 1))


def _split_roles(body: Block, loop: Operation, prod_role: Operation, cons_role: Operation, ring: _Ring) -> None:
    """Step 3: everything from the first register computation on goes to the consumer role.

    TMA loads outside the loop (e.g. attention's Q tile) get a barrier of their own: the producer
    issues them before its loop, the consumers wait for them before theirs."""
    idx = body.ops.index(loop)
    single = [op for op in body.ops[:idx] if (copies_to_shared(op) and isinstance(op.operands[0].type, TileType)
                                              if ring.cp_async else op.name == "tma.load")]
    consumer_ops = [op for i, op in enumerate(body.ops) if i >= idx or _is_register_work(op)]
    for op in consumer_ops + single:
        body.remove(op)
    body.append(prod_role)
    body.append(cons_role)
    for op in consumer_ops:
        cons_role.body.append(op)
    if not single:
        return
    count = ring.copiers * len(single) if ring.cp_async else 1
    once = OpBuilder(body, prod_role).op("pipe.barriers", [], "once", {"count": count}, VectorType("sv", "i64", 1))
    prod = OpBuilder(prod_role.body)
    if not ring.cp_async:
        prod.void("pipe.expect", [once, ring.zero], {"bytes": _bytes(single)})
    for ld in single:
        prod.void("pipe.copy", [ld.operands[0], once, ring.zero, *ld.operands[1:]], _copy_attrs(ld, ring))
    cons_role.body.insert(0, Operation("pipe.wait", [once, ring.zero, ring.zero]))


def _producer_loop(loop: Operation, loads: list[Operation], ring: _Ring) -> Operation:
    """Step 4: the producer's copy of the loop: per iteration, wait until stage s is empty, arrive on
    `full[s]` expecting its bytes, and issue one `pipe.copy` per load into the stage's view."""
    blk = Block()
    k = blk.add_arg(Value(I32, "k"))
    b = OpBuilder(blk)
    s, phase = _stage_and_phase(b, k, ring)
    free = b.op("arith.sub", [ring.one, phase], "free_phase")
    b.void("pipe.wait", [ring.empty, s, free])
    if not ring.cp_async:  # cp.async copies arrive themselves, one arrival per producer thread and copy
        b.void("pipe.expect", [ring.full, s], {"bytes": _bytes(loads)})
    mapping: dict[Value, Value] = {loop.body.args[0]: k}
    for ld in loads:
        coords = [_clone_scalar_chain(c, loop, b, mapping) for c in ld.operands[2:]]
        buf = ld.operands[0]
        view = b.op("pipe.stage", [buf, s], f"{buf.name}_s", rtype=buf.type.with_attr("stages", None))
        b.void("pipe.copy", [view, ring.full, s, ld.operands[1], *coords], _copy_attrs(ld, ring))
    b.void("scf.yield", [])
    return Operation("scf.for", loop.operands[:3], [], dict(loop.attrs), regions=[Region(blk)], loc=loop.loc)


def _consume_stages(loop: Operation, loads: list[Operation], buffers: list[Value], ring: _Ring) -> None:
    """Step 5: the original loop becomes the consumer's: wait until stage s is full, read the stage
    views instead of the ring buffers, drop the loads, and arrive on `empty[s]` after the last use."""
    lb = loop.body
    b = OpBuilder(lb, lb.ops[0])
    s, phase = _stage_and_phase(b, lb.args[0], ring)
    b.void("pipe.wait", [ring.full, s, phase])
    for buf in buffers:
        view = b.op("pipe.stage", [buf, s], f"{buf.name}_s", rtype=buf.type.with_attr("stages", None))
        for op in lb.ops:
            if op.name != "pipe.stage":
                for inner in op.walk():  # uses in nested loops read the same stage
                    inner.operands = [view if v is buf else v for v in inner.operands]
    for ld in loads:
        lb.remove(ld)
    last_use = [op for op in lb.ops if op.name != "pipe.stage" and any(
        isinstance(v.owner, Operation) and v.owner.name == "pipe.stage" for x in op.walk() for v in x.operands)][-1]
    # keep one wgmma group in flight: the stage read by iteration k is released after iteration k+1
    # has issued its mma and waited for k's (CUTLASS's K_PIPE_MMAS = 1; HOPPER.md §1.4)
    # (needs two stages or more: with one, the next iteration's load waits for this release)
    defer = ring.stages >= 2 and not ring.cp_async  # mma.sync has read its stage when it returns
    users = _block_users(lb) if defer else {}
    for op in lb.ops:
        if defer and op.name == "tk.mma" and _feeds_only_yield(op, users):
            op.attrs["async_groups"] = 1
    lb.insert_after(last_use, Operation("pipe.arrive", [ring.empty, s], attrs={"deferred": True} if defer else {}))


def _copy_attrs(ld: Operation, ring: _Ring) -> dict[str, object]:
    """The attrs of the pipe.copy that replaces load `ld`: its own, and on sm_80 `cp_async = true`."""
    return {**ld.attrs, "cp_async": True} if ring.cp_async else dict(ld.attrs)


def _stage_and_phase(b: OpBuilder, k: Value, ring: _Ring) -> tuple[Value, Value]:
    """The arithmetic both roles run at the top of each iteration, emitted at `b`'s insertion point:
    the iteration number `it`, its stage s = it % S and the barrier phase (it / S) % 2."""
    it = _iteration(b, k, ring)
    s = b.op("arith.rem", [it, ring.nstages], "s")
    rnd = b.op("arith.div", [it, ring.nstages], "round")
    return s, b.op("arith.rem", [rnd, ring.two], "phase")


def _bytes(loads: list[Operation]) -> int:
    """The bytes a group of TMA loads delivers (what `pipe.expect` waits for)."""
    return sum(int(ld.attrs.get("bytes", ld.operands[0].type.nbytes)) for ld in loads)


def _check_only_used_in_loop(kernel: Operation, loop: Operation, buf: Value, stages: int) -> None:
    """Refuse a ring-buffered tile that is also read or written outside its loop.

    After the rewrite the tile is S stages and only the loop knows which stage holds what, so a use
    before or after the loop would address the whole ring buffer."""
    inside = {id(op) for op in loop.walk()}
    for op in kernel.walk():
        if id(op) not in inside and op is not buf.owner and buf in op.operands:
            line = f" at line {loop.loc.line}" if loop.loc is not None else ""
            raise CompileError(op.loc, f"pipeline: shared tile '{buf.name}' is loaded in the pipelined loop{line} "
                                       f"({stages} stages) and also used outside it",
                               hint="load it again into another shared tile for the use outside the loop, or copy "
                                    "it into a `reg` inside the loop")


def _is_const(v: Value, want: int) -> bool:
    d = v.owner
    return isinstance(d, Operation) and d.name == "arith.const" and d.attrs["value"] == want


def _iteration(b: OpBuilder, k: Value, ring: _Ring) -> Value:
    """The pipeline's iteration counter `it = (k - lo) / step + base`, marked `iteration = true`.

    Stages and phases follow the iteration number, not the index, so loops with any lower bound and
    positive step share one schedule; `persistent` replaces the base (operand 1) to count across tiles.
    From 0 with step 1 the number is k itself."""
    n = k
    if not ring.unit:
        n = b.op("arith.div", [b.op("arith.sub", [k, ring.lo], "k_off"), ring.step], "k_iter")
    return b.op("arith.add", [n, ring.zero], "it", {"iteration": True})


def _block_users(blk: Block) -> dict[int, list[tuple[Operation, int]]]:
    """id(value) -> every (op, operand index) among `blk`'s own ops that reads it (one walk for all
    the block's mmas, not one per mma)."""
    users: dict[int, list[tuple[Operation, int]]] = {}
    for u in blk.ops:
        for i, v in enumerate(u.operands):
            users.setdefault(id(v), []).append((u, i))
    return users


def _feeds_only_yield(op: Operation, users: dict[int, list[tuple[Operation, int]]]) -> bool:
    """An accumulator chain: the mma's result is read only by the loop's yield (or a later mma's
    accumulator operand), so its wgmma group may stay in flight into the next iteration. `users` is
    `_block_users` of the loop body."""
    mine = users.get(id(op.result), [])
    return bool(mine) and all(u.name == "scf.yield" or (u.name == "tk.mma" and i == 2) for u, i in mine)


def _is_register_work(op: Operation) -> bool:
    """Ops that belong to the consumer role: register tiles and vectors (not scalars/allocs)."""
    return any(isinstance(r.type, (TileType, VectorType)) and r.type.space in ("rt", "rv") for r in op.results)


def _clone_scalar_chain(v: Value, loop: Operation, b: OpBuilder, mapping: dict[Value, Value]) -> Value:
    """Re-create in the producer loop the scalar computation of a coordinate defined in the loop."""
    if v in mapping:
        return mapping[v]
    d = v.owner
    if not isinstance(d, Operation) or d.parent is not loop.body:
        return v  # defined outside the loop: visible to both roles
    if not d.name.startswith("arith."):
        raise CompileError(d.loc, f"pipeline: a TMA coordinate depends on '{d.name}', which the producer "
                                  "cannot recompute")
    ops = [_clone_scalar_chain(x, loop, b, mapping) for x in d.operands]
    mapping[v] = b.op(d.name, ops, d.result.name, dict(d.attrs), d.result.type)
    return mapping[v]
