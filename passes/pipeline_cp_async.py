"""pipeline-cp-async: the multi-stage cp.async main loop of the mma.sync path (sm_80).

Ampere has no TMA and no mbarrier transaction counts: every thread copies its share of a tile with
`cp.async` and waits for its own copies by group (PTX ISA §9.7.9.25). CUTLASS's sm80 mainloop
(`MmaMultistage`) keeps S - 1 k-tiles in flight that way; this pass writes that schedule into the IR
for a top-level `scf.for` of a kernel on the mma.sync path (infer-layouts wrote `warps = W`, no
`tk.role`) that copies shared tiles from global memory with `tk.load` and reads them with `tk.mma`:

* each loaded tile's (or shared vector's) `tk.alloc` becomes an S-stage ring buffer (`stages=S` in its type);
* a prologue before the loop issues the copies of iterations 0 .. S-2 into stages 0 .. S-2, each
  iteration's copies one group (`pipe.async_commit %s`), each copy conditional on the iteration existing
  (`pipe.async_copy %pre0, ...`: index < upper bound);
* the loop body starts with `pipe.async_wait {pending = S-2}` (its own group of iteration it has
  landed: S-1 + it groups were committed, at most S-2 newer ones may be in flight) and a block
  barrier (everybody's copies are visible, and everybody is done with iteration it-1), then issues
  the copies of iteration it+S-1 into stage (it+S-1) % S = (it-1) % S, the stage iteration it-1
  read, conditional on that iteration existing (past the last one the group stays empty, so the count
  stays right), commits, and reads stage it % S through `pipe.stage` views where it read the tiles.

So copies run S-1 iterations ahead of the math, and every iteration has one barrier. The copies are
issued before the math of the iteration, not after it: with S = 2 a copy issued after the math would
be waited for right away. S is the loop's `stages` (`@stages(n)`, or plan-occupancy's choice, which
must run first); S = 1 leaves the loop as it is (the backend's load, wait, sync, compute, sync).
The iteration number is (k - lo) / step, so a loop that split-masks later splits in two (the
second continuing from the first's k) keeps one schedule, and the copies' condition compares the
next index with the loop's upper bound as it is now, which split-masks keeps in both halves.

Last, every loop whose source asks for S >= 2 stages (`@stages(S)`, not plan-occupancy's choice) and that neither
`pipeline` nor this pass ring-buffered is a located error (`check_stages_honoured`): a requested depth is not
dropped silently. In the sm_90a compute roles the `hopper` setting leaves one-buffered (hopper=false; or
unset, for `--no-tma` kernels that did not ask for no producer) it is a located StagesWarning instead.

A loop keeps the one-buffer schedule (and, where it asked for S >= 2, gets the error above) when a loaded
tile is also used outside the loop, read before its load in the body, written by anything else, loaded
twice, or when the body loads in a nested region, loads a shared vector that is not whole 16-byte cp.async chunks,
or computes a coordinate from
something other than the loop index, loop-invariant values and scalar arithmetic; also when the step is not a positive
constant. Kernels with roles (the sm_90a warp-specialized pipeline) are not touched, nor sm_90a kernels
in general, except those planned as one compute role whose source asks for no producer warpgroup
(`@warpgroups(consumers=N, producers=0)`; `pipeline-cp-async{hopper=true}` takes every sm_90a compute
role, e.g. `--no-tma` kernels; `hopper=false` none): the same schedule, with a proxy fence after each
wait (the backend's pipe.async_wait), because wgmma reads shared memory through the async proxy. On
the H200 that is ThunderKittens' Based shape, two one-warpgroup blocks per SM: examples/based.tk at
B = H = 16 went from 139.5 / 155.1 TFLOP/s (warp-specialized, one block per SM) to 209.9 / 217.9 at
N = 4096 / 16384 (docs/experiments.md).

`hold` (unset by default: 1 on the mma.sync path for a loop overlap-mma will rotate, at S >= 3, when the
plan's predicted registers plus the carried P fit 255): the rotated `o += p @ v` of block j-1 reads its
V stage during iteration j, so that stage is held an iteration longer: the prologue issues S-2
iterations, the wait is `pending = S-3`, copies run S-2 iterations ahead, and the loop is marked
`cp_hold = 1` (what overlap-mma rotates on sm_80). `hold=0` is the rotation's ablation.

`rotate` (default ROTATE_UNITS = 1) marks a loop indexed from 0 by 1 whose body is the wait,
the copies and one `tk.mma` of two stage views `frag_rotate = R` when one k16 step of fragments fits the
plan's registers (`_rotatable`): the backend moves the wait and the block barrier R mma.sync units before
the end of the k-tile's mma and carries the next k-tile's first k16 step of fragments over the back edge
(CUTLASS MmaMultistage's order; backend/rules_sm80.py FragRotation). The IR's meaning is unchanged (the
interpreter runs the marked loop as before). H200, 4096^3: 256 x 128 x 64 S4 389.9 -> 410.6 TFLOP/s.
`rotate=0` is the ablation. `a_ahead` (unset: true where two k16 steps of a shared A fit the plan's
registers, `_a_ahead_fits`) writes `a_ahead` on the loop's `tk.mma`: the backend loads a step's A with the
unit `ahead` of its first instead of right before it (256 x 128 x 64 S4: 411.4 -> 423.0 TFLOP/s).

`step_ahead` (unset: true) sets both for a rotatable loop whose two k16 steps of shared fragments
fit the registers ptxas may use at the blocks per SM the backend asks for (`_step_units`): `frag_rotate` and
`frag_ahead` = the units of one k16 step, so every fragment is loaded a whole step before its mma.syncs and the
next k-tile's first step right after the barrier a whole step before the end (CUTLASS MmaMultistage's
double-buffered warp fragments). H200, 4096^3 (docs/experiments.md, "sm_80 GEMM: fragments a whole k16 step
ahead"): gemm.tk's sm_80 default
447.9 -> 486.7 TFLOP/s, 128 x 256 x 32 S4 432.1 -> 481.6, 256 x 128 x 64 S4 449.6 -> 480.5. An explicit
`rotate` or `fragments_ahead` wins for its own quantity; `step_ahead=false` is the ablation.

`fragments_ahead` (unset by default) writes `frag_ahead = n` on the loop's `tk.mma`s: how many units
(k16 step x two n8 blocks) ahead of their mma.sync the backend loads ldmatrix fragments (its default is
backend/rules_sm80.py FRAG_AHEAD_UNITS = 1; 0: right before their own mma.sync, the ablation; 8 at
gemm's BK = 64: a whole k16 step ahead). Leaving the pass out of `--passes` is the ablation of the
whole schedule.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from tkir.diagnostics import CompileError, TkirWarning
from tkir.facts import OccupancyPlan
from tkir.ir import Module, Operation, Value
from tkir.launch_bounds import streaming_reg_cap
from tkir.layout import layout_of
from tkir.passes.analysis import (
    CP_HOLD_ATTR,
    CpAsyncMatch,
    const_int,
    copies_to_shared,
    match_cp_async,
    mma_sync_fragment_regs,
    no_producer,
    rotatable,
)
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, ParamError, Pass, param
from tkir.target import (
    CP_ASYNC_BYTES,
    MAX_REGS_PER_THREAD,
    MMA_A_WORDS,
    MMA_B_UNIT_WORDS,
    MMA_M,
    MMA_N,
    REG_ALLOC_UNIT,
    REGS_PER_SM,
)
from tkir.types import Ident, ScalarType, dtype_bytes, is_shared

I1 = ScalarType("i1")
# `rotate`: the default count of units before the end of the mma at which the rotated loop waits (0: off)
ROTATE_UNITS = 1
# registers the carried fragments must leave free beyond the plan's budget: the backend's
# FRAG_SLACK_REGS (backend/rules_sm80.py), the ldmatrix addresses and ptxas's temporaries
ROTATE_SLACK_REGS = 24
# step_ahead: at most this many 16-byte cp.async rounds per thread per iteration. Measured: 12 (256 x 128 x 64
# and 128 x 256 x 64 on 8 warps) fit without spills; 20 (gemm.tk BM = 64: 64 x 256 x 64 on 4 warps) took 255
# registers, ran 347.1 against 353.5 TFLOP/s without step_ahead on the H200, and spilled 4 bytes with the
# split cp.async addresses of backend/rules_sm80.py cp_async_rows
STEP_AHEAD_MAX_COPY_ROUNDS = 12
A_AHEAD_BACKEND_REGS = 8  # the backend's own rule loads a step of A ahead up to this (rules_sm80.A_AHEAD_MAX_REGS)


class PipelineCpAsync(Pass):
    name = "pipeline-cp-async"
    fragments_ahead: int | None = param(None, "units (k16 step x two n8 blocks) ahead of their mma.sync that the "
                                              "backend loads ldmatrix fragments, written as frag_ahead on the loop's "
                                              "tk.mma (unset: a whole k16 step where step_ahead applies, else the "
                                              "backend's default, 1; 0: right before their own)")

    def __post_init__(self) -> None:
        if self.fragments_ahead is not None and self.fragments_ahead < 0:
            raise ParamError("fragments_ahead", f"pipeline-cp-async: fragments_ahead={self.fragments_ahead} "
                                                "must be >= 0")
        if self.rotate is not None and self.rotate < 0:
            raise ParamError("rotate", f"pipeline-cp-async: rotate={self.rotate} must be >= 0")
        if self.hold is not None and self.hold not in (0, 1):
            raise ParamError("hold", f"pipeline-cp-async: hold={self.hold} must be 0 or 1")

    hold: int | None = param(None, "stages a loop keeps past its own iteration, so copies run S-1-hold iterations "
                                   "ahead: unset, 1 on the mma.sync path for loops overlap-mma rotates (two "
                                   "chained mmas, S >= 3) whose predicted registers plus the carried P fit "
                                   "255, else 0")
    a_ahead: bool | None = param(None, "load a k16 step's A fragments with the unit fragments_ahead before its first, "
                                       "written as a_ahead on the loop's tk.mma (unset: true for a shared A of more "
                                       "than 8 registers a step where two steps fit the plan's registers; false: "
                                       "the backend's rule, only steps of at most 8 registers)")
    rotate: int | None = param(None, "mma.sync units (k16 step x two n8 blocks) before the end of the loop's mma at "
                                     "which the block waits for the next iteration's copies and loads its first "
                                     "k16 step of fragments, carried over the back edge (CUTLASS's order); unset: a "
                                     f"whole k16 step where step_ahead applies, else {ROTATE_UNITS}; 0: the barrier "
                                     "at the top of the iteration")
    step_ahead: bool | None = param(None, "load every k16 step's fragments one whole step ahead of its mma.syncs and "
                                          "rotate the loop by a whole step (rotate = fragments_ahead = the units of "
                                          "a step: CUTLASS's double-buffered warp fragments) where two steps of "
                                          "fragments fit the plan's registers; unset: true; an explicit rotate or "
                                          "fragments_ahead wins; false: the ablation (rotate 1, the backend's "
                                          "fragment distance)")
    hopper: bool | None = param(None, "sm_90a kernels planned as one compute role (no producer warpgroup): unset, "
                                      "those whose source asks for no producer (@warpgroups(producers=0)); true, "
                                      "every one (e.g. --no-tma kernels); false, none")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            hopper = _compute_role_kernel(kernel) and (no_producer(kernel) if self.hopper is None else self.hopper)
            if not (_mma_sync_kernel(kernel) or hopper):
                continue
            plan = OccupancyPlan.of(kernel)
            for loop in [op for op in kernel.body.ops if op.name == "scf.for"]:
                stages = loop.attrs.get("stages") or (plan.stages if plan is not None else None)
                match = match_cp_async(kernel, loop) if isinstance(stages, int) and stages >= 2 else None
                if match is not None:
                    hold = self.hold
                    if hold is None:
                        hold = int(_mma_sync_kernel(kernel) and _rotation_fits(loop, plan))
                    if stages < 2 + hold:
                        hold = 0  # a held stage in a two-stage loop would leave no copy in flight
                    _pipeline(kernel, loop, match, stages, hold)
                    rotatable = not hold and _mma_sync_kernel(kernel) and _rotatable(loop, match, plan)
                    step = None
                    if rotatable and self.step_ahead is not False:
                        step = _step_units(kernel, loop, match, plan)
                    rotate = (step or ROTATE_UNITS) if self.rotate is None else self.rotate
                    if rotate and rotatable:
                        loop.attrs["frag_rotate"] = rotate
                    ahead = step if self.fragments_ahead is None else self.fragments_ahead
                    for op in loop.walk():
                        if op.name == "tk.mma" and ahead is not None:
                            op.attrs["frag_ahead"] = ahead
                        if op.name == "tk.mma" and _mma_sync_kernel(kernel):
                            a_ahead = _a_ahead_fits(op, plan) if self.a_ahead is None else self.a_ahead
                            if a_ahead is not None:
                                op.attrs["a_ahead"] = a_ahead
        for kernel in module.kernels():
            # an sm_90a compute role this pass does not take (hopper=false; or unset, where the copies stay off
            # TMA by --no-tma / @no_tma and the source did not ask for no producer): the documented one-buffer
            # schedule, so a warning there, an error everywhere else
            one_buffer = (not _mma_sync_kernel(kernel) and _compute_role_kernel(kernel)
                          and not (no_producer(kernel) if self.hopper is None else self.hopper))
            check_stages_honoured(kernel, warn=one_buffer)


# The ops a ring-buffered loop holds: the stage views of a consumer and of a cp.async loop, the copies of
# a TMA producer and of a cp.async prologue and body.
RING_OPS = ("pipe.stage", "pipe.copy", "pipe.async_copy")


class StagesWarning(TkirWarning):
    """A loop's stages are not honoured because a documented setting asks for the one-buffer schedule."""


