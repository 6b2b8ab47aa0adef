"""pingpong: consumer warpgroups take turns issuing their matrix products, so one warpgroup's
element-wise work (the softmax) runs while the other's wgmmas occupy the tensor cores
(FlashAttention-3 §3.1, "pingpong scheduling"; CUTLASS's `OrderedSequenceBarrier`).

In a `tk.role {kind = consumer}` with two or more warpgroups, every *issue section* of straight-line
code is bracketed by named-barrier turns:

    pipe.turn_wait        // bar.sync  TURN_BARRIER + wg, 2 x 128: wait for this warpgroup's turn
    ... tk.mma ...        // the section: its mmas and what lies between them (stage waits, views,
                          // the accumulator's rescale), up to the last mma before other work
    pipe.turn_pass        // bar.arrive TURN_BARRIER + (wg + 1) % n, 2 x 128: the next one's turn

and `pipe.turn_init` at the role's start lets warpgroup 0 go first. A section ends at an mma that
waits for itself, before any op that reads an mma's result or waits (`tk.mma_wait`); such an mma is
made `defer_wait` and its wait (`tk.mma_wait`) placed after `pipe.turn_pass`, so a warpgroup hands
over the turn once its wgmmas are issued, not once they complete. Only blocks with element-wise work
on an mma's result (the softmax) are bracketed: a GEMM main loop, whose accumulator feeds only the
next mma, has nothing to hide under the other warpgroup's mmas and is left alone. All consumer
warpgroups run the same code with the same loop bounds, so their k-th sections alternate: the section
order, not the execution, is serialised (wgmmas queue on the tensor cores in issue order). The
interpreter runs a role's warpgroups together: the turns are no-ops there. Kernels with one consumer
warpgroup are left unchanged. Measured on the H200 with overlap-mma (docs/experiments.md, "Attention forward"):
+0-9% on attention, most where the softmax weighs most (causal, head dim 64 and 256). Ablation:
leave `pingpong` out of `--passes`.
"""

from __future__ import annotations

from tkir.ir import Block, Module, Operation
from tkir.passmanager import Options, Pass

# Ops that may sit inside an issue section between two mmas (no register work on mma results).
SECTION_OPS = frozenset({"pipe.wait", "pipe.stage", "tk.fill", "tk.mul", "tk.add", "tk.sub", "tk.div"})


class Pingpong(Pass):
    name = "pingpong"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            for role in kernel.body.ops:
                if role.name == "tk.role" and str(role.attrs.get("kind")) == "consumer" \
                        and int(role.attrs.get("warpgroups") or 1) >= 2:
                    if _bracket(role.body):
                        role.body.insert(0, Operation("pipe.turn_init"))


def _bracket(blk: Block) -> bool:
    """Bracket the issue sections of `blk` and of every nested block; True if any was found."""
    found = False
    for op in list(blk.ops):
        for r in op.regions:
            found |= _bracket(r.block)
    if not _elementwise_on_mma(blk):
        return found
    ops = list(blk.ops)
    i = 0
    while i < len(ops):
        if ops[i].name != "tk.mma":
            i += 1
            continue
        start = end = i
        j = i
        while ops[j].name == "tk.mma" and ops[j].attrs.get("defer_wait"):
            # extend over section ops to the next mma
            k = j + 1
            while k < len(ops) and ops[k].name in SECTION_OPS and not _reads_mma(ops[k], ops[start:k]):
                k += 1
            if k < len(ops) and ops[k].name == "tk.mma":
                j = end = k
            else:
                break
        blk.insert_before(ops[start], Operation("pipe.turn_wait"))
        turn_pass = Operation("pipe.turn_pass")
        blk.insert_after(ops[end], turn_pass)
        last = ops[end]
        if not last.attrs.get("defer_wait") and not last.attrs.get("async_groups"):
            _wait_after(blk, last, turn_pass)
        found = True
        i = end + 1
    return found


def _wait_after(blk: Block, mma: Operation, anchor: Operation) -> None:
    """`mma` waited for itself: commit it without waiting and wait (tk.mma_wait) after `anchor`."""
    mma.attrs["defer_wait"] = True
    done = Operation("tk.mma_wait", [mma.result], [mma.result.type],
                     result_names=[(mma.result.name or "acc") + "_done"])
    blk.insert_after(anchor, done)
    for op in blk.ops[blk.ops.index(done) + 1:]:
        for x in op.walk():
            x.operands = [done.result if v is mma.result else v for v in x.operands]


def _elementwise_on_mma(blk: Block) -> bool:
    """Whether some op of `blk` other than an mma (as its accumulator), a wait or the terminator reads
    an mma result of `blk` (directly or through tk.mma_wait): the work the turns let overlap."""
    results = {id(op.result) for op in blk.ops if op.name == "tk.mma"}
    for op in blk.ops:
        if op.name == "tk.mma_wait" and id(op.operands[0]) in results:
            results.add(id(op.result))
    for op in blk.ops:
        if op.name in ("tk.mma_wait", "scf.yield"):
            continue
        for x in op.walk():
            for k, v in enumerate(x.operands):
                if id(v) in results and not (x.name == "tk.mma" and k == 2):
                    return True
    return False


def _reads_mma(op: Operation, earlier: list[Operation]) -> bool:
    """Whether `op` reads the result of an mma among `earlier` other than as an accumulator."""
    results = {id(e.result) for e in earlier if e.name == "tk.mma"}
    return any(id(v) in results for v in op.operands)
