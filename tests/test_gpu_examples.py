"""Examples compiled by tkir and run on the GPU against their references (marked gpu).

Fresh random inputs every run, outputs poisoned with NaN, ||out - ref|| / ||ref|| under the
example's bound. Sizes include ones that are not multiples of the block tile where the kernel
handles them (TMA out-of-bounds fill on loads, masked stores).
"""

from __future__ import annotations

import pytest

import tkir
from tkir.examples import load_companion

GEMM_SIZES = [dict(M=256, N=512, K=128), dict(M=1024, N=768, K=512), dict(M=2048, N=2048, K=2048)]


def _rel_err(torch, out, ref) -> float:
    assert not torch.isnan(out.float()).any(), "an output element was never written"
    return float((out.double() - ref.double()).norm() / ref.double().norm())


@pytest.mark.gpu
@pytest.mark.parametrize("sizes", GEMM_SIZES, ids=lambda s: "x".join(str(v) for v in s.values()))
def test_gemm_matches_reference(sizes: dict) -> None:
    torch = pytest.importorskip("torch")  # the GPU machine has torch; hooks build the inputs with it
    comp = load_companion("examples/gemm.tk")
    k = tkir.compile("examples/gemm.tk")
    ins = comp.torch_inputs(sizes, {})
    k(*ins)
    torch.cuda.synchronize()
    ref = comp.torch_reference(ins, sizes, {})["C"]
    assert _rel_err(torch, ins[2], ref) < comp.TOLERANCE
