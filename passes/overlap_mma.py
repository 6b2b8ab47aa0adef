"""overlap-mma: software-pipeline a consumer loop so that one iteration's element-wise work runs
while the tensor cores compute (FlashAttention-3's intra-warpgroup overlap, Shah et al. 2024 §3.2).

Matches a loop inside a `tk.role {kind = consumer}` (after `pipeline`) whose body has two chained
matrix products: M1 (`s = q @ k.T`, a fresh accumulator) feeds, through element-wise work W (the
online softmax), the register A operand of M2 (`o += p @ v`), whose accumulator is loop-carried
through a short chain C of element-wise ops (`o *= alpha`). The body is split into two stages:

* stage 1 = M2, its chain C, the `pipe.stage` views only M2 reads and the stage's release
  (`pipe.arrive %empty`): the part that reads the previous iteration's p and alpha;
* stage 0 = everything else (the stage wait, M1, W).

and the loop is rotated by one stage. Iteration j then issues M1 for block j, runs stage 1 of
block j-1 (its M2 is issued right behind M1), and does W for block j while both are in flight:

    prologue (block lo):   wait full; s = M1 {defer_wait}; W            -> p, alpha, stage s
    loop j = lo+step..hi:  wait full; s = M1 {defer_wait}                (block j)
                           o = C(o, alpha_prev); o = M2(p_prev, v[s_prev], o) {defer_wait}
                           W on s (its first use waits for M1 alone: wgmma.wait_group 1)
                           o = tk.mma_wait o; pipe.arrive %empty, s_prev    (block j-1 consumed)
    epilogue (block hi-1): o = C(o, alpha); o = M2(p, v[s], o); o = tk.mma_wait o; pipe.arrive

Values stage 1 reads from stage 0 (p, alpha, the stage index) become extra loop-carried values.
p is computed during W while M2 still reads p_prev's registers: they are different PTX registers,
and ptxas keeps a register an in-flight wgmma reads until the wait_group that covers it.
The rotated loop sits in `scf.if lo < hi` (an empty loop runs neither prologue nor epilogue).
`defer_wait = true` on an mma: commit its wgmma group without waiting; the backend waits at the
first use with `wgmma.wait_group N`, N = the groups committed after it in the same straight-line
code. `tk.mma_wait %x` waits until the mma producing %x has completed.

A loop that matches but would be unsafe to rotate is left unchanged with the reason in its attr
`overlap_skipped` (analysis.rotation_hazard): stage 1 reads a ring-buffer stage view it does not own, which
stage 0 releases (`pipe.arrive`) before the rotated M2 would read it in the next iteration (attention's
dK/dV: dO is read by dV += P^T dO and by dP = dO V^T, tests/data/attention_dkdv.tk), or stage 0 holds a
`deferred` release, which the prologue would put outside the loop.

Loops that do not match are left unchanged (gemm's single accumulator chain, kernels without
roles). On the mma.sync path (sm_80: no roles) it rotates the loops pipeline-cp-async marked
`cp_hold = 1`, whose copies run one iteration less ahead so that the stage the rotated M2 reads is not
refilled under it; mma.sync is synchronous, so `defer_wait` and `tk.mma_wait` lower to nothing there,
and the gain is that M2 of block j-1 and W of block j share a basic block for ptxas to interleave.
Two research switches narrow it: `max_acc_cols=N` rotates only loops whose second
accumulator has at most N columns, `masked=false` leaves loops that mask elements alone (after
split-masks, the last key blocks). Both were needed at first: ptxas serialized the rotated
wgmmas (C7513: the carried bf16 p was unpacked and repacked, copies that count as writes to the
in-flight p @ v's A registers) and the causal mask kept one coordinate register per element live
(spills). With both fixed (backend/llvm_text.py unpack_pair, the mask's per-slot constants in
backend/rules_registers.py) rotating every loop measured faster at head dim 64, 128 and 256,
causal and not (docs/experiments.md). The bf16 conversion of p, read only by the next M2, is placed
after M2's wait (FlashAttention-3's order).

`fence_wait=true` (research, off: measured 0.94-0.99x on attention_fwd.tk, 0.98-1.00x on attention_fp8.tk, H100,
docs/experiments.md): ptxas hoists the steady loop's wait for M2 above W in the SASS (to
W's first row max: W's exponentials then run after M2, not under it; `tkc report` counts them per loop,
tkir/tools/sass_overlap.py), and does not move it above a memory fence. With the switch that wait carries
`fence = true` and the backend puts fence.acq_rel.cta before it (docs/passes.md, "What ptxas makes of the rotation").

split-masks' two loops (lo..split unmasked, split..hi masked, the second starting from the first's
results) are rotated as one software pipeline (`joint=true`): the first block's stage 0 comes from
whichever loop owns block lo (`scf.if lo < split`), then the unmasked steady loop lo+1..split, the
masked steady loop max(split, lo+1)..hi, and one epilogue, so no block drains its pipeline between
them. `joint=false` rotates each loop on its own. Ablation: leave `overlap-mma` out of `--passes`.
"""

