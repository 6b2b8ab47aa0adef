"""`@warps(W)` on conformance cases: a block of 1, 2 or 3 warps either works (PTX, ptxas, interpreter ==
numpy) or is refused with a located error, never a backend failure.

A sample of the table (every SAMPLE_EVERY-th case by id, W cycling over 1, 2, 3), so CI stays short.
The whole table ran on the CPU machine (docs/experiments.md, "`@warps(W)`"): @warps(2) in every context on both targets (1748
cases: 1203 work, 545 refused, 0 backend failures) and @warps(1), @warps(3) at the top level and in
loops (940 each: 720 work, 220 refused, 0 backend failures); the refusals are wgmma's whole warpgroups
(sm_90a kernels with `@`), register overflows and accumulators that do not split over 3 warps.
"""

from __future__ import annotations

import pytest

from conformance.cases import Case, all_cases
from conformance.run import REFUSED, WORKS, run_case

pytestmark = pytest.mark.conformance

SAMPLE_EVERY = 41   # a prime: the sample walks across families, contexts, dtypes and both targets
WARPS = (1, 2, 3)
SAMPLE = [(c, WARPS[i % len(WARPS)])
          for i, c in enumerate(sorted((c for c in all_cases() if not c.expect_refused), key=lambda c: c.id))
          if i % SAMPLE_EVERY == 0]


def test_the_sample_covers_both_targets_and_every_warp_count() -> None:
    assert {c.target for c, _ in SAMPLE} == {"sm_90a", "sm_80"}
    assert {w for _, w in SAMPLE} == set(WARPS)
    assert len(SAMPLE) >= 30


@pytest.mark.parametrize("case, warps", [pytest.param(c, w, id=f"{c.id}-warps{w}") for c, w in SAMPLE])
def test_case_with_warps_is_not_a_backend_failure(case: Case, warps: int) -> None:
    out = run_case(case, header=f"@warps({warps})\n")
    assert out.status in (WORKS, REFUSED), f"{case.id} @warps({warps}): {out.message}\n{out.detail}"
    if out.status == REFUSED and "tile matmul" in out.message:
        assert case.target == "sm_90a" and warps % 4, out.message


@pytest.mark.gpu
@pytest.mark.parametrize("case, warps", [pytest.param(c, w, id=f"{c.id}-warps{w}") for c, w in SAMPLE])
def test_case_with_warps_on_gpu_matches_interpreter(case: Case, warps: int) -> None:
    """The sample's working cases launched on the GPU: the outputs equal the interpreter's."""
    from conformance.test_conformance_gpu import assert_gpu_matches_interpreter

    out = run_case(case, header=f"@warps({warps})\n")
    if out.status == REFUSED:
        pytest.skip(f"refused on the CPU, as it should be: {out.message}")
    assert out.status == WORKS, f"{case.id} @warps({warps}): {out.status}: {out.message}"
    assert_gpu_matches_interpreter(case, out, f"{case.id} @warps({warps})")
