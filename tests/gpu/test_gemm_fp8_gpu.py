"""The fp8 GEMMs on the GPU (examples/gemm_fp8.tk, examples/gemm_fp8_block.tk) and fp8 casts on the GPU.

* Correctness against float64 of the dequantised inputs, ||C - ref|| / ||ref|| < 3e-2, at sizes no tile
  divides (M, N, K ragged; K a multiple of 16 and N of 8, TMA's 16-byte row strides) and at M = 1 and 16,
  each configuration of the @tune space that changes the code path (BN, Stream-K) included.
* Against torch._scaled_mm (row-wise scales [M, 1] x [1, N], bf16 out, and a per-tensor scale) on the same
  fp8 operands: the two differ by accumulation order and one bf16 rounding only.
* The casts: e4m3(x) / e5m2(x) of every fp8 value, the midpoints between them (ties to even), NaN, infinities,
  overflow (saturation to 448 / 57344) and subnormals, through registers, global and shared memory and back
  (tests/backend/test_fp8_backend.py's kernel), on both targets' code (sm_80's integer emulation runs on the
  H100 too), bit for bit against tkir/scalar.py's rule. This is where the byte order of PTX's fp8 cvts
  (the first source into the upper byte) is checked on hardware.

Run on an H100 / H200:  python3 -m pytest -q tests/gpu/test_gemm_fp8_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tkir
from tkir.tools.examples import load_companion

ROOT = Path(__file__).resolve().parents[2]
BOUND = 3e-2  # ||C - ref|| / ||ref|| against float64 of the dequantised inputs (the acceptance bound)
PEER_BOUND = 1e-2  # tkir against torch._scaled_mm on the same fp8 operands: accumulation order, bf16 rounding

pytestmark = pytest.mark.gpu

RAGGED = [  # (kernel, sizes, consts)
    ("gemm_fp8", dict(M=200, N=136, K=304), {}),
    ("gemm_fp8", dict(M=1000, N=744, K=528), {}),
    ("gemm_fp8", dict(M=1000, N=744, K=528), {"BN": 128, "BM": 64}),
    ("gemm_fp8", dict(M=333, N=1032, K=4112), {"SK": 1}),           # Stream-K: K split over blocks
    ("gemm_fp8", dict(M=1, N=4096, K=14336), {}),
    ("gemm_fp8", dict(M=16, N=14336, K=4096), {"SK": 1, "BM": 64}),
    ("gemm_fp8", dict(M=4096, N=4096, K=4096), {}),
    ("gemm_fp8_block", dict(M=200, N=136, K=304), {}),
    ("gemm_fp8_block", dict(M=1000, N=744, K=528), {"BM": 64}),
    ("gemm_fp8_block", dict(M=61, N=4096, K=14336), {}),
    ("gemm_fp8_block", dict(M=4096, N=4096, K=4096), {}),
]
OPTIONS = [{"swizzle": "none"}, {"no_tma": True}]  # the interleaved wgmma layout; cp.async copies on sm_90a


def _reference64(torch, comp, inputs: list, sizes: dict):  # noqa: ANN001, ANN202
    a, b, sa, sb, _ = inputs
    if sa.dim() == 1:
        return (a.double() * sa.double()[:, None]) @ (b.double() * sb.double()[:, None]).T
    kslice = torch.arange(sizes["K"], device=a.device) // comp.BLOCK
    return (a.double() * sa.double()[kslice, :].T) @ (b.double() * sb.double()[kslice, :].T).T


def _rel(torch, got, want) -> float:  # noqa: ANN001
    g = got.double()
    assert not bool(torch.isnan(g).any()), "NaN in the output: an element was never written"
    return float((g - want.double()).norm() / want.double().norm())


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("name", "sizes", "consts"), RAGGED,
                         ids=[f"{n}-{s['M']}x{s['N']}x{s['K']}-" + "".join(f"{k}{v}" for k, v in c.items())
                              for n, s, c in RAGGED])
def test_fp8_gemm_matches_dequantised_float64(torch_module, name: str, sizes: dict, consts: dict) -> None:  # noqa: ANN001
    torch = torch_module
    comp = load_companion(str(ROOT / "examples" / f"{name}.tk"))
    k = tkir.compile(str(ROOT / "examples" / comp.KERNEL), **consts)
    inputs = comp.torch_inputs(sizes, consts)
    k(*inputs)
    torch.cuda.synchronize()
    err = _rel(torch, inputs[-1], _reference64(torch, comp, inputs, sizes))
    assert err < BOUND, f"{name} {sizes} {consts}: ||C - ref|| / ||ref|| = {err:.3e} (bound {BOUND})"


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: next(iter(o)))
def test_fp8_gemm_other_paths(torch_module, options: dict) -> None:  # noqa: ANN001
    """The fp8 wgmma through the unswizzled (interleaved) operand layout and through cp.async copies."""
    torch = torch_module
    comp = load_companion(str(ROOT / "examples" / "gemm_fp8.tk"))
    sizes = dict(M=1000, N=744, K=528)
    k = tkir.compile(str(ROOT / "examples" / "gemm_fp8.tk"), **options)
    inputs = comp.torch_inputs(sizes, {})
    k(*inputs)
    torch.cuda.synchronize()
    err = _rel(torch, inputs[-1], _reference64(torch, comp, inputs, sizes))
    assert err < BOUND, f"{options}: ||C - ref|| / ||ref|| = {err:.3e} (bound {BOUND})"


@pytest.mark.parametrize("sizes", [dict(M=256, N=4096, K=4096), dict(M=4096, N=14336, K=4096),
                                   dict(M=64, N=4096, K=14336)], ids=lambda s: f"{s['M']}x{s['N']}x{s['K']}")
def test_fp8_gemm_matches_scaled_mm_rowwise(torch_module, sizes: dict) -> None:  # noqa: ANN001
    torch = torch_module
    comp = load_companion(str(ROOT / "examples" / "gemm_fp8.tk"))
    k = tkir.compile(str(ROOT / "examples" / "gemm_fp8.tk"))
    inputs = comp.torch_inputs(sizes, {})
    k(*inputs)
    peer = comp.peer(inputs, sizes, {})()
    torch.cuda.synchronize()
    assert peer.dtype == torch.bfloat16 and peer.shape == inputs[-1].shape
    diff = _rel(torch, inputs[-1], peer)
    assert diff < PEER_BOUND, f"{sizes}: tkir vs torch._scaled_mm (row-wise): {diff:.3e} (bound {PEER_BOUND})"


def test_fp8_gemm_per_tensor_scale_matches_scaled_mm(torch_module) -> None:  # noqa: ANN001
    """A per-tensor scale is gemm_fp8.tk with SA and SB each holding one repeated value (examples/gemm_fp8.py)."""
    torch = torch_module
    m, n, kk = 512, 2048, 1024
    a = (torch.randn(m, kk, device="cuda") * 20).to(torch.float8_e4m3fn)
    b = (torch.randn(n, kk, device="cuda") * 20).to(torch.float8_e4m3fn)
    s, t = torch.tensor(0.03, device="cuda"), torch.tensor(0.5, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    k = tkir.compile(str(ROOT / "examples" / "gemm_fp8.tk"))
    k(a, b, s.expand(m).contiguous(), t.expand(n).contiguous(), c)
    peer = torch._scaled_mm(a, b.t(), scale_a=s, scale_b=t, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    ref = (a.double() @ b.double().T) * float(s) * float(t)
    assert _rel(torch, c, ref) < BOUND
    diff = _rel(torch, c, peer)
    assert diff < PEER_BOUND, f"tkir vs torch._scaled_mm (per-tensor): {diff:.3e}"


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dtype", ["e4m3", "e5m2"])
def test_fp8_casts_on_gpu_bit_for_bit(tmp_path: Path, target: str, dtype: str) -> None:
    """Every output of the round-trip kernel equals round_fp8 of its input exactly (NaN where NaN), and every
    fp8 bit pattern loaded and cast up is its value."""
    from tkir.backend import cuda

    sys.path.insert(0, str(ROOT / "tests" / "backend"))
    from test_fp8_backend import ROUND_TRIP, check_round_trip, round_trip_arrays

    path = tmp_path / "rt.tk"
    path.write_text(ROUND_TRIP.replace("DT", dtype))
    k = tkir.compile(str(path), target=target)
    dev = [cuda.to_device(a) for a in round_trip_arrays(dtype)]
    k(*dev)
    check_round_trip([d.numpy() for d in dev], dtype, f"GPU, {target} code")