from __future__ import annotations

from collections.abc import Callable

from tkir.ir import Block, Module, Operation, Region, Value, clone_op, parent_op
from tkir.ops_pipeline import WAIT_FENCE_ATTR
from tkir.passes.analysis import CP_HOLD_ATTR, RotationPlan, defined_in, match_rotation, rotation_hazard
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, ParamError, Pass, param
from tkir.types import Ident, ScalarType

I1 = ScalarType("i1")
MASK_OPS = frozenset({"tk.select", "tk.mask_causal"})
# Rotate only when P V's accumulator is at most this wide; 0: any. The first attention schedule measured
# rotation slower at head dim 128 and 256 and set 64; that was ptxas serializing the wgmmas (C7513). Without it,
# rotation is faster at every head dim (docs/experiments.md, "Attention forward against SDPA"), hence 0.
MAX_ACC_COLS = 0
# Conversions of M2's register A that run after M2's wait in the steady loop (_late_conversions).
LATE_OPS = frozenset({"tk.cast", "tk.convert_layout"})
# The remark on a loop that matches but is left unrotated because rotating it would be unsafe (the reason).
SKIPPED_ATTR = "overlap_skipped"


class OverlapMma(Pass):
    name = "overlap-mma"
    masked: bool = param(True, "also rotate loops that mask elements (tk.select, tk.mask_causal): after "
                               "split-masks those are the last key blocks (false: leave them unrotated)")
    joint: bool = param(True, "rotate split-masks' unmasked and masked loops as one software pipeline (no "
                              "drain between them); false: each loop on its own")
    max_acc_cols: int = param(MAX_ACC_COLS, "rotate only when the second mma's accumulator has at most this many "
                                            "columns (attention's head dim); 0: any")
    fence_wait: bool = param(False, "research: the steady loop's wait for M2 carries `fence = true`, which the "
                                    "backend lowers as fence.acq_rel.cta before the wgmma.wait_group, so that ptxas "
                                    "keeps W's exponentials between the two waits (without it ptxas hoists the wait "
                                    "to W's first row max); false: the wait alone. Untimed: off")

    def __post_init__(self) -> None:
        if self.max_acc_cols < 0:
            raise ParamError("max_acc_cols", f"overlap-mma: max_acc_cols={self.max_acc_cols} must be >= 0")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            done: set[int] = set()
            for op in list(kernel.walk()):
                if id(op) in done or op.name != "scf.for" or not (_in_consumer_role(op) or op.attrs.get(CP_HOLD_ATTR)):
                    continue
                plan = self._plan(op)
                if plan is None:
                    continue
                blk = op.parent
                k = blk.ops.index(op)
                nxt = blk.ops[k + 1] if k + 1 < len(blk.ops) else None
                if self.joint and nxt is not None and nxt.name == "scf.for" and _pair(op, nxt):
                    plan2 = self._plan(nxt)
                    if plan2 is not None:
                        done.add(id(nxt))
                        _rotate_pair(op, plan, nxt, plan2, self.fence_wait)
                        continue
                _rotate(op, plan, self.fence_wait)

    def _plan(self, loop: Operation) -> RotationPlan | None:
        if not self.masked and _masks(loop):
            return None
        plan = match_rotation(loop)
        if plan is None or (self.max_acc_cols and plan.m2.result.type.cols > self.max_acc_cols):
            return None
        hazard = rotation_hazard(loop, plan)
        if hazard is not None:
            loop.attrs[SKIPPED_ATTR] = hazard
            return None
        return plan