def check_stages_honoured(kernel: Operation, warn: bool = False) -> None:
    """A loop of the source that asks for S >= 2 stages (`@stages(S)`: Operation.requested; plan-occupancy's
    own choice for a loop no pass rings is not a request) which neither `pipeline` nor this pass
    ring-buffered is a located error: a requested depth is never silently dropped. S = 1 asks for no
    overlap, which every loop has. `warn`: the kernel is one this pass leaves one-buffered by its `hopper`
    setting (an sm_90a compute role whose copies stay off TMA): a top-level loop that copies shared tiles
    gets a located StagesWarning saying so instead."""
    for loop in kernel.walk():
        stages = loop.requested.get("stages") if loop.name == "scf.for" else None
        if not isinstance(stages, int) or stages < 2 or any(op.name in RING_OPS for op in loop.walk()):
            continue
        if not any(copies_to_shared(op) for op in loop.walk()):
            why = "it copies no shared tile from global memory (only such copies get ring buffers)"
        elif loop.parent is not kernel.body:
            why = "it is nested in another loop or region (only a loop at the kernel's top level is pipelined)"
        else:
            why = ("its copies do not meet the pipeline's conditions (docs/passes.md: pipeline, "
                   "pipeline-cp-async)")
        if warn and loop.parent is kernel.body and any(copies_to_shared(op) for op in loop.body.ops):
            warnings.warn(f"{loop.loc}: @stages({stages}): this loop is not pipelined: its copies stay off TMA "
                          "(--no-tma, @no_tma, no producer) in an sm_90a kernel without a producer warpgroup, "
                          "which pipeline-cp-async rings only under @warpgroups(producers=0) or hopper=true, "
                          "not hopper=false", StagesWarning, stacklevel=2)
            continue
        raise CompileError(loop.loc, f"@stages({stages}): this loop cannot be pipelined: {why}",
                           hint="remove the annotation, or write @stages(1)")


