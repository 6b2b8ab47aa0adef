"""On the GPU: the kernels tests/backend/test_mutation_kills.py models on the CPU, against the interpreter (marked gpu).

The CPU tests derive what a wgmma reads from the PTX ISA's descriptor and swizzle rules; these run the
same kernels on the H200, so the rules themselves are checked where only hardware can check them:
the 32B and 64B swizzles (TMA-filled and cp.async-filled), a register A with a K-major B, a transposed
f16 A, and row reductions over 8 lanes with four rows per thread. `scripts/mutate.py --gpu` runs them
for every mutant the CPU tests let through (docs/mutation.md).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_mutation_kills import REGISTER_A_K_MAJOR_B, SWIZZLED_GEMM, WGMMA_TRANS_A

import tkir
from tkir.backend import cuda as tkcuda

BF16 = ml_dtypes.bfloat16

# name -> (source, consts, compile options)
CASES = {
    "swizzle-64-32": (SWIZZLED_GEMM.replace("SA", "64").replace("SB", "32"), {}, {}),
    "swizzle-32-64": (SWIZZLED_GEMM.replace("SA", "32").replace("SB", "64"), {}, {}),
    "swizzle-64-32-no-tma": (SWIZZLED_GEMM.replace("SA", "64").replace("SB", "32"), {}, {"no_tma": True}),
    "swizzle-32-128-no-tma": (SWIZZLED_GEMM.replace("SA", "32").replace("SB", "128"), {}, {"no_tma": True}),
    "f16-m-major-a": (WGMMA_TRANS_A, {}, {}),
    "register-a-k-major-b": (REGISTER_A_K_MAJOR_B, {}, {}),
}


def _inputs(name: str, rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs, then the output (NaN: unwritten elements show)."""
    if name == "register-a-k-major-b":
        q, kk = rng.standard_normal((256, 64)).astype(BF16), rng.standard_normal((64, 64)).astype(BF16)
        return [q, kk, np.full((256, 64), np.nan, np.float32)]
    dt = np.float16 if name.startswith("f16") else BF16
    a, b = rng.standard_normal((256, 256)).astype(dt), rng.standard_normal((256, 256)).astype(dt)
    return [a, b, np.full((256, 256), np.nan, np.float32)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CASES))
def test_modelled_kernel_matches_interpreter_on_gpu(name: str, tmp_path) -> None:
    src, consts, opts = CASES[name]
    path = tmp_path / "k.tk"
    path.write_text(src, encoding="utf-8")
    k = tkir.compile(str(path), **opts, **consts)
    host = _inputs(name, np.random.default_rng(3))
    ref = [a.copy() for a in host]
    tkir.interpret(k, *ref)
    dev = [tkcuda.to_device(a) for a in host]
    k(*dev)
    got, want = dev[-1].numpy().astype(np.float64), ref[-1].astype(np.float64)
    assert not np.isnan(got).any(), f"{name}: output not fully written"
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert err < 1e-2, f"{name}: rel err {err:.3e}"


@pytest.mark.gpu
@pytest.mark.parametrize("consts", [{"D": 64, "ROWS": 64, "WG": 1}, {"D": 64}])
def test_row_reductions_of_several_rows_per_thread_on_gpu(consts: dict) -> None:
    """softmax with 8 lanes per row (D = 64 bf16) and four rows per thread (ROWS = 64 over 4 warps)."""
    from pathlib import Path

    k = tkir.compile(str(Path(__file__).resolve().parents[2] / "tests" / "data" / "rows" / "softmax.tk"), **consts)
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((1000, consts["D"])) * 4).astype(BF16)
    y = np.full_like(x, np.nan)
    ref = [x.copy(), y.copy()]
    tkir.interpret(k, *ref)
    dev = [tkcuda.to_device(a) for a in (x, y)]
    k(*dev)
    got, want = dev[1].numpy().astype(np.float64), ref[1].astype(np.float64)
    assert not np.isnan(got).any()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2
