"""pipeline: ring-buffer the shared tiles a loop loads by TMA, and split warpgroups into roles.

Rewrites a kernel whose `scf.for` loads shared tiles with `tma.load` and consumes them (tk.mma)
into the warp-specialized form (HOPPER.md §5.4, §7.2; CUTLASS `PipelineTmaAsync`):

* each loaded tile's `tk.alloc` becomes an S-stage ring buffer (`stages=S` in its type);
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
`tma.load`. Loops with another lower bound or step count stages by the iteration number
(k - lo) / step.
"""

from __future__ import annotations

from tkir.diagnostics import CompileError
from tkir.facts import OccupancyPlan, RolePlan
from tkir.ir import Block, Module, Operation, Region, Value
from tkir.passmanager import Options, Pass
from tkir.types import I32, TileType, VectorType

WARPS_PER_WARPGROUP = 4  # HOPPER.md §1.1


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
    one-shot copies in the loop). Shared vectors are not ring-buffered: a
    loop that loads only vectors stays as it is (the backend copies them in place), one that mixes
    them with tiles is refused where the vector is loaded."""
    plan = OccupancyPlan.of(kernel)
    if plan is not None and plan.role("producer") is None:
        return None  # plan-occupancy chose no warp specialization: one role runs the whole block
    for op in kernel.body.ops:
        loads = [i for i in op.body.ops if i.name == "tma.load"] if op.name == "scf.for" else []
        tiles = [i for i in loads if isinstance(i.operands[0].type, TileType)]
        if tiles:
            for v in loads:
                if not isinstance(v.operands[0].type, TileType):
                    raise CompileError(v.loc, f"pipeline: shared vector '{v.operands[0].name}' is loaded in a "
                                              "pipelined loop; only tiles get ring buffers",
                                       hint="load it into a register vector (reg v: rv<...> = X[...]) or "
                                            "before the loop")
            return op
    return None


def _const(blk: Block, anchor: Operation, value: int, name: str) -> Value:
    op = Operation("arith.const", [], [I32], {"value": value}, result_names=[name])
    blk.insert_before(anchor, op)
    return op.result


def _op(blk: Block, anchor: Operation | None, name: str, operands: list[Value], types=(), attrs=None,
        names=None) -> Operation:
    op = Operation(name, operands, list(types), attrs or {}, result_names=names)
    if anchor is None:
        blk.append(op)
    else:
        blk.insert_before(anchor, op)
    return op


def _pipeline(kernel: Operation, loop: Operation) -> None:
    plan = OccupancyPlan.of(kernel)
    stages = loop.attrs.get("stages") or (plan.stages if plan is not None else None)
    if not isinstance(stages, int) or stages < 1:
        raise CompileError(loop.loc, "pipeline: no stage count; add @stages(n) or run plan-occupancy first")
    unplanned = RolePlan(regs=0, warpgroups=1)
    consumer = (plan.role("consumer") if plan is not None else None) or unplanned
    producer = (plan.role("producer") if plan is not None else None) or unplanned
    n_consumers = consumer.warpgroups or 1

    body = kernel.body
    loads = [op for op in loop.body.ops if op.name == "tma.load"]
    lo, hi, step = loop.operands[:3]
    unit = _is_const(lo, 0) and _is_const(step, 1)

    # 1. ring buffers
    buffers: list[Value] = []
    for ld in loads:
        buf = ld.operands[0]
        if buf not in buffers:
            _check_only_used_in_loop(kernel, loop, buf, stages)
            assert isinstance(buf.type, TileType)
            buf.type = buf.type.with_attr("stages", stages)
            buffers.append(buf)

    # 2. barriers, placed right before the loop; constants for stage/phase arithmetic
    bars_t = VectorType("sv", "i64", stages)
    full = _op(body, loop, "pipe.barriers", [], [bars_t], {"count": 1}, ["full"]).result
    empty = _op(body, loop, "pipe.barriers", [], [bars_t],
                {"count": WARPS_PER_WARPGROUP * n_consumers}, ["empty"]).result
    c_stages = _const(body, loop, stages, "nstages")
    c1 = _const(body, loop, 1, "one")
    c2 = _const(body, loop, 2, "two")
    c0 = lo if unit else _const(body, loop, 0, "zero")

    # 3. split: everything from the first register computation on goes to the consumer role;
    # TMA loads outside the loop (e.g. attention's Q tile) get a barrier of their own: the producer
    # issues them before its loop, the consumers wait for them before theirs.
    idx = body.ops.index(loop)
    single = [op for op in body.ops[:idx] if op.name == "tma.load"]
    consumer_ops = [op for i, op in enumerate(body.ops) if i >= idx or _is_register_work(op)]
    for op in consumer_ops + single:
        body.remove(op)

    prod_role = Operation("tk.role", attrs={"kind": _ident("producer"), "warpgroups": producer.warpgroups or 1,
                                            "regs": producer.regs}, regions=[Region()])
    cons_role = Operation("tk.role", attrs={"kind": _ident("consumer"), "warpgroups": n_consumers,
                                            "regs": consumer.regs}, regions=[Region()])
    body.append(prod_role)
    body.append(cons_role)
    for op in consumer_ops:
        cons_role.body.append(op)

    once_bar = None
    if single:
        once_bar = Operation("pipe.barriers", [], [VectorType("sv", "i64", 1)], {"count": 1},
                             result_names=["once"])
        body.insert_before(prod_role, once_bar)
        zero = c0
        _op(prod_role.body, None, "pipe.expect", [once_bar.result, zero],
            attrs={"bytes": sum(int(ld.attrs.get("bytes", ld.operands[0].type.nbytes)) for ld in single)})
        for ld in single:
            _op(prod_role.body, None, "pipe.copy", [ld.operands[0], once_bar.result, zero, *ld.operands[1:]],
                attrs=dict(ld.attrs))
        cons_role.body.ops.insert(0, Operation("pipe.wait", [once_bar.result, zero, zero]))
        cons_role.body.ops[0].parent = cons_role.body

    # 4. producer loop
    pblk = Block()
    k = pblk.add_arg(Value(I32, "k"))
    pblk_ops = Block()  # scratch to build into
    it = _iteration(pblk_ops, None, k, lo, step, c0, unit)
    s = _op(pblk_ops, None, "arith.rem", [it, c_stages], [I32], names=["s"]).result
    q = _op(pblk_ops, None, "arith.div", [it, c_stages], [I32], names=["round"]).result
    ph = _op(pblk_ops, None, "arith.rem", [q, c2], [I32], names=["phase"]).result
    free = _op(pblk_ops, None, "arith.sub", [c1, ph], [I32], names=["free_phase"]).result
    _op(pblk_ops, None, "pipe.wait", [empty, s, free])
    total = sum(int(ld.attrs.get("bytes", ld.operands[0].type.nbytes)) for ld in loads)
    _op(pblk_ops, None, "pipe.expect", [full, s], attrs={"bytes": total})
    mapping: dict[Value, Value] = {loop.body.args[0]: k}
    for ld in loads:
        coords = []
        for c in ld.operands[2:]:
            coords.append(_clone_scalar_chain(c, loop, pblk_ops, mapping))
        view = _op(pblk_ops, None, "pipe.stage", [ld.operands[0], s],
                   [ld.operands[0].type.with_attr("stages", None)], names=[f"{ld.operands[0].name}_s"]).result
        _op(pblk_ops, None, "pipe.copy", [view, full, s, ld.operands[1], *coords], attrs=dict(ld.attrs))
    _op(pblk_ops, None, "scf.yield", [])
    for op in list(pblk_ops.ops):
        pblk_ops.remove(op)
        pblk.append(op)
    ploop = Operation("scf.for", [lo, hi, step], [], {k2: v for k2, v in loop.attrs.items()},
                      regions=[Region(pblk)], loc=loop.loc)
    prod_role.body.append(ploop)

    # 5. consumer loop: wait full, stage views, arrive empty after the last use
    lb = loop.body
    kk = lb.args[0]
    anchor = lb.ops[0]
    cit = _iteration(lb, anchor, kk, lo, step, c0, unit)
    cs = _op(lb, anchor, "arith.rem", [cit, c_stages], [I32], names=["s"]).result
    cq = _op(lb, anchor, "arith.div", [cit, c_stages], [I32], names=["round"]).result
    cph = _op(lb, anchor, "arith.rem", [cq, c2], [I32], names=["phase"]).result
    _op(lb, anchor, "pipe.wait", [full, cs, cph])
    for buf in buffers:
        view = _op(lb, anchor, "pipe.stage", [buf, cs], [buf.type.with_attr("stages", None)],
                   names=[f"{buf.name}_s"]).result
        for op in lb.ops:
            if op.name != "pipe.stage":
                for inner in op.walk():  # uses in nested loops read the same stage
                    inner.operands = [view if v is buf else v for v in inner.operands]
    for ld in loads:
        lb.remove(ld)
    last_use = max(i for i, op in enumerate(lb.ops) if op.name != "pipe.stage" and any(
        isinstance(v.owner, Operation) and v.owner.name == "pipe.stage" for x in op.walk() for v in x.operands))
    # keep one wgmma group in flight: the stage read by iteration k is released after iteration k+1
    # has issued its mma and waited for k's (CUTLASS's K_PIPE_MMAS = 1; HOPPER.md §1.4)
    # (needs two stages or more: with one, the next iteration's load waits for this release)
    defer = stages >= 2
    for op in lb.ops:
        if defer and op.name == "tk.mma" and _feeds_only_yield(op, lb):
            op.attrs["async_groups"] = 1
    arrive = Operation("pipe.arrive", [empty, cs], attrs={"deferred": True} if defer else {})
    lb.ops.insert(last_use + 1, arrive)
    arrive.parent = lb


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


def _iteration(blk: Block, anchor: Operation | None, k: Value, lo: Value, step: Value, c0: Value,
               unit: bool) -> Value:
    """The pipeline's iteration counter `it = (k - lo) / step + base`, marked `iteration = true`.

    Stages and phases follow the iteration number, not the index, so loops with any lower bound and
    positive step share one schedule; `persistent` replaces the base (operand 1) to count across tiles.
    From 0 with step 1 the number is k itself."""
    n = k
    if not unit:
        d = _op(blk, anchor, "arith.sub", [k, lo], [I32], names=["k_off"]).result
        n = _op(blk, anchor, "arith.div", [d, step], [I32], names=["k_iter"]).result
    return _op(blk, anchor, "arith.add", [n, c0], [I32], {"iteration": True}, ["it"]).result


def _ident(name: str):
    from tkir.types import Ident

    return Ident(name)


def _feeds_only_yield(op: Operation, blk: Block) -> bool:
    """An accumulator chain: the mma's result is read only by the loop's yield (or a later mma's
    accumulator operand), so its wgmma group may stay in flight into the next iteration."""
    users = [(u, i) for u in blk.ops for i, v in enumerate(u.operands) if v is op.result]
    return bool(users) and all(u.name == "scf.yield" or (u.name == "tk.mma" and i == 2) for u, i in users)


def _is_register_work(op: Operation) -> bool:
    """Ops that belong to the consumer role: register tiles and vectors (not scalars/allocs)."""
    return any(isinstance(r.type, (TileType, VectorType)) and r.type.space in ("rt", "rv") for r in op.results)


def _clone_scalar_chain(v: Value, loop: Operation, blk: Block, mapping: dict[Value, Value]) -> Value:
    """Re-create in the producer loop the scalar computation of a coordinate defined in the loop."""
    if v in mapping:
        return mapping[v]
    d = v.owner
    if not isinstance(d, Operation) or d.parent is not loop.body:
        return v  # defined outside the loop: visible to both roles
    if not d.name.startswith("arith."):
        raise CompileError(d.loc, f"pipeline: a TMA coordinate depends on '{d.name}', which the producer "
                                  "cannot recompute")
    ops = [_clone_scalar_chain(x, loop, blk, mapping) for x in d.operands]
    new = _op(blk, None, d.name, ops, [d.result.type], dict(d.attrs), [d.result.name])
    mapping[v] = new.result
    return new.result