def _mma_sync_kernel(kernel: Operation) -> bool:
    """The mma.sync path: infer-layouts spread the tiles over `warps` (sm_80 only), and no pass split the
    block into roles."""
    return isinstance(kernel.attrs.get("warps"), int) and not any(op.name == "tk.role" for op in kernel.body.ops)


def _rotation_fits(loop: Operation, plan: OccupancyPlan | None) -> bool:
    """Whether overlap-mma would rotate the loop (`rotatable`) and the registers allow it: the occupancy
    plan's predicted count plus the carried register A of the rotated mma (p, one more copy live across
    the iteration) within MAX_REGS_PER_THREAD. Measured on the H200 at head dim 128, BQ = 128: BKV = 64
    rotated spills 956 bytes (the plan predicts 248 + 32 carried), BKV = 32 fits (216 + 16) and gains."""
    carried = rotatable(loop)
    if carried is None:
        return False
    if plan is None or plan.budget is None or not plan.threads:
        return True
    words = carried.rows * carried.cols * dtype_bytes(carried.dtype) // 4 // plan.threads
    return plan.budget.total + words <= MAX_REGS_PER_THREAD


def _rotatable(loop: Operation, match: CpAsyncMatch, plan: OccupancyPlan | None) -> bool:
    """Whether the pipelined loop takes the rotated order (`rotate`): index from 0 by 1 (its stage is
    `k % S`), a body of the wait, scalar arithmetic, copies, commit and stage views before one tk.mma
    of two stage views as its last op, and the registers of one k16 step of fragments carried over
    the back edge within the plan's room: the registers per thread at its blocks per SM (at most
    MAX_REGS_PER_THREAD) less its budget and ROTATE_SLACK_REGS (a 64 x 64 gemm tile at 6 blocks of 4 warps
    has 80, and rotated it spilled)."""
    if const_int(loop.operands[0]) != 0 or match.step != 1:
        return False
    ops = [op for op in loop.body.ops if op.name != "scf.yield"]
    mma = ops[-1] if ops else None
    before = ("pipe.async_wait", "pipe.async_copy", "pipe.async_commit", "pipe.stage")
    if mma is None or mma.name != "tk.mma" or any(op.regions or not (op.name in before or op.name.startswith("arith."))
                                                   for op in ops[:-1]):
        return False
    if not all(isinstance(v.owner, Operation) and v.owner.name == "pipe.stage" for v in mma.operands[:2]):
        return False
    step = _k16_step(mma)
    if step is None:
        return False
    if plan is None or plan.budget is None:
        return True
    return plan.budget.total + step.words + ROTATE_SLACK_REGS <= _reg_cap(plan)


