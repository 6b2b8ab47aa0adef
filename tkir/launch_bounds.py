"""The resident blocks per SM a kernel without warp roles asks ptxas for (`.minnctapersm`), and so the
registers per thread ptxas may give it: the backend writes the count (backend/lower_llvm.py
min_blocks_per_sm) and passes that decide by registers read the same cap (passes/pipeline_cp_async.py)."""

from __future__ import annotations

from tkir.facts import OccupancyPlan, requested_blocks_per_sm
from tkir.ir import Operation
from tkir.target import MAX_REGS_PER_THREAD, NUM_SMS, REG_ALLOC_UNIT, REGS_PER_SM

MIN_BLOCKS_STREAMING = 2   # resident blocks asked for kernels without warp specialization
MIN_REGS_STREAMING = 32    # ... unless that would leave fewer registers than this per thread


def streaming_blocks_per_sm(kernel: Operation, threads: int) -> int:
    """`.minnctapersm` of a kernel without warp roles: at least two resident blocks (MIN_BLOCKS_STREAMING), so
    one block's loads overlap another's math and stores, where the plan's accumulators and overhead leave room
    for them, or the plan's count if higher; with `@blocks_per_sm(B)` (attr `min_blocks_per_sm = B`) the plan's
    count, which plan-occupancy made at least B (B itself in IR without a plan). After ptxas spilled at that
    count, the backend's choice (kernel attr `spill_fallback = {blocks_per_sm = B, to = M, ...}`, M < B the highest
    count ptxas does not spill at, backend/lower.py avoid_spills) is `to`."""
    fallback = kernel.attrs.get("spill_fallback")
    if isinstance(fallback, dict) and isinstance(fallback.get("to"), int):
        return fallback["to"]
    plan = OccupancyPlan.of(kernel)
    planned = (plan.blocks_per_sm if plan is not None else None) or 1
    requested = requested_blocks_per_sm(kernel)
    if requested is not None:
        return max(planned, requested)
    budget = plan.budget if plan is not None else None  # accumulators (mma.sync tiles) cannot be squeezed
    floor = max(MIN_REGS_STREAMING, budget.acc_regs + budget.overhead if budget is not None else 0)
    fits = REGS_PER_SM // (threads * floor)
    return max(planned, min(MIN_BLOCKS_STREAMING, fits))


def streaming_reg_cap(kernel: Operation, threads: int) -> int:
    """Registers per thread ptxas may use at `streaming_blocks_per_sm` (a multiple of the allocation unit, at
    most MAX_REGS_PER_THREAD)."""
    blocks = streaming_blocks_per_sm(kernel, threads)
    return min(MAX_REGS_PER_THREAD, REGS_PER_SM // (blocks * threads) // REG_ALLOC_UNIT * REG_ALLOC_UNIT)


def resident_slots(kernel, num_sms: int = NUM_SMS) -> int:  # kernel: a tkir.compile result
    """Blocks of a compiled row kernel resident on the GPU at once: the SMs times the blocks per SM that
    ptxas is asked to keep resident (streaming_blocks_per_sm)."""
    return num_sms * streaming_blocks_per_sm(kernel.module.kernel, kernel.launch.block[0])


def partial_rows(n: int, rows: int, slots: int) -> int:
    """G, the blocks (and partial-sum rows) of a row kernel that walks tiles b, b + G, ... (rmsnorm_bwd.tk,
    layernorm_bwd.tk), for N = n rows in tiles of `rows`: at most `slots` blocks (one wave of resident
    blocks), each walking the same number of tiles, so that no block waits on a longer one; >= 1."""
    tiles = max(1, -(-n // rows))
    per_block = -(-tiles // slots)
    return -(-tiles // per_block)
