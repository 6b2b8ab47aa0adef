"""pipeline-cp-async's `step_ahead`: on the mma.sync path, a rotatable cp.async loop whose two k16
steps of shared fragments fit the registers loads every fragment a whole k16 step ahead of its mma.syncs and is
rotated by a whole step (rotate = fragments_ahead = the units of one step), CUTLASS's double-buffered warp
fragments. Without a GPU: which loops it marks and which it leaves (registers, copy rounds, an explicit
parameter, the ablation), the order of the PTX it makes, and ptxas's registers (no spills).
tests/gpu/test_gpu_sm80.py runs the kernels on the GPU; docs/experiments.md ("sm_80 GEMM: fragments a whole k16 step ahead") has the timings."""

from __future__ import annotations

import re

import pytest

import tkir
from tkir.backend.lower_llvm import min_blocks_per_sm
from tkir.backend.toolchain import local_memory_ops
from tkir.facts import OccupancyPlan
from tkir.launch_bounds import streaming_blocks_per_sm, streaming_reg_cap
from tkir.passes.pipeline_cp_async import STEP_AHEAD_MAX_COPY_ROUNDS
from tkir.passes.registry import DEFAULT_PIPELINE
from tkir.tools.examples import load_companion


def _passes(cp: str | None = None) -> str | None:
    if cp is None:
        return None
    return ",".join(f"pipeline-cp-async{{{cp}}}" if p == "pipeline-cp-async" else p for p in DEFAULT_PIPELINE)


def _gemm(consts: dict, cp: str | None = None) -> tkir.api.CompiledKernel:
    passes = _passes(cp)
    consts = {**load_companion("examples/gemm.tk").DEFAULT_CONSTS, **consts}  # the auto ones at the header's old values
    return tkir.compile("examples/gemm.tk", target="sm_80", **({"passes": passes} if passes else {}), **consts)


def _marks(ir: str) -> tuple[int | None, int | None]:
    rot, ahead = re.search(r"frag_rotate = (\d+)", ir), re.search(r"frag_ahead = (\d+)", ir)
    return (int(rot.group(1)) if rot else None), (int(ahead.group(1)) if ahead else None)


# the 64 x 64 warp tiles of 8 warps: 4 units (k16 step x two n8 blocks) a step
@pytest.mark.parametrize("consts", [{}, dict(BM=128, BN=256, BK=32, STAGES=4), dict(BM=256, BN=128, BK=64, STAGES=4),
                                    dict(BM=256, BN=128, BK=32, STAGES=4)], ids=str)
def test_step_ahead_marks_the_gemm_loop_with_a_whole_step(consts: dict) -> None:
    k = _gemm(consts)
    assert _marks(k.ir) == (4, 4)
    assert not local_memory_ops(k.asm["sass"]) and k.asm["ptxas"].spill_stores == 0


def test_step_ahead_false_is_the_session_24_default() -> None:
    """The ablation: rotated by one unit, the backend's fragment distance (no frag_ahead written)."""
    assert _marks(_gemm({}, "step_ahead=false").ir) == (1, None)


@pytest.mark.parametrize("cp, marks", [("rotate=1", (1, 4)), ("fragments_ahead=2", (4, 2)), ("rotate=0", (None, 4)),
                                       ("rotate=2,fragments_ahead=1", (2, 1))])
def test_an_explicit_rotate_or_fragments_ahead_wins(cp: str, marks: tuple) -> None:
    assert _marks(_gemm({}, cp).ir) == marks


def test_two_blocks_per_sm_leave_no_room() -> None:
    """128 x 128 x 64 on 8 warps: the backend asks for two resident blocks (its accumulators leave room), so
    ptxas has 128 registers a thread; two steps of fragments beside the budget do not fit them (marked, it
    spilled 40 bytes): rotated by one unit, as before."""
    k = _gemm(dict(BM=128, BN=128, BK=64, STAGES=4))
    plan = OccupancyPlan.of(k.module.kernel)
    assert plan.blocks_per_sm == 1 and streaming_blocks_per_sm(k.module.kernel, plan.threads) == 2
    assert streaming_reg_cap(k.module.kernel, plan.threads) == 128
    assert _marks(k.ir) == (1, None)


def test_many_copy_rounds_leave_it_off() -> None:
    """gemm.tk BM = 64: a 64 x 256 x 64 tile on 4 warps copies 20 chunks of 16 bytes a thread per iteration (more
    than STEP_AHEAD_MAX_COPY_ROUNDS): left as before."""
    k = _gemm({"BM": 64})
    plan = OccupancyPlan.of(k.module.kernel)
    rounds = (64 * 64 + 64 * 256) * 2 // 16 // plan.threads
    assert rounds == 20 > STEP_AHEAD_MAX_COPY_ROUNDS
    assert _marks(k.ir) == (1, None)
    assert k.asm["ptxas"].spill_stores == 0


def test_attention_loops_are_not_marked() -> None:
    """Only the rotatable loop (one tk.mma as its last op) takes it; attention's loops multiply twice."""
    k = tkir.compile("examples/attention_fwd.tk", target="sm_80")
    assert _marks(k.ir) == (None, None)


def test_the_ptx_loads_the_next_step_while_this_one_multiplies() -> None:
    """128 x 256 x 32 (two k16 steps a k-tile): in the loop, the next k16 step's 4 A and 4 B ldmatrix are issued
    before the 32 mma.syncs of this one end; after the barrier (a whole step, 32 mma.syncs, before the end) the
    next k-tile's first step of 8 ldmatrix. The ablation rotates by one unit: 8 mma.syncs after its barrier."""
    def loop_after_barrier(ptx: str) -> list[str]:
        toks = re.findall(r"ldmatrix|mma\.sync|bar\.sync|bra\.uni", ptx)
        first = toks.index("mma.sync")
        body = toks[first:toks.index("bra.uni", first)]
        return body[len(body) - 1 - body[::-1].index("bar.sync") + 1:]

    consts = dict(BM=128, BN=256, BK=32, STAGES=4)
    after = loop_after_barrier(_gemm(consts).asm["ptx"])
    assert after.count("mma.sync") == 32 and after.count("ldmatrix") == 8
    assert after.index("ldmatrix") < after.index("mma.sync")  # the next k-tile's fragments first
    before = loop_after_barrier(_gemm(consts, "step_ahead=false").asm["ptx"])
    assert before.count("mma.sync") == 8


@pytest.mark.parametrize("consts", [{}, dict(BM=128, BN=128, BK=64, STAGES=4), {"BM": 64}], ids=str)
def test_launch_bounds_match_the_backends_minnctapersm(consts: dict) -> None:
    """tkir.launch_bounds is what the backend writes as .minnctapersm (and so the cap step_ahead checks)."""
    k = _gemm(consts)
    kernel, threads = k.module.kernel, k.launch.block[0]
    assert min_blocks_per_sm(kernel, threads) == streaming_blocks_per_sm(kernel, threads)
    assert f".minnctapersm {streaming_blocks_per_sm(kernel, threads)}" in k.asm["ptx"]
