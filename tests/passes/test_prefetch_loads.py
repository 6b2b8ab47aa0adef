"""prefetch-loads (passes/prefetch_loads.py): a reducing loop's register loads issued one iteration ahead.

The FileCheck kernel (a row sum over chunks, ragged V) gives numpy's sums in the interpreter with the pass and
without it, on both targets; the user suite's row_argmax and cross-entropy are rewritten (their chunk loop has
row reductions), row loops are left alone, and the plan rule (more bytes in flight per SM) declines a loop whose
carried chunk would halve the blocks per SM, leaving the plan as it was.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.facts import OccupancyPlan
from tkir.passes.analysis import plan_with_more_registers
from tkir.passes.prefetch_loads import DONE_ATTR, SKIPPED_ATTR, PrefetchLoads
from tkir.passmanager import Options

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "tests" / "filecheck" / "passes" / "prefetch-loads.tk"


def _attrs(k: tkir.api.CompiledKernel) -> dict:
    return k.module.kernel.attrs


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("edits", ["", "-prefetch-loads"])
@pytest.mark.parametrize("v", [1, 1023, 1024, 3000])
def test_row_sums_match_numpy(target: str, edits: str, v: int) -> None:
    k = tkir.compile(str(KERNEL), target=target, pass_edits=edits)
    assert ("prefetched_loads" in _attrs(k)) == (edits == "")
    rng = np.random.default_rng(v)
    x = rng.standard_normal((3, v), np.float32).astype(ml_dtypes.bfloat16)
    y = np.full(3, np.nan, np.float32)
    tkir.interpret(k, x, y)
    np.testing.assert_allclose(y, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["row_argmax", "cross_entropy"])
def test_user_chunk_loops_prefetched(name: str) -> None:
    k = tkir.compile(str(ROOT / "examples" / "user" / f"{name}.tk"), target="sm_90a")
    assert _attrs(k)["prefetched_loads"] == 1
    loads = [op for op in k.module.kernel.walk() if op.name == "tk.load" and op.operands[0].name == "X"]
    assert [op.result.name for op in loads][:1] == ["x_first"]  # the first chunk before the loop


def test_row_loops_are_left_alone() -> None:
    """A loop over rows (examples/rmsnorm_bwd.tk's grid-stride loop) is not a chunk walk: not a candidate."""
    for name in ("rmsnorm_bwd", "layernorm_bwd"):
        k = tkir.compile(str(ROOT / "examples" / f"{name}.tk"), target="sm_90a")
        assert DONE_ATTR not in _attrs(k) and SKIPPED_ATTR not in _attrs(k)


def test_plan_rule_declines_fewer_bytes_in_flight() -> None:
    """The rule the pass decides by: the carried chunk must leave more than half the blocks per SM. With the plan's
    count raised by hand (an IR a pass before it could have planned), the same loop is declined, and the plan left
    as it was."""
    k = tkir.compile(str(KERNEL), target="sm_90a", pass_edits="-prefetch-loads")
    module = k.module
    plan = OccupancyPlan.of(module.kernel)
    grown, _ = plan_with_more_registers(plan, 4)
    assert grown is not None and grown.blocks_per_sm < plan.blocks_per_sm * 2
    module.kernel.attrs[OccupancyPlan.ATTR] = replace(plan, blocks_per_sm=2 * grown.blocks_per_sm).to_attr()
    before = dict(module.kernel.attrs[OccupancyPlan.ATTR])
    PrefetchLoads().run(module, Options())
    assert DONE_ATTR not in module.kernel.attrs
    assert f"the plan would go from {2 * grown.blocks_per_sm} blocks per SM to {grown.blocks_per_sm}" in \
        module.kernel.attrs[SKIPPED_ATTR]
    assert module.kernel.attrs[OccupancyPlan.ATTR] == before
    module.kernel.attrs[OccupancyPlan.ATTR] = plan.to_attr()  # the plan as planned: rewritten, the plan grown
    del module.kernel.attrs[SKIPPED_ATTR]
    PrefetchLoads().run(module, Options())
    assert module.kernel.attrs[DONE_ATTR] == 2  # both loops split-masks made
    assert OccupancyPlan.of(module.kernel).budget.total == plan.budget.total + 2 * 4


def test_plan_with_more_registers_limits() -> None:
    k = tkir.compile(str(KERNEL), target="sm_90a", pass_edits="-prefetch-loads")
    plan = OccupancyPlan.of(k.module.kernel)
    grown, why = plan_with_more_registers(plan, 1000)
    assert grown is None and "over the 255 a block of 128 threads can have" in why
    assert plan_with_more_registers(None, 4) == (None, "no one-role occupancy plan")
