"""prefetch-loads: a loop's global register loads issued one iteration ahead (register double buffering).

Matches each `scf.for` whose body (its top-level ops) holds a `tk.load` from a global tensor into a register tile
or vector that

* reads a tensor the kernel never stores to (so an earlier read sees the same data),
* has every coordinate defined outside the loop except the last (the column chunk), which is the loop's induction
  variable itself: the loop walks a row in chunks. A loop over rows (a grid-stride loop: examples/layernorm_bwd.tk,
  coarsen-rows' loops) is left alone; prefetching its next row measured 2-3% slower on the H100 (layernorm_bwd at
  N = 4096, docs/experiments.md), where each iteration's row is spread over the block's warps,
* is read in whole 16-byte pieces (FULL_VECTOR_BYTES: the launch's variant for rows that are not 16-byte aligned
  reads narrower pieces, many more load instructions a chunk, and is issue-bound: examples/softmax_vocab.tk at
  V = 50257 ran at half the speed with the prefetch), and
* sits in a loop that also reduces across a row (`tk.reduce`): the loop is a chain of a memory round trip,
  then shuffles and a block barrier, then the next round trip, which ptxas does not overlap (it does not move a
  load across the barrier or the back edge).

Each such load `%x = tk.load %G, ..., %i, ...` becomes a value carried by the loop:

    %x0 = tk.load %G, ..., %lb, ...                       // before the loop: the first iteration's data
    %r..., %x_last = scf.for %lb, %ub, %st, ..., %x0 {
      ^(%i, ..., %x)                                      // the uses of the load read the carried %x
      %i_next = arith.add %i, %st
      %x_next = tk.load %G, ..., %i_next, ...             // the next iteration's, first in the body
      ...
      scf.yield ..., %x_next
    }

so the next chunk's round trip runs under this chunk's reductions. The load one past the last iteration (and the
one before a loop that runs no iteration) stays inside the tensor's bounds check: the backend tests a coordinate
it cannot prove in bounds (tkir/bounds.py), and `%i + %st` past the end is not provable, so the access is
masked off, not made. Split loops (split-masks runs later) hand the carried value from one part to the next.

Registers: each prefetched tile is live across the loop once more. The pass runs after plan-occupancy and adds
the tiles' registers (their layout's fragment) to the plan's peak (passes/analysis.py plan_with_more_registers); a
loop is rewritten only where that fits a thread, where the tiles take at most `max_regs` registers a thread, where
the blocks per SM the larger count leaves still hold more bytes in flight than before (2 x blocks after > blocks
before: each block now has two chunks in flight) and at least what `@blocks_per_sm` asks for. The plan is then
updated (registers, budget, blocks per SM), so the backend asks ptxas for what it holds. Loops left alone get
`prefetch_skipped` on the kernel (the reason). One-role plans only: a warp-specialized or clustered block is left
alone.

Why: a cross-entropy or argmax over a 128k vocabulary written plainly (one row a block, a loop over 2048- or
4096-wide chunks with row reductions in it) issued each chunk's loads only after the previous chunk's reductions:
examples/user/row_argmax.tk ran at 0.80-0.84x torch.argmax at V = 128256 (H100, docs/experiments.md,
"Prefetching a chunk loop's loads").

Ablation: `--pass-edits=-prefetch-loads` (or `@passes(-prefetch-loads)`); `prefetch-loads{max_regs=0}` rewrites
nothing. The kernel attr `prefetched_loads` counts the loads rewritten.
"""

from __future__ import annotations

from tkir.facts import OccupancyPlan, requested_blocks_per_sm
from tkir.ir import Block, Module, Operation, Value, replace_all_uses
from tkir.layout import layout_of, regs_per_thread, vector_access_bytes
from tkir.passes.analysis import classify_copy, plan_with_more_registers, written_globals
from tkir.passmanager import Options, Pass, param
from tkir.types import I32, TileType, VectorType

DONE_ATTR = "prefetched_loads"      # on the kernel: how many loads are issued an iteration ahead
SKIPPED_ATTR = "prefetch_skipped"   # on the kernel: why a loop with such loads was left alone
FULL_VECTOR_BYTES = 16              # ld.global.v4.b32: only loads in whole 16-byte pieces are prefetched
DEFAULT_MAX_REGS = 16               # a chunk of 16 bf16 elements a thread per prefetched tile (2048 columns over 4
#                                     warps) is 8 registers; 16 leaves room for two such tiles


