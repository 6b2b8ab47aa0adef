"""plan-occupancy: count registers and shared memory, choose stages, roles, setmaxnreg and blocks per SM.

Writes the kernel attr `occupancy` (and `stages = S` on each pipelined loop that had none):

    occupancy = {stages = 4, blocks_per_sm = 1, smem_bytes = 197696, threads = 384,
                 roles = {producer = {warpgroups = 1, regs = 40}, consumer = {warpgroups = 2, regs = 232}},
                 budget = {acc_regs = 128, live_tile_regs = 0, addr_regs = 14, overhead = 16},
                 smem = {stage_bytes = 49152, fixed_bytes = 0, barrier_bytes = 64, align_pad = 1024}}

Roles. A loop that loads shared tiles with `tma.load` and feeds `tk.mma` is warp-specialized
(HOPPER.md §7.2): one producer warpgroup plus the consumer warpgroups of the kernel attr
`warpgroups = {consumers = N}` (default: infer-layouts' choice, the most warpgroups up to 3 that split
the accumulator's m64 blocks evenly). Any other kernel has one
role, `compute`, with the warpgroups of its `warpgroups` attr (default 1) and no setmaxnreg; on sm_80,
where infer-layouts records `warps = W` on the kernel, the role is `compute = {warps = W, ...}` and the
block has 32 * W threads (the mma/row layouts spread the tiles over exactly those warps).

Registers per thread of the role that computes (consumer or compute), at the program point where
the most register values are live (a value is live from its definition to its last use; a value
used inside a loop but defined before it stays live to the loop's end; an operand whose last use is
an op does not overlap that op's result, i.e. elementwise ops and mma update in place):
* acc_regs: accumulators (tk.mma accumulators and results, values carried by scf.for);
* live_tile_regs: every other register tile and vector;
  a value with a fragment layout counts what `tkir.layout.regs_per_thread` says; without one, a
  tile's share is rows*cols*bytes/4 32-bit registers over the role's threads and a vector's is
  n*4/threads (one value per row, replicated over the 4 lanes of a quad, HOPPER.md §1.5);
  an elementwise result read once by the very next op (elementwise or a reduction) counts 0: it is
  computed element by element inside that op (`x*x` feeding `row_sum`);
* a widening tk.cast (bf16 -> f32) of a register tile that nothing else reads, whose own readers are all
  elementwise or reductions, counts 0 and keeps its operand live (packed) to its last use: ptxas
  converts each element next to its use (_widened_at_use; rotary: 16 registers of loaded tiles, not 32);
* a register tile loaded from shared memory and read once, by the very next op (elementwise or a
  reduction), counts 0: ptxas issues each ld.shared next to its use (_shared_load_at_use);
* a tk.outer product read only as the A operand of the next tk.mma counts SLICED_A_REGS: the
  backend computes it slice by slice where the wgmma reads it;
* an mma.sync (an `mma_c` accumulator, sm_80) adds, at the mma, the operand fragments it loads from
  shared memory (`mma_sync_fragment_regs`): one k16 step of A for each m16 block of a warp's tile (4
  each: 8 for a warp of 32 rows, 16 for the 64 rows of a 2-D warp grid's tile) and one B unit (4);
* addr_regs: 2 per per-thread global address live at the peak, 1 per live i32/f32 scalar (constants are
  immediates), and 4 for the two 64-bit wgmma descriptors of an mma reading shared memory. A global address
  lives from the kernel's start to its last access (an access in a loop: to the loop's end), so a tensor read
  only before the peak costs nothing there (_live_across); register tiles of one type accessed in tensors of
  one dtype and shape at the same run-time coordinates share one address, constant coordinates being
  immediate offsets (_address_groups: rmsnorm_bwd's X, DY and DX are one);
* overhead: OVERHEAD_REGS (thread/warp ids, stage and phase counters, predicates, ptxas temporaries).
The sum is rounded up to the allocation unit of 8 and must be <= 255. Warp-specialized kernels are
planned for 1 block per SM (CUTLASS `__launch_bounds__(384, 1)`): the launch gives every thread
floor(65536 / threads / 8) * 8 registers, the producer gives back down to 40 (24 if the consumers
need it) and the consumers take the rest, a multiple of 8 up to 248, so that
128 * (producer + consumers * regs) <= threads * launch cap (HOPPER.md §7.1: 40 / 232 for 384 threads).

Shared memory per block: every `tk.alloc` (rows * (row bytes + pad)), rounded up to its `align`
(TMA destinations at least 128 B, HOPPER.md §3.2); tiles a loop loads from global memory are ring
buffers of `stages` copies; 2 mbarriers (full, empty) of 8 B per stage of a TMA loop; plus one
`align_pad` of the largest alignment (the dynamic shared base is only 16-B aligned, so the kernel
rounds it up at run time). A tile stored by `tma.store` (epilogue staging) is an alloc like any other.

Stages: `stages = n` on the loop (`@stages(n)`) wins, and is an error if it does not fit; otherwise
the most that fit in 232,448 B, capped at MAX_AUTO_STAGES = 4 (more stages hide no more latency once
loads run 3 iterations ahead of a 128x256x64 wgmma step, and cost blocks per SM). A kernel without
a pipelined loop gets stages = 1. blocks_per_sm = min(228 KB / (smem + 1 KB reserved, in 128-B
units), 65536 / (threads * regs), 64 warps / warps per block, 32).

`@blocks_per_sm(B)` (kernel attr `min_blocks_per_sm = B`, B >= 1) is a floor: blocks_per_sm =
max(the count above, B), and the backend asks ptxas for exactly that many (`.minnctapersm`), so ptxas
fits each thread in 65536 / (B * threads) registers; the roles keep the planner's register estimate
(conservative: the layernorm of D = 8192 on 256 threads is estimated at 96, ptxas needs 64 at B = 4).
B is refused (a CompileError at the kernel) when B blocks cannot be resident: B > 1 on a
warp-specialized kernel, B * threads > 2048, B * (smem + 1 KB, in 128-B units) > 228 KB, or fewer
than acc_regs + overhead registers per thread.
Nothing fits -> a located CompileError naming the largest consumer of the budget.

The budget is an estimate, checked against ptxas on every example and user-suite kernel, both targets, by
tests/tools/test_register_estimate.py (`python3 -m tkir.tools.register_table` prints the table; a setmaxnreg
kernel against the registers its SASS names + 2, ptxas's own count being the launch allocation): within 10%
but for listed outliers (mma.sync fragments loaded ahead, consumers that use more of setmaxnreg's registers,
fixed parts too large for small row kernels, tiles ptxas streams). Where it is too low for the blocks per SM
it leads to, ptxas spills, and the backend lowers the kernel again for the highest lower count ptxas does not
spill at (backend/lower.py avoid_spills, a bounded search; `spill_retry=false` turns that off and records the
kernel attr `spill_retry = false`).
"""