@dataclass(frozen=True)
class _K16Step:
    """One k16 step of a warp's mma.sync work: its units (k16 step x two n8 blocks) and the registers of its
    shared A fragments (MMA_A_WORDS per m16 block) and B fragments (MMA_B_UNIT_WORDS per unit)."""

    units: int
    a_words: int
    b_words: int

    @property
    def words(self) -> int:
        return self.a_words + self.b_words


def _k16_step(mma: Operation) -> _K16Step | None:
    """The k16 step of a tk.mma with an `mma_c` accumulator (None otherwise); a register operand has no
    fragments to load (0 words)."""
    acc = mma.operands[2].type
    layout = layout_of(acc)
    if layout is None or layout.kind != "mma_c":
        return None
    units = -(-(acc.cols // layout.col_warps) // (2 * MMA_N))
    a_words = MMA_A_WORDS * (acc.rows // layout.row_warps // MMA_M) if is_shared(mma.operands[0].type) else 0
    return _K16Step(units, a_words, MMA_B_UNIT_WORDS * units if is_shared(mma.operands[1].type) else 0)


def _reg_cap(plan: OccupancyPlan) -> int:
    """The registers per thread ptxas may use at the plan's blocks per SM (the backend's .minnctapersm), at
    most MAX_REGS_PER_THREAD."""
    if not plan.blocks_per_sm or not plan.threads:
        return MAX_REGS_PER_THREAD
    return min(MAX_REGS_PER_THREAD, REGS_PER_SM // (plan.blocks_per_sm * plan.threads) // REG_ALLOC_UNIT
               * REG_ALLOC_UNIT)


def _step_units(kernel: Operation, loop: Operation, match: CpAsyncMatch, plan: OccupancyPlan | None) -> int | None:
    """`step_ahead`'s distance: the mma.sync units of one k16 step of the rotatable loop's tk.mma (its last
    op), if two k16 steps of its shared fragments (A and B, double-buffered) fit beside the plan's budget
    (which counts one step of A and one B unit, `mma_sync_fragment_regs`) and ROTATE_SLACK_REGS within the
    registers ptxas may use at the blocks per SM the backend asks for (tkir.launch_bounds.streaming_reg_cap:
    a 128 x 128 x 64 gemm tile asks for two blocks, 128 registers, and spilled 40 bytes), and at most
    STEP_AHEAD_MAX_COPY_ROUNDS cp.async rounds per thread per iteration (each keeps its addresses and edge
    predicate in registers the budget does not count); else None.
    Measured on the H200 at 4096^3 (docs/experiments.md, "sm_80 GEMM: fragments a whole k16 step ahead"):
    128 x 256 x 32 S4 434.1 -> 483.3 TFLOP/s with rotate = fragments_ahead = 4, where rotate = 4 alone gave
    466.1 and fragments_ahead = 4 alone 423.8 (the next k-tile's first step, loaded after a barrier one unit
    before the end, is then late).
    """
    mma = [op for op in loop.body.ops if op.name != "scf.yield"][-1]
    step = _k16_step(mma)
    if step is None:
        return None
    if plan is None or plan.budget is None:
        return step.units
    threads = plan.threads
    rounds = sum(-(-t.nbytes // CP_ASYNC_BYTES // threads)
                 for t in (ld.operands[0].type for ld in match.loads)) if threads else 0
    cap = streaming_reg_cap(kernel, threads) if threads else MAX_REGS_PER_THREAD
    fits = plan.budget.total + 2 * step.words - mma_sync_fragment_regs(mma) + ROTATE_SLACK_REGS <= cap
    return step.units if fits and rounds <= STEP_AHEAD_MAX_COPY_ROUNDS else None


def _a_ahead_fits(mma: Operation, plan: OccupancyPlan | None) -> bool | None:
    """`a_ahead`'s default: True for a warp tile of more than two m16 blocks (over the backend's
    A_AHEAD_MAX_REGS = 8 registers a step) whose A is a shared tile, when two k16 steps of A beside the
    plan's budget and ROTATE_SLACK_REGS fit `_reg_cap`; None (the backend's rule) otherwise. Measured on the
    H200: 256 x 128 x 64 S4 (64-row warps, one block per SM) 411.4 -> 423.0 TFLOP/s, no spills at S 2-4."""
    step = _k16_step(mma)
    a_words = step.a_words if step is not None else 0  # 0 for a register A
    if a_words <= A_AHEAD_BACKEND_REGS or plan is None or plan.budget is None:
        return None
    return True if plan.budget.total + 2 * a_words + ROTATE_SLACK_REGS <= _reg_cap(plan) else None


def _compute_role_kernel(kernel: Operation) -> bool:
    """An sm_90a kernel that plan-occupancy planned as one compute role (no producer) and no pass split."""
    plan = OccupancyPlan.of(kernel)
    return (plan is not None and plan.role("compute") is not None and plan.role("producer") is None
            and not any(op.name == "tk.role" for op in kernel.body.ops))


def _pipeline(kernel: Operation, loop: Operation, match: CpAsyncMatch, stages: int, hold: int = 0) -> None:
    """The rewrite of the module docstring: ring buffers, the prologue, the loop's wait, copies and views;
    with `hold` = 1 copies run one iteration less ahead (S-2) and the loop is marked `cp_hold = 1`."""
    body = loop.body
    lo, hi = loop.operands[0], loop.operands[1]
    k = body.args[0]
    for ld in match.loads:
        buf = ld.operands[0]
        buf.type = buf.type.with_attr("stages", stages)

    # the prologue: iterations 0 .. S-2 into stages 0 .. S-2, one group each
    pre = OpBuilder(kernel.body, loop)
    nstages = pre.const(stages, "cp_stages")
    lo_c = const_int(lo)
    ahead = stages - 1 - hold
    if hold:
        loop.attrs[CP_HOLD_ATTR] = hold
    for it in range(ahead):
        k_it = pre.const(lo_c + it * match.step, f"k_pre{it}") if lo_c is not None else \
            pre.op("arith.add", [lo, pre.const(it * match.step)], f"k_pre{it}")
        stage = pre.const(it, f"s_pre{it}")
        issue = pre.op("arith.cmp", [k_it, hi], f"pre{it}", {"pred": Ident("lt")}, I1)
        _issue(pre, issue, match.loads, loop, k_it, stage, keep_access=False)
        pre.void("pipe.async_commit", [stage])

    # the loop: wait, issue iteration it+S-1 into the stage iteration it-1 read, views of stage it % S
    original = list(body.ops)
    b = OpBuilder(body, original[0])
    b.void("pipe.async_wait", [], {"pending": ahead - 1})
    unit = lo_c == 0 and match.step == 1
    it = k if unit else b.op("arith.div", [b.op("arith.sub", [k, lo], "k_off"), pre.const(match.step, "cp_step")],
                             "k_iter")
    s = b.op("arith.rem", [it, nstages], "s")
    k_next = b.op("arith.add", [k, pre.const(ahead * match.step, "cp_ahead")], "k_next")
    issue = b.op("arith.cmp", [k_next, hi], "more", {"pred": Ident("lt")}, I1)
    it_next = k_next if unit else b.op("arith.add", [it, pre.const(ahead, "cp_ahead_it")], "it_next")
    s_next = b.op("arith.rem", [it_next, nstages], "s_next")
    _issue(b, issue, match.loads, loop, k_next, s_next, keep_access=True)
    b.void("pipe.async_commit", [s_next])
    for ld in match.loads:
        buf = ld.operands[0]
        view = b.op("pipe.stage", [buf, s], f"{buf.name}_s", rtype=buf.type.with_attr("stages", None))
        for op in original:
            if op is not ld:
                for inner in op.walk():  # uses in nested regions read the same stage
                    inner.operands = [view if v is buf else v for v in inner.operands]
    for ld in match.loads:
        body.remove(ld)


def _issue(b: OpBuilder, cond: Value, loads: list[Operation], loop: Operation, k: Value, stage: Value,
           keep_access: bool) -> None:
    """The loads' copies for loop index k into `stage`, each under `cond`, at b's insertion point; the
    coordinates computed in the loop body are recomputed there from k."""
    mapping: dict[Value, Value] = {loop.body.args[0]: k}
    for ld in loads:
        coords = [_clone_scalar_chain(c, loop, b, mapping) for c in ld.operands[2:]]
        attrs = {key: val for key, val in ld.attrs.items() if keep_access or key != "access"}
        b.add(Operation("pipe.async_copy", [cond, ld.operands[0], stage, ld.operands[1], *coords], [], attrs,
                        loc=ld.loc))


def _clone_scalar_chain(v: Value, loop: Operation, b: OpBuilder, mapping: dict[Value, Value]) -> Value:
    """A coordinate computed in the loop body, recomputed at b with the loop index mapped."""
    if v in mapping:
        return mapping[v]
    d = v.owner
    if not isinstance(d, Operation) or d.parent is not loop.body:
        return v  # defined before the loop
    ops = [_clone_scalar_chain(x, loop, b, mapping) for x in d.operands]
    mapping[v] = b.op(d.name, ops, d.result.name, dict(d.attrs), d.result.type)
    return mapping[v]