def _masks(loop: Operation) -> bool:
    return any(op.name in MASK_OPS for op in loop.body.ops)


def _in_consumer_role(op: Operation) -> bool:
    p = parent_op(op)
    while p is not None:
        if p.name == "tk.role":
            return str(p.attrs.get("kind")) == "consumer"
        p = parent_op(p)
    return False


def _wait_before_first_use(blk: Block, m1: Operation) -> None:
    """M1 will be left in flight: its result is waited for (tk.mma_wait) right before its first
    reader, and the releases placed between M1 and that reader (the stage M1 read: early-release)
    move behind the wait."""
    i = blk.ops.index(m1)
    first = next((op for op in blk.ops[i + 1:] if op.name != "pipe.arrive"
                  and any(m1.result in x.operands for x in op.walk())), None)
    if first is None:
        return
    between = [op for op in blk.ops[i + 1:blk.ops.index(first)] if op.name == "pipe.arrive"]
    done = Operation("tk.mma_wait", [m1.result], [m1.result.type], result_names=[(m1.result.name or "s") + "_done"])
    blk.insert_before(first, done)
    for op in blk.ops[blk.ops.index(done) + 1:]:
        for x in op.walk():
            x.operands = [done.result if v is m1.result else v for v in x.operands]
    for a in between:
        blk.remove(a)
        blk.insert_after(done, a)


def _wait_and_release(blk: Block, plan: RotationPlan, mapping: dict[Value, Value]) -> Value:
    """After a copy of stage 1 in `blk`: wait for its M2 (tk.mma_wait), then release the stage it
    read (the copy of the arrive). Returns the waited accumulator."""
    issued = mapping[plan.m2.result]
    done = OpBuilder(blk).op("tk.mma_wait", [issued], (plan.m2.result.name or "o") + "_done", rtype=issued.type)
    if plan.arrive is not None:
        blk.append(clone_op(plan.arrive, mapping))
    return done


def _late_conversions(rest: list[Operation], cross: list[Value], term: Operation) -> list[Operation]:
    """The conversions at the end of W that only feed the next iteration's M2 (`bf16(p)` and its
    layout change): in the steady loop they go after M2's wait, as in FlashAttention-3 (convert P
    after `warpgroup_wait<0>`). The register A M2 is still reading and the one being written are then
    the same registers at different times, not two sets live at once."""
    late: list[Operation] = []
    for op in reversed(rest):
        if op.name not in LATE_OPS or len(op.results) != 1:
            continue
        r = op.results[0]
        readers = [x for x in rest if any(r in y.operands for y in x.walk())]
        if r in term.operands:
            continue
        if all(x in late for x in readers) and (r in cross or readers):
            late.insert(0, op)
    return late