from __future__ import annotations

import bisect
import math

from tkir.diagnostics import CompileError
from tkir.facts import (
    OccupancyPlan,
    RegisterBudget,
    RolePlan,
    SharedBreakdown,
    compute_warpgroups,
    requested_blocks_per_sm,
)
from tkir.ir import Block, Loc, Module, Operation, Value, parent_op
from tkir.launch_bounds import streaming_blocks_per_sm
from tkir.layout import auto_consumer_warpgroups, layout_of
from tkir.layout import regs_per_thread as layout_regs
from tkir.ops import TILE_BINARY, TILE_UNARY
from tkir.passes.analysis import (
    CLUSTER_ATTR,
    COARSEN_DONE_ATTR,
    COARSEN_PENDING_ATTR,
    SMEM_ALLOC_UNIT,
    SMEM_RESERVED_PER_BLOCK,
    block_smem,
    cp_async_loop_loads,
    mma_sync_fragment_regs,
    no_producer,
    resident_blocks,
    round_up,
)
from tkir.passmanager import Options, ParamError, Pass, param
from tkir.target import (
    MAX_REGS_PER_THREAD,
    MAX_THREADS_PER_BLOCK,
    MAX_WARPS_PER_SM,
    MBARRIER_BYTES,
    PLAIN_SMEM_ALIGN,
    QUAD,
    REG_ALLOC_UNIT,
    REGS_PER_SM,
    SETMAXNREG_RANGE,
    SMEM_PER_BLOCK,
    SMEM_PER_SM,
)
from tkir.target import WARP as WARP_SIZE
from tkir.target import WARPGROUP as THREADS_PER_WARPGROUP
from tkir.types import DTYPE_BYTES, GlobalType, ScalarType, TileType, VectorType, is_shared

# Limits of compute capability 9.0 (HOPPER.md §7.1, §7.3).
SETMAXNREG_MIN = SETMAXNREG_RANGE[0]
MAX_ROLE_REGS = 248                # largest multiple of 8 within 255 registers per thread

BARRIERS_PER_STAGE = 2             # full + empty (HOPPER.md §5.4)
TMA_SMEM_ALIGN = 128               # TMA shared address alignment (HOPPER.md §3.2)
PRODUCER_REGS = (40, 24)           # CUTLASS producer setmaxnreg.dec values, preferred first
# With three or more consumer warpgroups (512+ threads, 128 registers each at launch), 40 would leave
# the consumers 152: ThunderKittens' attention and FlashAttention-3 (head dim 64) give the producer 32
# and the consumers 160. Measured: attention at head dim 64 with overlap-mma spills 48 B and serializes
# its wgmmas at 152 (ptxas C7512), neither at 160.
PRODUCER_REGS_MANY = (32, 24)
# sm_80 cp.async producer warps (plan-occupancy{producer_warps}): one per scheduler, so that each issues a
# quarter of the copies beside its two consumer warps; 9 warps cost the registers of 12 (SCHEDULERS_PER_SM).
# Measured on the H200, gemm 256x128x64 S4 at 4096^3 (docs/experiments.md, "cp.async producer warps"): 1 warp 291-294
# TFLOP/s, 2 warps 350, 4 warps 370-376, the one-role loop (0) 353-355.
# warp schedulers (SM sub-partitions) per SM, each with 16384 registers (HOPPER.md, the occupancy table:
# "registers split over 4 SM sub-partitions"; ptxas caps 288 threads at 168 registers, not 224)
SCHEDULERS_PER_SM = 4
AUTO_PRODUCER_WARPS = SCHEDULERS_PER_SM
MAX_PRODUCER_WARPS = 8
MAX_AUTO_STAGES = 4

OVERHEAD_REGS = 16
# A warp-specialized plan whose consumers' budget exceeds the most setmaxnreg can give them by at most this many is
# planned at that most, with the kernel attr SHORTFALL_ATTR, instead of refused: the budget counts every value live
# at its peak at full size, and measured 7-42% above the SASS live peak (docs/status.md, issue 4). One allocation
# unit. Measured: attention_bwd.tk at 64 x 128 blocks, budget 245 against 240, ptxas holds it without spilling
# without pingpong and spills 4 bytes with it (fold-acc-init; 20 before it).
BUDGET_SLACK_REGS = 8
SHORTFALL_ATTR = "register_shortfall"
POINTER_REGS = 2                   # a 64-bit global address
WGMMA_DESC_REGS = 4                # two 64-bit shared-memory matrix descriptors (HOPPER.md §2)
# A tk.outer product feeding the next mma as A is live two slices at a time: 2 x 4 k16 steps x 4
# b32 registers of a 16-bit A fragment (HOPPER.md §1.6; backend/rules_wgmma.py LAZY_SLICE_KSTEPS)
SLICED_A_REGS = 2 * 4 * 4

COPIES_TO_SHARED = ("tma.load", "tk.load")
ELEMENTWISE = tuple(f"tk.{n}" for n in (*TILE_BINARY, *TILE_UNARY, "cast", "cmp", "select", "index"))


class PlanOccupancy(Pass):
    name = "plan-occupancy"
    producer_warps: int | None = param(
        None, "sm_80 (mma.sync path): copy warps added to the block for a loop that loads shared tiles and feeds "
              "tk.mma, which `pipeline` turns into a cp.async producer role (unset: 4, one per scheduler, for a "
              "loop that only copies and multiplies, when the registers fit, else 0; 0: none, the ablation)")

    spill_retry: bool = param(
        True, "after the backend's ptxas run finds spills at the compiler's own blocks per SM > 1, lower the kernel "
              "again for the highest lower count ptxas does not spill at (backend/lower.py avoid_spills; false: "
              "keep the spilling code, the ablation, recorded as the kernel attr `spill_retry = false`)")

    def __post_init__(self) -> None:
        if self.producer_warps is not None and not 0 <= self.producer_warps <= MAX_PRODUCER_WARPS:
            raise ParamError("producer_warps", f"plan-occupancy: producer_warps={self.producer_warps} must be "
                                               f"0..{MAX_PRODUCER_WARPS}")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            plan = plan_kernel(kernel, self.producer_warps)
            kernel.attrs[OccupancyPlan.ATTR] = plan.to_attr()
            size_coarsened_grid(kernel, plan)
            if not self.spill_retry:
                kernel.attrs["spill_retry"] = False