class PrefetchLoads(Pass):
    name = "prefetch-loads"
    max_regs: int = param(DEFAULT_MAX_REGS, "the most registers a thread the prefetched tiles of one loop may take "
                                            "(0: rewrite nothing)")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            stored = written_globals(kernel)
            done, skipped = 0, []
            for loop in [op for op in kernel.walk() if op.name == "scf.for"]:
                loads = _candidates(loop, stored)
                if not loads:
                    continue
                names = ", ".join(sorted({op.operands[0].name or "?" for op in loads}))
                regs = sum(_regs(op.result.type) for op in loads)
                if regs > self.max_regs:
                    skipped.append(f"a loop's loads of {names} would hold {regs} more registers a thread (more "
                                   f"than {self.max_regs})")
                    continue
                plan = OccupancyPlan.of(kernel)
                grown, why = plan_with_more_registers(plan, regs)
                requested = requested_blocks_per_sm(kernel)
                if grown is not None and requested is not None and grown.blocks_per_sm < requested:
                    grown, why = None, f"fewer blocks per SM than the {requested} the kernel asks for"
                if grown is not None and 2 * grown.blocks_per_sm <= plan.blocks_per_sm:
                    grown, why = None, (f"the plan would go from {plan.blocks_per_sm} blocks per SM to "
                                        f"{grown.blocks_per_sm} (the bytes in flight per SM would not grow)")
                if grown is None:
                    skipped.append(f"a loop's loads of {names}: {why}")
                    continue
                for op in loads:
                    _rotate(loop, op)
                kernel.attrs[OccupancyPlan.ATTR] = grown.to_attr()
                done += len(loads)
            if done:
                kernel.attrs[DONE_ATTR] = done
            if skipped:
                kernel.attrs[SKIPPED_ATTR] = "; ".join(skipped)


def _regs(t: TileType | VectorType) -> int:
    """32-bit registers a thread holds of register tile or vector `t` (its layout's fragment)."""
    lay = layout_of(t)
    shape = t.shape if isinstance(t, TileType) else (t.n,)
    return regs_per_thread(lay, t.dtype, shape)


def _candidates(loop: Operation, stored: set[int]) -> list[Operation]:
    """The loop body's top-level global register loads that can be issued an iteration ahead."""
    body = loop.regions[0].block
    if not any(op.name == "tk.reduce" for op in loop.walk()):
        return []
    iv = body.args[0]
    inside = {id(a) for a in body.args}
    for op in loop.walk():
        inside.update(id(r) for r in op.results)
    inside.discard(id(iv))
    out = []
    for op in body.ops:
        c = classify_copy(op)
        if op.name != "tk.load" or c is None or c[0] != "register" or id(c[1]) in stored:
            continue
        if not isinstance(op.result.type, (TileType, VectorType)):
            continue
        if any(id(v) in inside for v in op.operands):
            continue
        if op.operands[-1] is not iv or iv in op.operands[1:-1]:
            continue  # not a walk along the row in chunks (a loop-invariant load, or a loop over rows)
        if vector_access_bytes(layout_of(op.result.type), op.result.type.dtype) != FULL_VECTOR_BYTES:
            continue  # narrower pieces (an unaligned-rows variant): instruction-bound, not latency-bound
        out.append(op)
    return out


def _rotate(loop: Operation, load: Operation) -> None:
    """Carry `load`'s value through `loop`, loaded one iteration ahead (the module docstring's rewrite)."""
    body: Block = loop.regions[0].block
    iv = body.args[0]
    lb, step = loop.operands[0], loop.operands[2]
    t = load.result.type
    name = load.result.name or "x"
    first = Operation("tk.load", [lb if v is iv else v for v in load.operands], [t], dict(load.attrs),
                      result_names=[f"{name}_first"], loc=load.loc)
    loop.parent.insert_before(loop, first)
    carried = body.add_arg(Value(t, name))
    replace_all_uses(loop, load.result, carried)
    body.remove(load)
    nxt = Operation("arith.add", [iv, step], [I32], {}, result_names=[f"{iv.name or 'i'}_next"], loc=load.loc)
    load.operands = [nxt.result if v is iv else v for v in load.operands]
    load.results[0].name = f"{name}_next"
    body.insert(0, nxt)
    body.insert(1, load)
    term = body.terminator
    term.operands = [*term.operands, load.result]
    loop.operands = [*loop.operands, first.result]
    loop.results.append(Value(t, f"{name}_last", loop))
