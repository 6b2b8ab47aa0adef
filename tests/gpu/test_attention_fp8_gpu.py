"""The fp8 attention forward (examples/attention_fp8.tk) on the GPU, against float64 of the dequantised inputs.

* O within a relative L2 error of 3e-2 (the acceptance bound, examples/attention_fp8.py TOLERANCE; the error
  left is P's rounding to e4m3, about 2e-2 at unit-normal inputs; FlashAttention-3 reports an RMSE of 9.1e-3
  to 2.4e-2 for its fp8 forward, Shah et al. 2024, table 3), at (B, H, N, D) = (2, 3, 1000, 128) and
  (2, 3, 1000, 64) and N = 1 and 77 (one partial tile), causal and not; every element written (no NaN left of
  the NaN-filled outputs).
* L (the rows' natural log-sum-exp, from the f32 scores only) within 1e-4 relative L2 (relative to
  max(||ref||, sqrt(rows)): per element where L is near 0): fp8 wgmma accumulates with fewer bits than f32.
* A mask off by one key: in the causal kernel's first 16 rows (at most 16 keys each) one key let in or out
  moves L by 1e-2 or more; their max absolute error must stay under 1e-3.
* The tiles of the @tune space (BQ, BKV 64 / 128, STAGES 3), which change the fragment and the conversion.

Run on an H100 / H200:  python3 -m pytest -q tests/gpu/test_attention_fp8_gpu.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir
from tkir.tools.examples import load_companion

ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "examples" / "attention_fp8.tk"
O_BOUND = 3e-2   # ||O - ref|| / ||ref|| against float64 of the dequantised inputs (the acceptance bound)
L_BOUND = 1e-4   # ||L - ref|| / ||ref||: f32 scores from fp8 wgmma's accumulation
DIAG_ABS = 1e-3  # max |L - ref| over the first 16 rows (at most 16 keys each): a key let in or out moves it more

pytestmark = pytest.mark.gpu

CASES = [  # (sizes, consts)
    (dict(B=2, H=3, N=1000), {"D": 128}),
    (dict(B=2, H=3, N=1000), {"D": 64}),
    (dict(B=1, H=2, N=1), {"D": 128}),
    (dict(B=1, H=2, N=77), {"D": 128}),
    (dict(B=2, H=3, N=1000), {"D": 128, "BQ": 64, "BKV": 64}),
    (dict(B=2, H=3, N=1000), {"D": 128, "BKV": 64, "STAGES": 3}),
]


def _rel(torch, got, want) -> float:  # noqa: ANN001
    g = got.double()
    assert not bool(torch.isnan(g).any()), "NaN in the output: an element was never written"
    return float((g - want).norm() / want.norm())


@pytest.mark.timeout(900)
@pytest.mark.parametrize("causal", [0, 1], ids=["full", "causal"])
@pytest.mark.parametrize(("sizes", "consts"), CASES,
                         ids=["x".join(str(s[k]) for k in "BHN") + "-" + "".join(f"{k}{v}" for k, v in c.items())
                              for s, c in CASES])
def test_fp8_attention_matches_dequantised_float64(torch_module, sizes: dict, consts: dict, causal: int) -> None:  # noqa: ANN001
    torch = torch_module
    comp = load_companion(str(PATH))
    consts = {**consts, "CAUSAL": causal}
    k = tkir.compile(str(PATH), **consts)
    torch.manual_seed(sizes["N"] + causal)
    inputs = comp.torch_inputs(sizes, consts)
    k(*inputs)
    torch.cuda.synchronize()
    ref = comp.torch_reference(inputs, sizes, consts)
    o, lse = inputs[-2], inputs[-1]
    err_o = _rel(torch, o, ref["O"])
    # L relative to its norm, or per element where that norm is small: at N = 1 each row's L is one scaled score
    # (about +-0.3), and 4e-5 of absolute error (ex2/lg2.approx) was 1.3e-4 of a two-element norm
    diff = float((lse.double() - ref["L"].double()).norm())
    err_l = diff / max(float(ref["L"].double().norm()), lse.numel() ** 0.5)
    assert err_o < O_BOUND, f"{sizes} {consts}: ||O - ref|| / ||ref|| = {err_o:.3e} (bound {O_BOUND})"
    assert err_l < L_BOUND, f"{sizes} {consts}: ||L - ref|| / ||ref|| = {err_l:.3e} (bound {L_BOUND})"
    head = min(16, sizes["N"])
    diag = float((lse[..., :head].double() - ref["L"][..., :head]).abs().max())
    assert diag < DIAG_ABS, f"{sizes} {consts}: max |L - ref| over the first {head} rows = {diag:.3e}"


def test_fp8_attention_beside_the_peer_on_the_same_values(torch_module) -> None:  # noqa: ANN001
    """The companion's peer (SDPA, cuDNN, bf16 on the dequantised values) and the fp8 kernel agree within the fp8
    bound: the peer hook runs, and both compute the same attention."""
    torch = torch_module
    comp = load_companion(str(PATH))
    sizes, consts = dict(B=2, H=4, N=1024), {"CAUSAL": 1}
    k = tkir.compile(str(PATH), **consts)
    inputs = comp.torch_inputs(sizes, consts)
    k(*inputs)
    peer_o = comp.peer(inputs, sizes, consts)()
    torch.cuda.synchronize()
    err = _rel(torch, inputs[-2], peer_o.double())
    assert err < O_BOUND, f"fp8 kernel against SDPA (cuDNN, bf16): relative L2 {err:.3e}"