def size_coarsened_grid(kernel: Operation, plan: OccupancyPlan) -> None:
    """coarsen-rows bounded the grid to `min(E, NUM_SMS * K)` and left K to this plan (the kernel attr
    COARSEN_PENDING_ATTR holds E): K becomes the blocks per SM the backend asks ptxas to keep resident under
    it (tkir.launch_bounds.streaming_blocks_per_sm), so the grid is one wave of resident blocks; the attr
    goes, and coarsen-rows' record (COARSEN_DONE_ATTR) says the K chosen."""
    rows = kernel.attrs.pop(COARSEN_PENDING_ATTR, None)
    if rows is None or not plan.threads:
        return
    k = streaming_blocks_per_sm(kernel, plan.threads)
    kernel.attrs["grid"] = [f"min({rows}, NUM_SMS * {k})"]
    done = kernel.attrs.get(COARSEN_DONE_ATTR)
    if isinstance(done, dict):
        kernel.attrs[COARSEN_DONE_ATTR] = {**done, "blocks_per_sm": k}


def plan_kernel(kernel: Operation, producer_warps: int | None = None) -> OccupancyPlan:
    """The occupancy plan of one kernel (also sets `stages` on its pipelined loops). `producer_warps`:
    PlanOccupancy's parameter (sm_80 copy warps; None: the automatic choice)."""
    rings = _ring_buffers(kernel)
    loops = list(dict.fromkeys(rings.values()))
    ws_loop = next((lp for lp in loops if _is_warp_specialized(lp, rings)), None)
    if ws_loop is None and isinstance(kernel.attrs.get("warps"), int) and producer_warps != 0 \
            and not (producer_warps is None and no_producer(kernel)):
        preset = [(lp, lp.attrs.get("stages")) for lp in loops]
        plan = _plan_cp_async_producer(kernel, rings, loops, producer_warps)
        if plan is not None and producer_warps is not None:
            return plan
        if plan is not None:  # the automatic choice: producers only where they keep the mma warps per SM
            _restore_stages(preset)  # plan the one-role loop from the same starting point
            one = _plan_roles(kernel, rings, loops, None)
            if _mma_warps_per_sm(one) >= _mma_warps_per_sm(plan):
                return one  # the rotated one-role loop beats producers at equal mma warps (_plan_cp_async_producer)
            _restore_stages(preset)
            for lp in loops:
                lp.attrs.setdefault("stages", plan.stages)
            return plan
    return _plan_roles(kernel, rings, loops, ws_loop)


def _restore_stages(preset: list[tuple[Operation, object]]) -> None:
    """Put back the loops' `stages` attrs as they were before a plan set them."""
    for lp, st in preset:
        if st is None:
            lp.attrs.pop("stages", None)
        else:
            lp.attrs["stages"] = st


def _mma_warps_per_sm(plan: OccupancyPlan) -> int:
    """The warps that issue mma.sync resident on one SM: the consumers' (or the one role's) warps times
    the blocks per SM."""
    role = plan.role("consumer") or plan.role("compute")
    assert role is not None and role.warps is not None  # sm_80 plans size their roles in warps
    return role.warps * plan.blocks_per_sm


