"""pingpong: consumer warpgroups take turns issuing their matrix products, so one warpgroup's
element-wise work (the softmax) runs while the other's wgmmas occupy the tensor cores
(FlashAttention-3 §3.1, "pingpong scheduling"; CUTLASS's `OrderedSequenceBarrier`).

In a `tk.role {kind = consumer}` with two or more warpgroups, every *issue section* of straight-line
code is bracketed by named-barrier turns:

    pipe.turn_wait        // bar.sync  TURN_BARRIER + wg, 2 x 128: wait for this warpgroup's turn
    ... tk.mma ...        // the section: its mmas and what lies between them (stage waits, views,
                          // the accumulator's rescale), up to the last mma before other work
    pipe.turn_pass        // bar.arrive TURN_BARRIER + (wg + 1) % n, 2 x 128: the next one's turn

and `pipe.turn_init` at the role's start lets warpgroup 0 go first. A section ends after an mma
that waits for itself (no `defer_wait`), before any op that reads an mma's result or waits
(`tk.mma_wait`). All consumer warpgroups run the same code with the same loop bounds, so their
k-th sections alternate: the section order, not the execution, is serialised (wgmmas queue on the
tensor cores in issue order). The interpreter runs a role's warpgroups together: the turns are
no-ops there. Kernels with one consumer warpgroup are left unchanged. Ablation: leave `pingpong`
out of `--passes`.
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
        blk.insert_after(ops[end], Operation("pipe.turn_pass"))
        found = True
        i = end + 1
    return found


def _reads_mma(op: Operation, earlier: list[Operation]) -> bool:
    """Whether `op` reads the result of an mma among `earlier` other than as an accumulator."""
    results = {id(e.result) for e in earlier if e.name == "tk.mma"}
    return any(id(v) in results for v in op.operands)
