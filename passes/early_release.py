"""early-release: one full/empty barrier ring per loaded tile, so each stage of a tile is released
by the mma that read it last, not when the whole iteration is done (FlashAttention-3 §3.1: K is
released as soon as Q K^T completes, V after P V).

Runs right after `pipeline`, which gives a loop one `%full`/`%empty` pair for all its tiles. When
the loop loads two or more tiles, this pass rewrites both roles:

* a `%full_<t>` (count 1) and `%empty_<t>` (the consumer warps) barrier array per tile t;
* producer: per tile, `pipe.wait %empty_<t>, s, 1 - phase`, `pipe.expect %full_<t>, s {bytes = its
  bytes}` and its copy completing on `%full_<t>` (a tile whose stage is free is loaded without
  waiting for the others);
* consumer: `pipe.wait %full_<t>, s, phase {tile = "<t>"}` right before the tile's stage view (moved
  to its first use), and `pipe.arrive %empty_<t>, s {tile = "<t>"}` after the tile's last reader:
  right after it when that is a synchronous mma (its wgmma group is waited for at issue), deferred
  to the next iteration (as `pipeline` does for the whole stage) when it is the loop's
  accumulating mma with a group left in flight. At most one tile may need the deferred release.

`overlap-mma`, which runs later, moves each tile's wait and release with the mma that reads it.
Loops with one tile, or that do not have this shape, are left unchanged. Ablation: leave
`early-release` out of `--passes`.
"""

from __future__ import annotations

from tkir.ir import Module, Operation, Value
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, Pass
from tkir.types import VectorType


class EarlyRelease(Pass):
    name = "early-release"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            roles = {str(op.attrs.get("kind")): op for op in kernel.body.ops if op.name == "tk.role"}
            if "producer" in roles and "consumer" in roles:
                _split(kernel, roles["producer"], roles["consumer"])


def _loop_of(role: Operation, full: Value) -> Operation | None:
    for op in role.body.ops:
        if op.name == "scf.for" and any(x.name.startswith("pipe.") and full in x.operands for x in op.body.ops):
            return op
    return None


def _reads_stage_now(op: Operation) -> bool:
    """A last reader after which the stage may be released at once: a synchronous mma (its wgmma group
    waited for at issue) or a shared vector's load into registers (ld.shared, done before the arrive)."""
    return op.name == "tk.mma" or (op.name == "tk.load" and bool(op.results)
                                   and isinstance(op.operands[0].type, VectorType))


def _split(kernel: Operation, producer: Operation, consumer: Operation) -> None:
    bars = {op.result.name: op for op in kernel.body.ops if op.name == "pipe.barriers"}
    full_op, empty_op = bars.get("full"), bars.get("empty")
    if full_op is None or empty_op is None:
        return
    full, empty = full_op.result, empty_op.result
    ploop, cloop = _loop_of(producer, full), _loop_of(consumer, full)
    if ploop is None or cloop is None:
        return
    pb, cb = ploop.body, cloop.body
    copies = [op for op in pb.ops if op.name == "pipe.copy" and op.operands[1] is full]
    tiles: list[Value] = []
    for c in copies:
        view = c.operands[0].owner
        if not (isinstance(view, Operation) and view.name == "pipe.stage"):
            return
        if view.operands[0] not in tiles:
            tiles.append(view.operands[0])
    if len(tiles) < 2:
        return
    pwait = [op for op in pb.ops if op.name == "pipe.wait" and op.operands[0] is empty]
    pexp = [op for op in pb.ops if op.name == "pipe.expect" and op.operands[0] is full]
    cwait = [op for op in cb.ops if op.name == "pipe.wait" and op.operands[0] is full]
    carr = [op for op in cb.ops if op.name == "pipe.arrive" and op.operands[0] is empty]
    if len(pwait) != 1 or len(pexp) != 1 or len(cwait) != 1 or len(carr) != 1:
        return
    # the consumer's last reader of each tile, and whether its release must be deferred
    views = {t: [op for op in cb.ops if op.name == "pipe.stage" and op.operands[0] is t] for t in tiles}
    if any(len(v) != 1 for v in views.values()):
        return
    last: dict[Value, Operation] = {}
    for t in tiles:
        v = views[t][0].result
        readers = [op for op in cb.ops if any(v in x.operands for x in op.walk())]
        if not readers:
            return
        last[t] = readers[-1]
    deferred = [t for t in tiles if last[t].name == "tk.mma" and last[t].attrs.get("async_groups")]
    if len(deferred) > 1 or any(not _reads_stage_now(last[t]) for t in tiles if t not in deferred):
        return

    # new barrier arrays, one pair per tile, next to the old ones
    kb = OpBuilder(kernel.body, full_op)
    ring: dict[Value, tuple[Value, Value]] = {}
    for t in tiles:
        f = kb.op("pipe.barriers", [], f"full_{t.name}", dict(full_op.attrs), full_op.result.type)
        e = kb.op("pipe.barriers", [], f"empty_{t.name}", dict(empty_op.attrs), empty_op.result.type)
        ring[t] = (f, e)

    # producer: wait / expect / copy per tile
    w0, x0 = pwait[0], pexp[0]
    s, free = w0.operands[1], w0.operands[2]
    for c in copies:
        t = c.operands[0].owner.operands[0]
        f, e = ring[t]
        view = c.operands[0].owner
        pb.insert_before(view, Operation("pipe.wait", [e, s, free]))
        pb.insert_before(view, Operation("pipe.expect", [f, s], attrs={"bytes": int(c.attrs.get("bytes", 0))}))
        c.operands[1] = f
    pb.remove(w0)
    pb.remove(x0)

    # consumer: a wait before each tile's view (moved to its first use), a release after its last reader
    cw, ca = cwait[0], carr[0]
    cs, phase = cw.operands[1], cw.operands[2]
    for t in tiles:
        f, e = ring[t]
        view = views[t][0]
        first = next(op for op in cb.ops if any(view.result in x.operands for x in op.walk()))
        cb.remove(view)
        cb.insert_before(first, view)
        cb.insert_before(view, Operation("pipe.wait", [f, cs, phase], attrs={"tile": t.name}))
        attrs = {"tile": t.name, **({"deferred": True} if t in deferred else {})}
        cb.insert_after(last[t], Operation("pipe.arrive", [e, ca.operands[1]], attrs=attrs))
    cb.remove(cw)
    cb.remove(ca)
    kernel.body.remove(full_op)
    kernel.body.remove(empty_op)
