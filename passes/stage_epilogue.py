"""stage-epilogue: an mma.sync accumulator stored to global goes through shared memory, 16 bytes a lane.

Rewrites `tk.store %G, %v, coords...` where `%v` is a bf16 register tile in the mma.sync accumulator
layout (`mma_c`: the sm_80 path's GEMM and attention epilogues) into

    %G_stage = tk.alloc : st<bf16, W * 16, Cw, swizzle=S, align=1024>
    tk.store_warp_staged %G, %v, %G_stage, coords... {rows = 16}

(W: the layout's warps, Cw: the columns of one warp's block of the tile, S: 128 where a stage row is
whole 128-byte panels, else 64). The backend (backend/rules_epilogue.py) has each warp write one m16
block of its accumulator at a time into its own 16 rows of the stage (bf16 pairs, 4-byte st.shared,
swizzled: the 8 rows x 16 bytes of one store land in 32 different banks), sync its lanes
(`bar.warp.sync`), read the rows back 16 bytes a lane and store them to global with one 16-byte
`st.global.v4` a lane: 8 lanes write one 128-byte line, where the plain store (backend/rules_sm80.py)
writes 4-byte pairs, 8 rows x 16 bytes per instruction. No block barrier: a warp only reads the rows it
wrote. A chunk that is not 16-byte aligned in global memory or that crosses the tensor's last column is
stored element by element (2-byte stores), so ragged and odd-width outputs stay exact.

Why (docs/experiments.md, "sm_80 GEMM: CUTLASS's mma.sync GEMM as the reference"): on the H200 the sm_80
gemm's epilogue (64 predicated st.global.b32 a thread at 256 x 128) spent 4.6-5.9% of the kernel's warp
samples in store throttling and draining (Nsight Compute `lg_throttle` + `drain`), CUTLASS's Ampere GEMM,
which stages its epilogue through shared memory, 0.3%.

Runs after plan-occupancy and the loop passes (the plan's shared memory is final): the stage goes after
the kernel's other allocations and is added only where the block still fits (at most SMEM_PER_BLOCK bytes,
and the plan's blocks per SM still resident); `occupancy.smem_bytes` and its fixed bytes grow by it. Stores
left as they are get `stage_epilogue_skipped = "..."` (the reason): the stage would not fit, or a warp's
block is narrower than 32 columns. The ablation is a pipeline without the pass.

It runs after bank-conflicts, so it writes the stage's `access` entries itself (docs/passes.md, bank-conflicts):
the pair stores (`st.shared.b32`, tkir/layout.py bf16_pair_pattern) and the 16-byte reads (`ld.shared.v4`, lane L
on chunk L of the warp's rows) of one warp's 16 rows, under the stage's swizzle and unswizzled.
"""

from __future__ import annotations

from tkir.access_report import AccessReport, add_report
from tkir.facts import OccupancyPlan
from tkir.ir import Module, Operation
from tkir.layout import Access, SharedLayout, bf16_pair_pattern, conflict_degree, layout_of, tma_pattern
from tkir.passes.analysis import grow_plan_smem, smem_growth_problem
from tkir.passmanager import Options, Pass
from tkir.shared_plan import plan_shared
from tkir.types import GlobalType, TileType, is_register

STAGE_ROWS = 16              # one m16 block of mma.sync.m16n8k16's accumulator per warp at a time
STAGE_ALIGN = 1024           # as select-swizzle aligns 128B-swizzled tiles
MIN_WARP_COLS = 32           # 64-byte stage rows: the narrowest swizzle that keeps the pair stores conflict-free


class StageEpilogue(Pass):
    name = "stage-epilogue"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            for op in [o for o in kernel.walk() if _is_mma_c_store(o)]:
                _stage(kernel, op)


def _is_mma_c_store(op: Operation) -> bool:
    if op.name != "tk.store" or len(op.operands) < 2 or not isinstance(op.operands[0].type, GlobalType):
        return False
    v = op.operands[1].type
    lay = layout_of(v, op.loc) if isinstance(v, TileType) and is_register(v) else None
    return lay is not None and lay.kind == "mma_c" and v.dtype == "bf16" and op.operands[0].type.rank >= 2


def _stage(kernel: Operation, op: Operation) -> None:
    v: TileType = op.operands[1].type
    lay = layout_of(v, op.loc)
    warps, width = lay.split, v.cols // lay.col_warps
    if width % MIN_WARP_COLS:
        op.attrs["stage_epilogue_skipped"] = f"a warp's block is {width} columns, not a multiple of {MIN_WARP_COLS}"
        return
    span = 128 if (width * 2) % 128 == 0 else 64
    stage_t = TileType("st", v.dtype, warps * STAGE_ROWS, width, (("swizzle", span), ("align", STAGE_ALIGN)))
    g = op.operands[0]
    alloc = Operation("tk.alloc", [], [stage_t], result_names=[f"{g.name}_stage"], loc=op.loc)
    body = kernel.body
    last = max((i for i, o in enumerate(body.ops) if o.name in ("tk.alloc", "pipe.barriers")), default=-1)
    before = plan_shared(kernel).total
    body.insert(last + 1, alloc)
    grow = plan_shared(kernel).total - before
    plan = OccupancyPlan.of(kernel)
    reason = smem_growth_problem(plan, grow, "the stage")
    if reason is not None:
        body.ops.remove(alloc)
        op.attrs["stage_epilogue_skipped"] = reason
        return
    grow_plan_smem(kernel, plan, grow)
    op.name = "tk.store_warp_staged"
    op.operands = [op.operands[0], op.operands[1], alloc.result, *op.operands[2:]]
    op.attrs.pop("no_tma_reason", None)
    op.attrs["rows"] = STAGE_ROWS
    _report(op, alloc.result.name, v.dtype, width, span)


def _report(op: Operation, tile: str, dtype: str, width: int, span: int) -> None:
    """The stage's accesses by one warp (its own STAGE_ROWS rows), with their degrees."""
    row_bytes = width * 2
    chunks = tma_pattern(STAGE_ROWS, row_bytes)  # lane L on chunk L of each 32, row-major: the read-back
    reads = Access("ld.shared.v4", chunks.width, chunks.rows, chunks.bytecols)
    stage = SharedLayout(dtype, STAGE_ROWS, width, span)
    plain = SharedLayout(dtype, STAGE_ROWS, width)
    for access in (bf16_pair_pattern("st.shared.b32", STAGE_ROWS, row_bytes), reads):
        add_report(op.attrs, AccessReport(access.op, tile, conflict_degree(access, stage),
                                          conflict_degree(access, plain)))
