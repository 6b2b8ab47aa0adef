"""The dK/dV attention-backward loop (tests/data/attention_dkdv.tk: dO read by two mmas of one iteration) on
the GPU through the default pipeline: overlap-mma declines to defer `dV += P^T dO` past the release of dO's
ring stage (passes/analysis.py, rotation_hazard), so dK and dV match the float64 reference on sm_90a as on
sm_80 (tests/passes/test_overlap_hazard.py checks the same in the interpreter)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tkir.tools.check import check_example

ROOT = Path(__file__).resolve().parents[2]
DKDV = str(ROOT / "tests/data/attention_dkdv.tk")
SIZES = [dict(B=1, H=1, N=64), dict(B=1, H=2, N=200), dict(B=2, H=3, N=1000)]

pytestmark = pytest.mark.gpu


def _reference():  # noqa: ANN202 - the test kernel's companion (a test input's: no bench hooks)
    spec = importlib.util.spec_from_file_location("attention_dkdv", ROOT / "tests/data/attention_dkdv.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "N{N}".format(**s))
def test_dkdv_with_the_default_pipeline(target: str, sizes: dict) -> None:
    result = check_example(DKDV, sizes, {}, compile_kw={"target": target}, seed=sizes["N"],
                           companion=_reference())
    assert result.ok, str(result)
