"""coarsen-rows on the GPU: the user-kernel suite's LayerNorm backward (examples/user/layernorm_bwd.tk), which
the default pipeline runs on min(N, NUM_SMS * K) blocks walking rows with DW and DB summed in registers, is
correct where every block walks several rows (N well above the grid) and at a ragged N, against the float64
reference; and the same with the pass switched off (`coarsen-rows{blocks_per_sm=0}`), the ablation's
baseline. Its speed: `tkc bench examples/user/layernorm_bwd.tk --reps 10` (docs/experiments.md, "coarsen-rows")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tkir.passes.registry import DEFAULT_PIPELINE
from tkir.tools.check import check_example

KERNEL = str(Path(__file__).resolve().parents[2] / "examples" / "user" / "layernorm_bwd.tk")
OFF = ",".join("coarsen-rows{blocks_per_sm=0}" if p == "coarsen-rows" else p for p in DEFAULT_PIPELINE)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", [1000, 4096, 4099])
def test_coarsened_layernorm_backward(n: int) -> None:
    r = check_example(KERNEL, {"N": n}, {}, seed=n)
    assert r.ok, f"coarsened, N = {n}: {r}"


def test_layernorm_backward_without_the_pass() -> None:
    r = check_example(KERNEL, {"N": 4096}, {}, compile_kw={"passes": OFF}, seed=1)
    assert r.ok, f"coarsen-rows off, N = 4096: {r}"
