"""Based linear attention (examples/based.tk) and tk.outer on the GPU (marked gpu).

* issue 13's four sizes (B, H, N) in {(1, 1, 64), (2, 4, 1000), (16, 16, 1024), (16, 16, 16384)}
  against the fp32 torch reference (chunked: the large sizes fit in memory), O and the three final
  states each under 1e-2 relative error, fresh inputs, outputs poisoned with NaN; on sm_90a, and the
  small sizes on sm_80 too;
* the same at the small sizes without torch: tkir device arrays against the numpy reference;
* the FileCheck kernel of tk.outer (tests/filecheck/backend/src/outer.tk: both shuffle patterns, the
  sliced wgmma) against the interpreter running the same compiled IR, on both targets.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.backend import cuda as tkcuda
from tkir.tools.bench import bench_one
from tkir.tools.check import check_kernel
from tkir.tools.examples import load_companion, relative_error

ROOT = Path(__file__).resolve().parents[2]
BASED = str(ROOT / "examples" / "based.tk")
OUTER = str(ROOT / "tests" / "filecheck" / "backend" / "src" / "outer.tk")
BF16 = ml_dtypes.bfloat16
ISSUE_SIZES = [dict(B=1, H=1, N=64), dict(B=2, H=4, N=1000), dict(B=16, H=16, N=1024), dict(B=16, H=16, N=16384)]
CASES = [(s, "sm_90a") for s in ISSUE_SIZES] + [(s, "sm_80") for s in ISSUE_SIZES[:3]]


@pytest.mark.gpu
@pytest.mark.parametrize("sizes, target", CASES,
                         ids=[f"{t}-B{s['B']}-H{s['H']}-N{s['N']}" for s, t in CASES])
def test_based_matches_torch_reference_on_gpu(sizes: dict, target: str, torch_module: object) -> None:
    # torch_module fails (not skips) where a GPU exists without torch: inputs and the reference use it
    comp = load_companion(BASED)
    assert comp.GPU_SIZES == ISSUE_SIZES
    row = bench_one(BASED, comp, sizes, {}, reps=1, warmup=0, peer=False, compile_kw={"target": target})
    assert row.ok and row.rel_err < 1e-2, f"{target} {sizes}: max rel_err over O, A0, A1, A2 {row.rel_err:.3e}"


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("sizes", ISSUE_SIZES[:2], ids=["1x1x64", "2x4x1000"])
def test_based_matches_numpy_reference_on_gpu(sizes: dict, target: str) -> None:
    """No torch: tkir's device arrays, every output against the float64 reference."""
    comp = load_companion(BASED)
    k = tkir.compile(BASED, target=target)
    result = check_kernel(k, comp, sizes, {}, rng=np.random.default_rng(11), name=f"based {target}")
    assert result.ok, result  # every output within the companion's 1e-2; one still NaN (unwritten) fails


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_outer_kernel_matches_interpreter_on_gpu(target: str) -> None:
    k = tkir.compile(OUTER, target=target)
    rng = np.random.default_rng(5)
    n = 200  # a ragged last chunk
    q, kk = (rng.standard_normal((n, 16)).astype(BF16) for _ in range(2))
    s = rng.standard_normal((256, 64)).astype(BF16)
    v = rng.standard_normal((n, 64)).astype(BF16)
    host = [q, kk, s, v, np.full((n, 64), np.nan, BF16), np.full((256, 64), np.nan, np.float32)]
    want = [a.copy() for a in host]
    tkir.interpret(k, *want)
    dev = [tkcuda.to_device(a) for a in host]
    k(*dev)
    for i in (4, 5):
        got = dev[i].numpy().astype(np.float64)
        assert not np.isnan(got).any(), f"{target}: output {i} not fully written"
        err = relative_error(got, want[i].astype(np.float64))
        assert err < 1e-2, f"{target}: output {i} rel err {err:.3e}"