class _Prep:
    """A matched loop made ready for rotation: its body split into stage 0 (head = up to M1, rest =
    after it, late = conversions moved behind M2's wait) and stage 1, and the values stage 1 reads
    from stage 0 (`cross`), which the rotated loop carries."""

    def __init__(self, loop: Operation, plan: RotationPlan, fence: bool = False):
        blk = loop.body
        _wait_before_first_use(blk, plan.m1)
        self.loop, self.plan, self.fence = loop, plan, fence
        self.term = blk.terminator
        self.iv, self.carried = blk.args[0], list(blk.args[1:])
        s1_ids = {id(op) for op in plan.stage1}
        if plan.arrive is not None:
            s1_ids.add(id(plan.arrive))
        self.stage0 = [op for op in blk.ops if id(op) not in s1_ids and op is not self.term]
        self.cross: list[Value] = []
        s1_all = plan.stage1 + ([plan.arrive] if plan.arrive is not None else [])
        for op in s1_all:
            for x in op.operands:
                if x is plan.acc_arg or x in self.cross:
                    continue
                if (defined_in(blk, x) and id(x.owner) not in s1_ids) or x is self.iv:
                    self.cross.append(x)
        for op in plan.stage1:
            if op is plan.m2:
                op.attrs.pop("async_groups", None)
                op.attrs["defer_wait"] = True
        plan.m1.attrs.pop("async_groups", None)
        plan.m1.attrs["defer_wait"] = True
        if plan.arrive is not None:
            plan.arrive.attrs.pop("deferred", None)
        self.acc_slot = self.carried.index(plan.acc_arg)
        self.head = self.stage0[:self.stage0.index(plan.m1) + 1]
        self.rest = self.stage0[self.stage0.index(plan.m1) + 1:]
        self.late = _late_conversions(self.rest, self.cross, self.term)

    def prologue(self, blk: Block, iv: Value, inits: list[Value]) -> tuple[list[Value], list[Value]]:
        """Stage 0 of the iteration `iv` appended to `blk`: (the carried values, the accumulator
        untouched since stage 1 has not run; the cross values)."""
        m: dict[Value, Value] = {self.iv: iv, **dict(zip(self.carried, inits, strict=True))}
        for op in self.stage0:
            blk.append(clone_op(op, m))
        yields = [m.get(y, y) for y in self.term.operands]
        yields[self.acc_slot] = inits[self.acc_slot]
        return yields, [m.get(x, x) for x in self.cross]

    def steady(self, lo: Value, hi: Value, step: Value, inits: list[Value], cross_in: list[Value]) -> Operation:
        """The rotated loop lo..hi: M1 of block j, stage 1 of block j-1, the rest of stage 0 of block
        j, M2's wait and release, the late conversions. Its results: the carried values, then the
        cross values of its last iteration."""
        body = Block()
        niv = body.add_arg(Value(self.iv.type, self.iv.name))
        ncarried = [body.add_arg(Value(c.type, c.name)) for c in self.carried]
        nprev = [body.add_arg(Value(x.type, (x.name or "x") + "_prev")) for x in self.cross]
        m = {self.iv: niv, **dict(zip(self.carried, ncarried, strict=True))}
        ms1: dict[Value, Value] = {self.plan.acc_arg: ncarried[self.acc_slot],
                                   **dict(zip(self.cross, nprev, strict=True))}
        for op in self.head:
            body.append(clone_op(op, m))
        for op in self.plan.stage1:
            body.append(clone_op(op, ms1))
        for op in self.rest:
            if op not in self.late:
                body.append(clone_op(op, m))
        o_done = _wait_and_release(body, self.plan, ms1)
        if self.fence:  # overlap-mma{fence_wait}: keep W ahead of the wait in the SASS
            o_done.owner.attrs[WAIT_FENCE_ATTR] = True
        for op in self.late:
            body.append(clone_op(op, m))
        new_yields = [m.get(y, y) for y in self.term.operands]
        new_yields[self.acc_slot] = o_done
        body.append(Operation("scf.yield", new_yields + [m.get(x, x) for x in self.cross]))
        return Operation("scf.for", [lo, hi, step] + inits + cross_in,
                         [v.type for v in self.carried] + [x.type for x in self.cross], dict(self.loop.attrs),
                         regions=[Region(body)],
                         result_names=[c.name for c in self.carried] + [None] * len(self.cross), loc=self.loop.loc)

    def epilogue(self, blk: Block, results: list[Value], cross_out: list[Value]) -> list[Value]:
        """Stage 1 of the last iteration appended to `blk`; the carried values with the accumulator
        waited for."""
        me: dict[Value, Value] = {self.plan.acc_arg: results[self.acc_slot],
                                  **dict(zip(self.cross, cross_out, strict=True))}
        for op in self.plan.stage1:
            blk.append(clone_op(op, me))
        out = list(results)
        out[self.acc_slot] = _wait_and_release(blk, self.plan, me)
        return out


def _guarded(parent: Block, before: Operation, lo: Value, hi: Value, inits: list[Value], results: list[Value],
             fill: Callable[[Block], list[Value]]) -> None:
    """`scf.if lo < hi { fill } else { inits }` inserted before `before`; the uses of `results` (the
    replaced loop's results) read the if's results instead."""
    b = OpBuilder(parent, before)
    nonempty = b.op("arith.cmp", [lo, hi], "nonempty", {"pred": Ident("lt")}, I1)
    then_blk, else_blk = Block(), Block()
    then_blk.append(Operation("scf.yield", fill(then_blk)))
    else_blk.append(Operation("scf.yield", list(inits)))
    guard = Operation("scf.if", [nonempty], [r.type for r in results], {},
                      regions=[Region(then_blk), Region(else_blk)],
                      result_names=[r.name for r in results], loc=before.loc)
    parent.insert_before(before, guard)
    for old, new in zip(results, guard.results, strict=True):
        for op in parent.ops:
            for x in op.walk():
                x.operands = [new if v is old else v for v in x.operands]


