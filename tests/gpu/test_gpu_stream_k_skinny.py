"""Skinny (decode-time) GEMMs with stream-K on the GPU: M = 1..64 rows, so the output has fewer tiles
than the SMs and `@stream_k(1)` (examples/gemm.tk's SK) spreads the K loops of all tiles over the
blocks (passes/stream_k.py). Each case launches the same compiled kernel three times on fresh inputs
(its workspace and launch count carry over) and checks C against the companion's reference through
tkir.tools.check.check_kernel. Marked gpu: skipped where no CUDA device exists. The CPU-side check of the
same schedule at small sizes is tests/passes/test_stream_k.py (the interpreter).
"""

from __future__ import annotations

import numpy as np
import pytest

from tkir import symexpr
from tkir.tools.check import check_kernel
from tkir.tools.examples import load_companion

GEMM = "examples/gemm.tk"
# (sizes, consts): N = 4096, K = 14336 (a decode-time MLP projection); K = 14376 is not a multiple of BK
CASES = [(dict(M=m, N=4096, K=14336), c) for m in (1, 16, 64)
         for c in ({}, {"BM": 64, "BN": 128, "STAGES": 6}, {"BM": 64, "BN": 64, "STAGES": 8})]
CASES += [(dict(M=1, N=4096, K=14376), {"BM": 64, "BN": 128}), (dict(M=17, N=4104, K=14336), {})]
# the kernel's own min_iters (@stream_k(SK, min_iters=SKI)): N = K = 4096 with 64 x 64 tiles, each tile in
# two halves (128 blocks); 64 x 128 tiles over 64 blocks; K = 4000 leaves a ragged last iteration
CASES += [(dict(M=m, N=4096, K=k), {"BM": 64, "BN": bn, "STAGES": 8, "SKI": 32})
          for m, bn, k in ((64, 64, 4096), (16, 128, 4096), (1, 128, 4096), (33, 64, 4000))]


@pytest.mark.gpu
@pytest.mark.parametrize("sizes, consts", CASES,
                         ids=["-".join(f"{k}{v}" for k, v in {**s, **c}.items()) for s, c in CASES])
def test_skinny_stream_k_gemm_on_gpu(sizes: dict, consts: dict) -> None:
    import tkir
    from tkir.backend import cuda as tkcuda

    comp = load_companion(GEMM)
    # the auto consts the case does not name at the header's old values (examples/gemm.py): the kernel the
    # case describes, compiled once (no per-size choice at the call)
    k = tkir.compile(GEMM, **{**comp.DEFAULT_CONSTS, "SK": 1, **consts})
    assert "stream_k" in k.module.kernel.attrs
    sms = tkcuda.device_attribute("MULTIPROCESSOR_COUNT", 0)
    bm, bn = consts.get("BM", 128), consts.get("BN", 256)
    tiles = -(-sizes["M"] // bm) * -(-sizes["N"] // bn)
    blocks = symexpr.evaluate(k.module.kernel.attrs["grid"][0], {**sizes, "NUM_SMS": sms})
    assert tiles < blocks <= sms  # the split happens: more blocks than tiles
    rng = np.random.default_rng(0)
    for launch in range(3):
        result = check_kernel(k, comp, sizes, {"SK": 1, **consts}, rng=rng, name="gemm")
        assert result.ok, f"launch {launch + 1}: {result}"