def _plan_roles(kernel: Operation, rings: dict[Value, Operation], loops: list[Operation],
                ws_loop: Operation | None) -> OccupancyPlan:
    """The plan without sm_80 producer warps: a warp-specialized (TMA) kernel's producer and consumer
    warpgroups, or one compute role."""
    if ws_loop is not None:
        consumers = _consumer_warpgroups(kernel, ws_loop)
        threads = THREADS_PER_WARPGROUP * (1 + consumers)
        reg_threads = THREADS_PER_WARPGROUP * consumers
    elif isinstance(kernel.attrs.get("warps"), int):  # sm_80: infer-layouts spread the tiles over W warps
        consumers = 0
        threads = WARP_SIZE * kernel.attrs["warps"]
        reg_threads = threads
    else:
        consumers = compute_warpgroups(kernel)
        threads = THREADS_PER_WARPGROUP * consumers
        reg_threads = threads
    # cluster-rows: the block's threads hold the tiles (reg_threads), C CTAs of threads / C each run them
    cluster = kernel.attrs.get(CLUSTER_ATTR)
    if isinstance(cluster, int) and cluster > 1 and ws_loop is None:
        threads //= cluster
    if threads < 1:  # hand-written IR: `warps = 0` (or no consumer warpgroups)
        raise CompileError(kernel.loc, f"{threads} threads per block: a block needs at least one warp")
    if threads > MAX_THREADS_PER_BLOCK:  # the launch would fail (or, before this check, be attempted)
        raise CompileError(kernel.loc, f"{threads} threads per block: more than the {MAX_THREADS_PER_BLOCK} a block "
                                    "may have", hint="use fewer warpgroups (@warpgroups(consumers=N)) or warps")

    budget, largest = _register_budget(kernel, reg_threads)
    needed = round_up(budget.total, REG_ALLOC_UNIT)

    smem = _SharedMemory(kernel, rings)
    stages = smem.choose_stages(loops)
    for lp in loops:
        lp.attrs.setdefault("stages", stages)
    smem_bytes = smem.total(loops, stages)

    if ws_loop is not None:
        roles, regs_for_blocks = _split_registers(kernel, consumers, needed, budget, largest)
    else:
        if needed > MAX_REGS_PER_THREAD:
            raise _register_error(kernel, "", needed, MAX_REGS_PER_THREAD, budget, largest)
        fit = REGS_PER_SM // threads // REG_ALLOC_UNIT * REG_ALLOC_UNIT
        if needed > fit:  # not even one block's threads get `needed` registers each
            raise _register_error(kernel, f"{threads} threads per block: ", needed, fit, budget, largest)
        role = (RolePlan(needed, warpgroups=consumers) if consumers
                else RolePlan(needed, warps=threads // WARP_SIZE))
        roles = (("compute", role),)
        regs_for_blocks = needed

    blocks = resident_blocks(smem_bytes, threads, regs_for_blocks)
    requested = requested_blocks_per_sm(kernel)
    if requested is not None:  # @blocks_per_sm(B): the floor ptxas is asked for, if B blocks can be resident
        _check_requested(kernel, requested, ws_loop is not None, threads, smem_bytes, budget)
        blocks = max(blocks, requested)
    return OccupancyPlan(stages=stages, roles=roles, blocks_per_sm=blocks, smem_bytes=smem_bytes,
                         threads=threads, budget=budget, smem=smem.breakdown(loops, stages))


def _plan_cp_async_producer(kernel: Operation, rings: dict[Value, Operation], loops: list[Operation],
                            producer_warps: int | None) -> OccupancyPlan | None:
    """sm_80 warp specialization without TMA (CUTLASS's sm90 `KernelCpAsyncWarpSpecialized` schedule, on
    the mma.sync path): P producer warps copy every k-tile with cp.async and arrive on the stage's
    mbarrier when their copies land; the W warps of the layouts only wait, multiply and release. No
    setmaxnreg on sm_80, so every thread gets the launch's registers, a quarter of the register file over
    the warps of the busiest scheduler (SCHEDULERS_PER_SM): the consumers' need must fit that. Measured
    reason (docs/experiments.md, "cp.async producer warps"): in the one-role cp.async loop the mma warps stall on the
    copies' address arithmetic and on the per-k-tile block barrier; with the producer warps the gemm
    256x128x64 runs 3-5% faster on the H200, 128x256x64 the same. With the automatic choice the
    producers are kept only where the mma warps resident per SM are more than the one-role plan's
    (plan_kernel): a 4-warp 128x128 block with producers is one block per SM (4 mma warps), where the
    one-role loop fits two (8); measured 283 against 374 TFLOP/s. At equal mma warps
    the one-role loop is kept: pipeline-cp-async rotates it (and loads A a unit ahead),
    and it measured 412.0 against 391.6 TFLOP/s at gemm.tk's 128x256x64 S4 and 420.3 against 391.0 at
    256x128x64 S4 (4096^3, H200, docs/experiments.md "sm_80 GEMM: the rotated cp.async loop"); unrotated
    (rotate=0) 387.5 against 391.0.

    None (plan as before: one compute role) when the source asks for no producer
    (`@warpgroups(producers=0)`, unless producer_warps says otherwise) or for more than one block per SM,
    when no loop qualifies (`pipeline-cp-async`'s conditions: its loads are ring-bufferable tiles at the
    top of the loop, and it feeds tk.mma), or, with the automatic choice, when the loop does more than copy
    and multiply (attention's softmax: measured 0.82-0.95x of its one-role loop), or the consumers'
    registers do not fit. An explicit `producer_warps` is planned whatever the registers: the roles get
    the fit, and ptxas spills what does not (`tkc report` shows it)."""
    loop = next((lp for lp in loops if cp_async_loop_loads(kernel, lp) is not None), None)
    if loop is None:
        return None
    explicit = producer_warps is not None
    requested = requested_blocks_per_sm(kernel)
    if producer_warps is None:
        if not _only_copies_and_mma(loop) or (requested or 1) > 1:
            return None  # producer warps are planned for one block per SM (@blocks_per_sm(B > 1) asks for more)
        producer_warps = AUTO_PRODUCER_WARPS
    warps = int(kernel.attrs["warps"])
    threads = WARP_SIZE * (warps + producer_warps)
    if threads > MAX_THREADS_PER_BLOCK:
        if explicit:  # asked for, not silently dropped
            raise CompileError(kernel.loc, f"plan-occupancy: {warps} warps + producer_warps={producer_warps} is "
                                           f"{threads} threads per block, more than the {MAX_THREADS_PER_BLOCK} a "
                                           "block may have", hint="ask for fewer producer warps")
        return None
    budget, largest = _register_budget(kernel, WARP_SIZE * warps)
    # the consumers compute no copy addresses (the producer does): of the kernel's pointers and scalars
    # they keep the output's pointer (measured: the 256x128x64 gemm's consumers fit ptxas's 168 without
    # spills, where the one-role budget predicts 184)
    needed = round_up(budget.total - budget.addr_regs + POINTER_REGS, REG_ALLOC_UNIT)
    # warps are spread round-robin over the SM's 4 schedulers, each with a quarter of the register file,
    # so 9 warps (3 on one scheduler) get what 12 get: 65536 / 4 / (3 x 32) -> 168 (ptxas's cap at 288 threads)
    per_scheduler = -(-(warps + producer_warps) // SCHEDULERS_PER_SM)
    fit = min(REGS_PER_SM // SCHEDULERS_PER_SM // (per_scheduler * WARP_SIZE) // REG_ALLOC_UNIT * REG_ALLOC_UNIT,
              MAX_ROLE_REGS)
    if needed > fit and not explicit:
        return None  # asked for explicitly, it is planned anyway: ptxas fits the registers (tkc report: spills)
    needed = min(needed, fit)
    smem = _SharedMemory(kernel, rings, barrier_loops={loop})
    stages = smem.choose_stages(loops)
    for lp in loops:
        lp.attrs.setdefault("stages", stages)
    smem_bytes = smem.total(loops, stages)
    roles = (("producer", RolePlan(needed, warps=producer_warps)), ("consumer", RolePlan(needed, warps=warps)))
    blocks = resident_blocks(smem_bytes, threads, needed)
    if requested is not None:
        _check_requested(kernel, requested, True, threads, smem_bytes, budget)
        blocks = max(blocks, requested)
    return OccupancyPlan(stages=stages, roles=roles, blocks_per_sm=blocks, smem_bytes=smem_bytes,
                         threads=threads, budget=budget, smem=smem.breakdown(loops, stages))


def _only_copies_and_mma(loop: Operation) -> bool:
    """A loop body of copies into shared tiles, tk.mma and scalar arithmetic (a GEMM's k-loop)."""
    return all(op.name in (*COPIES_TO_SHARED, "tk.mma", "scf.yield") or op.name.startswith("arith.")
               for op in loop.body.ops)


def _check_requested(kernel: Operation, b: int, warp_specialized: bool, threads: int, smem_bytes: int,
                     budget: RegisterBudget) -> None:
    """`@blocks_per_sm(B)` asks for B resident blocks per SM: refused (a CompileError at the kernel) where
    B blocks cannot be resident whatever ptxas does with the registers: a warp-specialized kernel with
    B > 1 (setmaxnreg hands one block the SM's whole register file), more threads or shared memory than
    an SM has, or fewer registers per thread than the accumulators and OVERHEAD_REGS need (they cannot
    be squeezed; ptxas would spill them)."""
    who = f"@blocks_per_sm({b}) on kernel '{kernel.symbol}'"
    if warp_specialized and b > 1:
        raise CompileError(kernel.loc, f"{who}: a warp-specialized kernel runs one block per SM (its producer "
                           "and consumer warpgroups share the SM's registers through setmaxnreg)",
                           hint="use @blocks_per_sm(1), or 0 to let plan-occupancy decide")
    sm_threads = MAX_WARPS_PER_SM * WARP_SIZE
    if b * threads > sm_threads:
        raise CompileError(kernel.loc, f"{who}: {b} blocks x {threads} threads = {b * threads} threads, more than "
                           f"the {sm_threads} an SM holds",
                           hint=f"ask for at most {_blocks(sm_threads // threads)}, or use fewer warpgroups "
                                "(@warpgroups(consumers=N))")
    per_block = block_smem(smem_bytes)
    if b * per_block > SMEM_PER_SM:
        raise CompileError(kernel.loc, f"{who}: {b} blocks x {per_block} B of shared memory ({smem_bytes} B + "
                           f"{SMEM_RESERVED_PER_BLOCK} B reserved, in {SMEM_ALLOC_UNIT}-B units) = {b * per_block} B, "
                           f"more than the {SMEM_PER_SM} B of an SM",
                           hint=f"ask for at most {_blocks(SMEM_PER_SM // per_block)}, or use fewer stages or smaller "
                                "tiles")
    regs = REGS_PER_SM // (b * threads) // REG_ALLOC_UNIT * REG_ALLOC_UNIT
    floor = budget.acc_regs + budget.overhead
    if regs < floor:
        raise CompileError(kernel.loc, f"{who}: {b} blocks x {threads} threads leave {regs} registers per thread, "
                           f"fewer than the {floor} its accumulators ({budget.acc_regs}) and overhead "
                           f"({budget.overhead}) need", hint="ask for fewer blocks, or use smaller tiles")


def _blocks(n: int) -> str:
    return f"{n} block{'' if n == 1 else 's'}"


# ---------------------------------------------------------------------------------------------
# Roles.


def _ring_buffers(kernel: Operation) -> dict[Value, Operation]:
    """Shared tile -> the top-level loop that loads it from global memory (it becomes a ring buffer).
    A tile loaded in a loop nested in another loop is a plain tile: pipeline and pipeline-cp-async
    rotate top-level loops only, so its loop gets no stages and no producer role."""
    out: dict[Value, Operation] = {}
    for op in kernel.walk():
        if op.name not in COPIES_TO_SHARED or op.results or len(op.operands) < 2:
            continue
        if not (is_shared(op.operands[0].type) and isinstance(op.operands[1].type, GlobalType)):
            continue
        loop = _enclosing_loop(op)
        if loop is not None and parent_op(loop) is kernel:
            out[op.operands[0]] = loop
    return out


def _enclosing_loop(op: Operation) -> Operation | None:
    p = parent_op(op)
    while p is not None and p.name != "scf.for":
        p = parent_op(p)
    return p


def _is_warp_specialized(loop: Operation, rings: dict[Value, Operation]) -> bool:
    """The loop `pipeline` will split into producer and consumer roles: a (top-level, _ring_buffers)
    loop that TMA-loads one of its ring buffers and multiplies. A loop nested in a run-time loop keeps
    one role: planning a producer warpgroup for it launched a second warpgroup that ran the consumers'
    code with a warpgroup index past the tile's rows (wrong wgmma operands)."""
    ops = list(loop.walk())
    tma = any(o.name == "tma.load" and rings.get(o.operands[0]) is loop for o in ops)
    return tma and any(o.name == "tk.mma" for o in ops)


def _consumer_warpgroups(kernel: Operation, loop: Operation) -> int:
    wg = kernel.attrs.get("warpgroups")
    if isinstance(wg, dict) and isinstance(wg.get("consumers"), int):
        return wg["consumers"]
    rows = max(o.result.type.rows for o in loop.walk() if o.name == "tk.mma")
    return auto_consumer_warpgroups(rows)


def _split_registers(kernel: Operation, consumers: int, needed: int, budget: RegisterBudget,
                     largest: tuple[Value, int] | None) -> tuple[tuple[tuple[str, RolePlan], ...], int]:
    threads = THREADS_PER_WARPGROUP * (1 + consumers)
    launch_cap = min(REGS_PER_SM // threads // REG_ALLOC_UNIT * REG_ALLOC_UNIT, MAX_ROLE_REGS)
    pool = threads * launch_cap // THREADS_PER_WARPGROUP  # registers per thread, summed over warpgroups
    best, best_producer = 0, 0
    for producer in (PRODUCER_REGS_MANY if consumers >= 3 else PRODUCER_REGS):
        if producer > launch_cap:
            continue
        consumer = min((pool - producer) // consumers // REG_ALLOC_UNIT * REG_ALLOC_UNIT, MAX_ROLE_REGS)
        if consumer > best:
            best, best_producer = consumer, producer
        if consumer >= needed and consumer >= SETMAXNREG_MIN:
            roles = (("producer", RolePlan(producer, warpgroups=1)),
                     ("consumer", RolePlan(consumer, warpgroups=consumers)))
            return roles, launch_cap
    over = budget.total - best
    if best >= SETMAXNREG_MIN and over <= BUDGET_SLACK_REGS:
        # the budget is an upper bound: planned at the most the consumers can get, ptxas decides (its spills are
        # reported, and an `auto` const's choice turns a point down that spills more than SPILL_LIMIT_BYTES)
        kernel.attrs[SHORTFALL_ATTR] = over
        roles = (("producer", RolePlan(best_producer, warpgroups=1)),
                 ("consumer", RolePlan(best, warpgroups=consumers)))
        return roles, launch_cap
    raise _register_error(kernel, f"{consumers} consumer warpgroup{'s' if consumers > 1 else ''}: ",
                          needed, best, budget, largest)


def _register_error(kernel: Operation, who: str, needed: int, limit: int, budget: RegisterBudget,
                    largest: tuple[Value, int] | None) -> CompileError:
    parts = ", ".join(f"{k} {v}" for k, v in budget.to_attr().items())
    msg = f"registers: {who}{needed} per thread needed > {limit} available ({parts})"
    loc = kernel.loc
    if largest is not None:
        value, regs = largest
        msg += f"; largest: %{value.name} {value.type} = {regs} per thread"
        loc = _def_loc(value) or loc
    hint = "use smaller tiles or more warpgroups (@warpgroups(consumers=N))"
    return CompileError(loc, msg, hint=hint)


# ---------------------------------------------------------------------------------------------
# Registers.


def _value_regs(t: object, threads: int) -> int:
    if isinstance(t, (TileType, VectorType)) and t.space in ("rt", "rv"):
        shape = t.shape if isinstance(t, TileType) else (t.n,)
        try:
            layout = layout_of(t)
            if layout is not None:
                return layout_regs(layout, t.dtype, shape)
        except ValueError:
            pass  # a layout this module cannot read or that does not fit the shape: count by shape
        words = max(DTYPE_BYTES[t.dtype] / 4, 1 if isinstance(t, VectorType) else 0)
        if isinstance(t, TileType):
            return math.ceil(t.rows * t.cols * words / threads)
        return math.ceil(t.n * QUAD * words / threads)
    if isinstance(t, ScalarType):
        return max(DTYPE_BYTES[t.dtype] // 4, 1)
    return 0


class _BlockIndex:
    """One block's op positions and, per position k, how many ops before k are neither element-wise nor
    scalar (`breaks[k]`): built once per block on first use (a scan per value, `blk.ops.index` or a
    slice of the ops between a definition and its last use, made the register estimate quadratic in a
    block's length)."""

    def __init__(self, blk: Block):
        self.pos = {id(o): i for i, o in enumerate(blk.ops)}
        self.breaks = [0]
        for o in blk.ops:
            self.breaks.append(self.breaks[-1] + (not (o.name in ELEMENTWISE or o.name.startswith("arith."))))


def _block_index(blk: Block, positions: dict[int, _BlockIndex]) -> _BlockIndex:
    index = positions.get(id(blk))
    if index is None:
        index = positions[id(blk)] = _BlockIndex(blk)
    return index


def _shared_load_at_use(v: Value, users: list[Operation], positions: dict[int, _BlockIndex]) -> bool:
    """A register tile loaded from shared memory and read once, by the very next op, an elementwise one or a
    reduction: ptxas issues each piece's ld.shared next to the arithmetic that reads it (a few cycles of
    latency, nothing to hide), so the tile is never whole in registers (attention_bwd_dq_convert: the 64
    registers of its f32 tile, 45 used in all). Global loads are hoisted (their latency is hidden by
    having them all in flight) and count in full."""
    op = v.owner
    if not (isinstance(op, Operation) and op.name == "tk.load" and op.operands and is_shared(op.operands[0].type)):
        return False
    if len(users) != 1 or users[0].name not in ELEMENTWISE + ("tk.reduce",) or users[0].parent is not op.parent:
        return False
    index = _block_index(op.parent, positions)
    return index.pos[id(users[0])] == index.pos[id(op)] + 1


def _streamed(v: Value, uses: dict[Value, list[Operation]], positions: dict[int, _BlockIndex]) -> bool:
    """An elementwise result read only by elementwise ops or reductions of its own block, with nothing
    but elementwise and scalar ops between its definition and its last use: the whole chain is one
    element-wise expression that the backend and ptxas evaluate element by element (the GELU of an
    epilogue), so the intermediate never occupies a whole tile of registers."""
    op, users = v.owner, uses.get(v, [])
    if _shared_load_at_use(v, users, positions):
        return True
    if not (isinstance(op, Operation) and op.name in ELEMENTWISE and users):
        return False
    blk = op.parent
    if blk is None or any(u.name not in ELEMENTWISE + ("tk.reduce",) or u.parent is not blk for u in users):
        return False
    index = _block_index(blk, positions)
    i = index.pos[id(op)]
    last = max(index.pos[id(u)] for u in users)
    return last <= i + 1 or index.breaks[last] == index.breaks[i + 1]  # none in blk.ops[i + 1:last]


def _sliced(v: Value, uses: dict[Value, list[Operation]]) -> bool:
    """A tk.outer product read only as the A operand of the next tk.mma (constants between): the backend
    multiplies it slice by slice where the wgmma reads it (backend/rules_wgmma.py, LAZY_SLICE_KSTEPS),
    so at most two slices are live, never the whole tile."""
    op, users = v.owner, uses.get(v, [])
    if not (isinstance(op, Operation) and op.name == "tk.outer" and len(users) == 1):
        return False
    mma, blk = users[0], op.parent
    if mma.name != "tk.mma" or mma.operands[0] is not v or mma.operands[1] is v or blk is None:
        return False
    between = blk.ops[blk.ops.index(op) + 1:]
    if mma not in between:
        return False
    return all(o.name in ("tk.fill", "arith.const") for o in between[:between.index(mma)])


def _widened_at_use(v: Value, uses: dict[Value, list[Operation]], regs: dict[Value, int],
                    reduce_at: list[int], span: tuple[int, int]) -> Value | None:
    """The operand of `v = tk.cast x` when the cast widens a register tile (bf16 -> f32) that nothing else reads
    and every reader of `v` is elementwise or a reduction: ptxas keeps x packed (two bf16 a register) and
    converts each element next to its use (rotary's four loaded tiles: 16 registers live, not 32 of f32;
    docs/passes.md, the predicted-vs-ptxas notes), so `v` costs nothing and x lives until `v`'s last use.
    Not when a reduction lies strictly inside `span` (v's definition .. last use; `reduce_at`: the positions of
    the kernel's tk.reduce ops, sorted): v is read before and after the reduction's shuffles, and ptxas converts
    once and keeps the f32 tile across them (softmax_bwd's yf and dyf around row_sum, softmax's chunk xcf around
    row_max: ptxas needs 80 and 96 registers at D = 4096 and DC = 8192 over 128 threads, where the packed count
    gave 56 and ptxas spilled at the 9 blocks per SM it led to)."""
    lo, hi = span
    i = bisect.bisect_right(reduce_at, lo)
    if i < len(reduce_at) and reduce_at[i] < hi:
        return None
    op = v.owner
    if not (isinstance(op, Operation) and op.name == "tk.cast" and isinstance(v.type, TileType)):
        return None
    x = op.operands[0]
    if x not in regs or not isinstance(x.type, TileType) or len(uses.get(x, [])) != 1:
        return None
    if DTYPE_BYTES[x.type.dtype] >= DTYPE_BYTES[v.type.dtype] or not regs[x] or regs[x] >= regs[v]:
        return None
    users = uses.get(v, [])
    if not users or any(u.name not in ELEMENTWISE + ("tk.reduce",) for u in users):
        return None
    return x


def _register_budget(kernel: Operation, threads: int) -> tuple[RegisterBudget, tuple[Value, int] | None]:
    budget, largest, _ = _register_peak(kernel, threads)
    return budget, largest


def _register_peak(kernel: Operation, threads: int) -> tuple[RegisterBudget, tuple[Value, int] | None,
                                                              list[tuple[Value, int]]]:
    """The register budget of the role of `threads` threads, its largest live tile (value, registers), and every
    value live at the peak with its registers per thread (largest first): the estimate's working."""
    order = list(kernel.walk())
    index = {id(op): i for i, op in enumerate(order)}
    end: dict[int, int] = {}
    for op in reversed(order):
        last = index[id(op)]
        for r in op.regions:
            for inner in r.block.ops:
                last = max(last, end[id(inner)])
        end[id(op)] = last

    defs: dict[Value, int] = {}
    accs: set[Value] = set()
    for op in order:
        if op is not kernel:
            for r in op.results:
                if op.name != "arith.const":
                    defs[r] = end[id(op)] if op.regions else index[id(op)]
        for region in op.regions:
            for a in region.block.args:
                defs[a] = index[id(op)]
        if op.name == "scf.for":
            accs.update(op.operands[3:], op.body.args[1:], op.results, op.body.terminator.operands)
        if op.name == "tk.mma":
            accs.update([op.operands[2], *op.results])

    last_use = dict(defs)
    for op in order:
        for i, v in enumerate(op.operands):
            if v not in defs:
                continue
            # loop bounds are read by every iteration's compare
            pos = end[id(op)] if op.name == "scf.for" and i < 3 else index[id(op)]
            p = parent_op(op)
            while p is not None and p is not kernel:
                if p.name == "scf.for" and defs[v] < index[id(p)]:
                    pos = max(pos, end[id(p)])
                p = parent_op(p)
            last_use[v] = max(last_use[v], pos)

    uses: dict[Value, list[Operation]] = {}
    for op in order:
        for v in op.operands:
            uses.setdefault(v, []).append(op)
    positions: dict[int, _BlockIndex] = {}
    regs = {v: 0 if _streamed(v, uses, positions) else _value_regs(v.type, threads)
            for v in defs if not isinstance(v.type, GlobalType)}
    for v in regs:
        if _sliced(v, uses):
            regs[v] = min(regs[v], SLICED_A_REGS)
    reduce_at = [index[id(op)] for op in order if op.name == "tk.reduce"]
    for v in list(regs):
        narrow = _widened_at_use(v, uses, regs, reduce_at, (defs[v], last_use[v]))
        if narrow is not None:  # the narrow operand stays live, packed, to the widened value's last use
            last_use[narrow] = max(last_use[narrow], last_use[v])
            regs[v] = 0
    # a value holds its registers at positions defs[v] .. max(last_use[v], defs[v] + 1) - 1: the pressure at
    # every position from one sweep over range ends (a list of the live values per position was quadratic
    # in a kernel of many long-lived values), the first position of the highest pressure is the peak
    span = {v: (defs[v], max(last_use[v], defs[v] + 1)) for v, r in regs.items() if r}
    delta = [0] * (len(order) + 1)
    for v, (lo, hi) in span.items():
        delta[lo] += regs[v]
        delta[hi] -= regs[v]
    frags = [mma_sync_fragment_regs(op) for op in order]
    peak, best, pressure = 0, None, 0
    for i, f in enumerate(frags):
        pressure += delta[i]
        if best is None or pressure + f > best:
            peak, best = i, pressure + f
    live = [v for v, (lo, hi) in span.items() if lo <= peak < hi]

    live_groups = [g for g in _address_groups(kernel, uses) if _live_across(g, peak, index, end, kernel)]
    # groups first used after the peak: ptxas can form early only what they share, base + the thread's offset,
    # one per tensor (400 sequential loops over X[block.x, k] would otherwise count 400 addresses at the first
    # loop's peak and refuse a kernel that needs a handful)
    later = {id(g[0].operands[0]) for g in live_groups if min(index[id(op)] for op in g) > peak}
    n_addresses = sum(1 for g in live_groups if min(index[id(op)] for op in g) <= peak) + len(later)
    mma_desc = any(o.name == "tk.mma" and any(is_shared(v.type) for v in o.operands[:2]) for o in order)
    budget = RegisterBudget(
        acc_regs=sum(regs[v] for v in live if v in accs),
        live_tile_regs=sum(regs[v] for v in live if v not in accs and not isinstance(v.type, ScalarType))
        + frags[peak],
        addr_regs=POINTER_REGS * n_addresses + sum(regs[v] for v in live if isinstance(v.type, ScalarType))
        + (WGMMA_DESC_REGS if mma_desc else 0),
        overhead=OVERHEAD_REGS,
    )
    tiles = [v for v in live if not isinstance(v.type, ScalarType)]
    biggest = max(tiles, key=lambda v: regs[v], default=None)
    detail = sorted(((v, regs[v]) for v in live), key=lambda vr: -vr[1])
    return budget, (None if biggest is None else (biggest, regs[biggest])), detail


def _address_groups(kernel: Operation, uses: dict[Value, list[Operation]]) -> list[list[Operation]]:
    """The global accesses that share one per-thread 64-bit address (POINTER_REGS registers), as lists of ops.
    A pointer is a kernel parameter in the constant bank (SASS `ULDC.64` / `c[0x0][...]`, a uniform register);
    what takes general registers is the address a thread forms from it, base + its offset in the tile. Register
    tiles of one type loaded from or stored to tensors of one dtype and shape at the same run-time coordinates
    have the same offset, and ptxas forms it once: rmsnorm_bwd's X, DY and DX at [t, 0] share one, added to each
    base in uniform registers (`IADD3 R16, P1, R36, UR16`). Constant coordinates do not part them: a whole
    tile step is an immediate offset (`STG.E [R2.64+0x80]`; rotary's X[.., 0] / X[.., 1]). Any other use of a
    pointer (a TMA copy, a shared copy) is a group of its own, except a TMA copy into a shared vector, which
    holds no per-thread address: the producer's one thread issues it from the descriptor and the block's
    coordinates (scalars, counted as such), and the consumers read the vector in shared memory (attention_bwd.tk's
    L and Delta; a TMA copy of a tile still counts one, as it always has: the estimate's tiles were fitted so)."""
    groups: dict[tuple, list[Operation]] = {}
    for arg in kernel.body.args:
        if not isinstance(arg.type, GlobalType):
            continue
        for op in uses.get(arg, []):
            if op.name == "tma.load" and isinstance(op.operands[0].type, VectorType):
                continue
            register = op.results[0].type if op.name == "tk.load" and op.results else (
                op.operands[1].type if op.name == "tk.store" and len(op.operands) > 1 else None)
            if op.operands[0] is not arg or not isinstance(register, (TileType, VectorType)) or \
                    is_shared(register):
                groups.setdefault(("pointer", id(arg)), []).append(op)
                continue
            coords = op.operands[2:] if op.name == "tk.store" else op.operands[1:]
            runtime = tuple(id(c) for c in coords
                            if not (isinstance(c.owner, Operation) and c.owner.name == "arith.const"))
            key = (arg.type.dtype, tuple(arg.type.dims), runtime, str(register))
            groups.setdefault(key, []).append(op)
    return list(groups.values())


def _live_across(accesses: list[Operation], peak: int, index: dict[int, int], end: dict[int, int],
                 kernel: Operation) -> bool:
    """Whether an address used by `accesses` holds its registers at op position `peak`: to its last access, an
    access inside a loop counting to the end of its outermost loop (every iteration uses it). Once the last
    access is done the address is dead: rotary loads Cos and Sin before its peak (the first output's cast) and
    attention_fwd copies Q before its loop, and neither address holds registers there. An address first used
    after the peak counts: ptxas forms addresses early (they depend on the block and thread indices only)."""
    last = None
    for op in accesses:
        hi = index[id(op)]
        q = parent_op(op)
        while q is not None and q is not kernel:
            if q.name == "scf.for":
                hi = max(hi, end[id(q)])
            q = parent_op(q)
        last = hi if last is None else max(last, hi)
    return last is not None and last >= peak


def _def_loc(v: Value) -> Loc | None:
    owner = v.owner
    if isinstance(owner, Operation):
        return owner.loc
    if isinstance(owner, Block) and owner.parent is not None and owner.parent.parent is not None:
        return owner.parent.parent.loc
    return None


# ---------------------------------------------------------------------------------------------
# Shared memory.


class _SharedMemory:
    def __init__(self, kernel: Operation, rings: dict[Value, Operation],
                 barrier_loops: set[Operation] | None = None):
        self.kernel = kernel
        self.rings = rings
        tma_dsts = {o.operands[0] for o in kernel.walk() if o.name == "tma.load"}
        tma_dsts |= {o.operands[1] for o in kernel.walk() if o.name == "tma.store"}
        # loops whose stages get full/empty mbarriers: TMA loops, and sm_80 cp.async producer loops
        self.tma_loops = {rings[v] for v in tma_dsts if v in rings} | (barrier_loops or set())
        self.tiles: list[tuple[Operation, int, int]] = []  # (alloc, slot bytes, align)
        for op in kernel.walk():
            if op.name != "tk.alloc":
                continue
            t = op.result.type
            align = int(t.get("align", 0) or 0) or PLAIN_SMEM_ALIGN
            if op.result in tma_dsts:
                align = max(align, TMA_SMEM_ALIGN)
            self.tiles.append((op, round_up(_shared_bytes(t), align), align))

    def _per_loop(self, loop: Operation) -> int:
        return sum(slot for op, slot, _ in self.tiles if self.rings.get(op.result) is loop)

    def breakdown(self, loops: list[Operation], stages: int) -> SharedBreakdown:
        fixed = sum(slot * _type_stages(op) for op, slot, _ in self.tiles if op.result not in self.rings)
        max_align = max((a for _, _, a in self.tiles), default=PLAIN_SMEM_ALIGN)
        return SharedBreakdown(
            stage_bytes=sum(self._per_loop(lp) for lp in loops),
            fixed_bytes=fixed,
            barrier_bytes=sum(BARRIERS_PER_STAGE * MBARRIER_BYTES * _loop_stages(lp, stages)
                              for lp in loops if lp in self.tma_loops),
            align_pad=max_align if max_align > PLAIN_SMEM_ALIGN else 0,
        )

    def total(self, loops: list[Operation], stages: int) -> int:
        b = self.breakdown(loops, stages)
        ring = sum(self._per_loop(lp) * _loop_stages(lp, stages) for lp in loops)
        return b.align_pad + b.fixed_bytes + ring + b.barrier_bytes

    def choose_stages(self, loops: list[Operation]) -> int:
        if not loops:
            return 1
        explicit = [lp for lp in loops if isinstance(lp.attrs.get("stages"), int)]
        if explicit:
            n = max(lp.attrs["stages"] for lp in explicit)
            if self.total(loops, n) > SMEM_PER_BLOCK:
                lp = next(lp for lp in explicit if lp.attrs["stages"] == n)
                raise CompileError(lp.loc, f"shared memory: @stages({n}) needs {self.total(loops, n)} B > "
                                   f"{SMEM_PER_BLOCK} B per block; {self.largest(loops, n)}",
                                   hint="use fewer stages or smaller tiles")
            return n
        for n in range(MAX_AUTO_STAGES, 0, -1):
            if self.total(loops, n) <= SMEM_PER_BLOCK:
                return n
        op = self._largest_op(loops, 1)
        raise CompileError(op.loc, f"shared memory: {self.largest(loops, 1)}; the block needs "
                           f"{self.total(loops, 1)} B > {SMEM_PER_BLOCK} B",
                           hint="use smaller tiles (shared memory is 227 KB per block)")

    def _consumers(self, loops: list[Operation], stages: int) -> list[tuple[int, Operation, int]]:
        out = []
        for op, slot, _ in self.tiles:
            loop = self.rings.get(op.result)
            n = _loop_stages(loop, stages) if loop is not None else _type_stages(op)
            out.append((slot * n, op, n if loop is not None else 0))
        return out

    def _largest_op(self, loops: list[Operation], stages: int) -> Operation:
        return max(self._consumers(loops, stages), key=lambda c: c[0])[1]

    def largest(self, loops: list[Operation], stages: int) -> str:
        total, op, n = max(self._consumers(loops, stages), key=lambda c: c[0])
        t = op.result.type
        if n:
            return f"{n} stage{'s' if n > 1 else ''} x {t} needs {total} B"
        return f"{t} needs {total} B"


def _loop_stages(loop: Operation, default: int) -> int:
    s = loop.attrs.get("stages")
    return s if isinstance(s, int) else default


def _type_stages(op: Operation) -> int:
    s = op.result.type.get("stages")  # a ring buffer the pipeline pass already made
    return s if isinstance(s, int) else 1


def _shared_bytes(t: TileType | VectorType) -> int:
    eb = DTYPE_BYTES[t.dtype]
    pad = int(t.get("pad", 0) or 0)
    if isinstance(t, TileType):
        return t.rows * (t.cols * eb + pad)
    return t.n * eb + pad