def _rotate(loop: Operation, plan: RotationPlan, fence: bool = False) -> None:
    _rotate_prepared(_Prep(loop, plan, fence))


def _rotate_prepared(prep: _Prep) -> None:
    """One loop, rotated: scf.if lo < hi { prologue (block lo); steady lo+1..hi; epilogue }."""
    loop = prep.loop
    lo, hi, step = loop.operands[:3]
    inits = list(loop.operands[3:])
    parent = loop.parent

    def fill(blk: Block) -> list[Value]:
        yields, first_cross = prep.prologue(blk, lo, inits)
        lo1 = OpBuilder(blk).op("arith.add", [lo, step], "lo_next")
        new_loop = prep.steady(lo1, hi, step, yields, first_cross)
        blk.append(new_loop)
        n = len(prep.carried)
        return prep.epilogue(blk, list(new_loop.results[:n]), list(new_loop.results[n:]))

    _guarded(parent, loop, lo, hi, inits, list(loop.results), fill)
    parent.remove(loop)


def _pair(first: Operation, second: Operation) -> bool:
    """Whether `second` continues `first` (split-masks' unmasked and masked loops): it starts where
    `first` ends, with the same step, from `first`'s results in order, right after it."""
    blk = first.parent
    if second.parent is not blk or blk.ops.index(second) != blk.ops.index(first) + 1:
        return False
    return (second.operands[0] is first.operands[1] and second.operands[2] is first.operands[2]
            and list(second.operands[3:]) == list(first.results))


def _rotate_pair(first: Operation, p1: RotationPlan, second: Operation, p2: RotationPlan,
                 fence: bool = False) -> None:
    """Two loops over lo..split and split..hi with the same stage 1 rotated as one software pipeline
    (FA3 runs its masked and unmasked key blocks in one pipeline): the first block's stage 0 from
    whichever loop owns it, the steady loops lo+1..split and max(split, lo+1)..hi, one epilogue.
    The transition costs no drain: the masked loop's first iteration runs stage 1 of the last
    unmasked block under its own M1. Loops whose stages do not line up are rotated each on its own."""
    a, b = _Prep(first, p1, fence), _Prep(second, p2, fence)
    if [x.type for x in a.cross] != [x.type for x in b.cross] or a.acc_slot != b.acc_slot \
            or [c.type for c in a.carried] != [c.type for c in b.carried] \
            or [op.name for op in a.plan.stage1] != [op.name for op in b.plan.stage1]:
        _rotate_prepared(a)
        _rotate_prepared(b)
        return
    lo, split, step = first.operands[:3]
    hi = second.operands[1]
    inits = list(first.operands[3:])
    parent = first.parent
    n = len(a.carried)

    def fill(blk: Block) -> list[Value]:
        ob = OpBuilder(blk)
        in_first = ob.op("arith.cmp", [lo, split], "in_first", {"pred": Ident("lt")}, I1)
        then_blk, else_blk = Block(), Block()
        y1, c1 = a.prologue(then_blk, lo, inits)
        then_blk.append(Operation("scf.yield", y1 + c1))
        y2, c2 = b.prologue(else_blk, lo, inits)
        else_blk.append(Operation("scf.yield", y2 + c2))
        types = [v.type for v in y1 + c1]
        pro = Operation("scf.if", [in_first], types, {}, regions=[Region(then_blk), Region(else_blk)],
                        result_names=[c.name for c in a.carried] + [None] * len(a.cross), loc=first.loc)
        blk.append(pro)
        lo1 = ob.op("arith.add", [lo, step], "lo_next")
        loop1 = a.steady(lo1, split, step, list(pro.results[:n]), list(pro.results[n:]))
        blk.append(loop1)
        start2 = ob.op("arith.max", [split, lo1], "masked_lo")
        loop2 = b.steady(start2, hi, step, list(loop1.results[:n]), list(loop1.results[n:]))
        blk.append(loop2)
        return b.epilogue(blk, list(loop2.results[:n]), list(loop2.results[n:]))

    _guarded(parent, first, lo, hi, inits, list(second.results), fill)
    parent.remove(first)
    parent.remove(second)
