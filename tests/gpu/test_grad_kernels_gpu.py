"""The backward examples on the GPU against torch's autograd (marked gpu; torch through `torch_module`).

softmax_bwd against the gradient autograd computes for `torch.softmax` of a bf16 input; linear_dgrad and
linear_wgrad against autograd of `F.linear` (after `F.silu` / tanh `F.gelu` for the data gradient's
epilogue), at ragged sizes, then the whole backward of a two-layer SiLU MLP composed from the two GEMMs.
Every output buffer is NaN-poisoned and has NaN rows (elements) past its end that the kernel must leave
alone: the kernels see a view of the first rows, so a store past the tensor's end is caught too.

Tolerances, as ||out - ref|| / ||ref|| over the whole output:
- against a float64 reference on the same bf16 inputs: BF16_ROUND_BOUND. bf16 keeps 8 significant bits,
  so rounding a result once errs by at most 2^-9 (1.95e-3) of it; the kernels round once, after f32 math
  (f32 sums over at most 16384 terms add ~1e-7 * sqrt(terms), far below that). Twice 2^-9, for slack.
- against torch: BF16_TORCH_BOUND. torch's result carries its own rounding (twice, where autograd rounds
  an intermediate to bf16: dA = dY @ W before silu_backward), so the two may differ by two or three
  roundings of 2^-9: 1e-2.
- composed MLP gradients: the examples' TOLERANCE (2e-2): dW1 and dX go through dZ1, itself rounded to
  bf16 once in tkir and twice in torch, so a few roundings stack up.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import tkir

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BF16_ROUND_BOUND = 2 * 2.0 ** -9  # one bf16 rounding of the result (8 significant bits), twice for slack
BF16_TORCH_BOUND = 1e-2           # two or three bf16 roundings apart (tkir's and autograd's)
COMPOSED_BOUND = 2e-2             # the examples' TOLERANCE: gradients through a rounded dZ1
GELU_CUBIC = 0.044715             # tanh GELU's cubic coefficient (linear.tk, torch's approximate="tanh")
PAD = 3                           # NaN rows (elements) past each output's end, which must stay NaN

pytestmark = pytest.mark.gpu


def _kernel(name: str, **consts: Any) -> tkir.CompiledKernel:
    return tkir.compile(str(EXAMPLES / f"{name}.tk"), **consts)


def _rel(torch: Any, out: Any, ref: Any) -> float:
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "an output element was never written"
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def _poisoned(torch: Any, *shape: int) -> tuple[Any, Any]:
    """(a NaN buffer with PAD more rows, its view of the first shape[0] rows): the view is what the
    kernel gets (C-contiguous), the buffer's last rows show a store past the end."""
    buf = torch.full((shape[0] + PAD, *shape[1:]), float("nan"), device="cuda", dtype=torch.bfloat16)
    return buf, buf[:shape[0]]


def _untouched_past_end(torch: Any, buf: Any, n: int) -> bool:
    return bool(torch.isnan(buf[n:]).all())


# --- softmax backward ------------------------------------------------------------------------------

# (N, D, consts): ragged N (not a multiple of ROWS) at the bench widths; one row; the chunked path
SOFTMAX_CASES = [
    (1000, 1024, {}),
    (4096, 4096, {"D": 4096, "DC": 4096, "ROWS": 1, "WG": 1}),       # the bench configuration
    (333, 4096, {"D": 4096}),                                        # chunks of 1024 (D > DC)
    (1001, 768, {"D": 768, "DC": 1024, "ROWS": 4, "WG": 2, "FENCE": 1}),   # the bench configuration
    (65536, 768, {"D": 768, "DC": 1024, "ROWS": 4, "WG": 2, "FENCE": 1}),
    (1, 768, {"D": 768, "ROWS": 1, "WG": 1}),
    (77, 1024, {"ROWS": 16, "WG": 4}),
]


@pytest.mark.parametrize("n, d, consts", SOFTMAX_CASES, ids=[f"N{n}-D{d}-{c}" for n, d, c in SOFTMAX_CASES])
def test_softmax_bwd_matches_autograd(torch_module: Any, n: int, d: int, consts: dict) -> None:
    torch = torch_module
    assert consts.get("D", 1024) == d
    k = _kernel("softmax_bwd", **consts)
    gen = torch.Generator(device="cuda").manual_seed(n + d)
    x = (2.0 * torch.randn(n, d, device="cuda", generator=gen)).to(torch.bfloat16).requires_grad_()
    y = torch.softmax(x, dim=1)  # bf16 in and out, as a bf16 model's forward
    dy = torch.randn(n, d, device="cuda", generator=gen).to(torch.bfloat16)
    (dx_torch,) = torch.autograd.grad(y, x, dy)
    y = y.detach()
    buf, dx = _poisoned(torch, n, d)
    k(y, dy, dx)
    torch.cuda.synchronize()
    assert _untouched_past_end(torch, buf, n)
    yd, dyd = y.double(), dy.double()
    exact = yd * (dyd - (dyd * yd).sum(dim=1, keepdim=True))
    assert _rel(torch, dx, exact) <= BF16_ROUND_BOUND
    assert _rel(torch, dx, dx_torch) <= BF16_TORCH_BOUND


# --- linear backward -------------------------------------------------------------------------------

# (M, N, K): linear.tk's Y[M, N] = X[M, K] @ W[N, K]^T. Ragged M (1, 100, 1000); N and K multiples of 8
# (TMA's 16-byte rows) that are not multiples of the 64 / 128 tiles; one multiple of everything.
LINEAR_SHAPES = [(256, 512, 384), (1000, 744, 520), (1, 64, 128), (100, 200, 136), (777, 1024, 2056)]
ACTS = {0: None, 1: "gelu", 2: "silu"}


def _act(torch: Any, z: Any, act: int) -> Any:
    if act == 1:
        return torch.nn.functional.gelu(z, approximate="tanh")
    if act == 2:
        return torch.nn.functional.silu(z)
    return z


def _act_grad_f64(torch: Any, z: Any, act: int) -> Any:
    z = z.double()
    if act == 1:
        c, k = GELU_CUBIC, math.sqrt(2.0 / math.pi)  # tanh GELU, as linear.tk
        t = torch.tanh(k * (z + c * z ** 3))
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k * (1 + 3 * c * z * z)
    if act == 2:
        s = torch.sigmoid(z)
        return s * (1 + z * (1 - s))
    return torch.ones_like(z)


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("m, n, k", LINEAR_SHAPES, ids=[f"M{m}-N{n}-K{k}" for m, n, k in LINEAR_SHAPES])
def test_linear_dgrad_matches_autograd(torch_module: Any, m: int, n: int, k: int, act: int) -> None:
    """DX = (DZ @ W) * act'(Z): the gradient autograd gives the input of act (Z: [M, K]) when
    Y = F.linear(act(Z), W, b) and dY = DZ."""
    torch = torch_module
    kern = _kernel("linear_dgrad", ACT=act)
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n + k + act)
    z = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5).to(torch.bfloat16)
    b = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    dz = torch.randn(m, n, device="cuda", generator=gen).to(torch.bfloat16)
    y = torch.nn.functional.linear(_act(torch, z, act), w, b)
    (dx_torch,) = torch.autograd.grad(y, z, dz)
    z = z.detach()
    buf, dx = _poisoned(torch, m, k)
    kern(dz, w, z if act else dx, dx)  # ACT = 0 reads no Z: DX itself stands in for it
    torch.cuda.synchronize()
    assert _untouched_past_end(torch, buf, m)
    exact = (dz.double() @ w.double()) * _act_grad_f64(torch, z, act)
    assert _rel(torch, dx, exact) <= BF16_ROUND_BOUND
    assert _rel(torch, dx, dx_torch) <= BF16_TORCH_BOUND


@pytest.mark.parametrize("consts", [{}, {"BN": 256, "STAGES": 3}], ids=["128x128", "128x256"])
@pytest.mark.parametrize("m, n, k", LINEAR_SHAPES, ids=[f"M{m}-N{n}-K{k}" for m, n, k in LINEAR_SHAPES])
def test_linear_wgrad_matches_autograd(torch_module: Any, m: int, n: int, k: int, consts: dict) -> None:
    """DW = DZ^T @ X and DB = DZ's column sums: autograd's weight and bias gradients of F.linear."""
    torch = torch_module
    kern = _kernel("linear_wgrad", **consts)
    gen = torch.Generator(device="cuda").manual_seed(m * 5 + n + k)
    x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5).to(torch.bfloat16).requires_grad_()
    b = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_()
    dz = torch.randn(m, n, device="cuda", generator=gen).to(torch.bfloat16)
    y = torch.nn.functional.linear(x, w, b)
    dw_torch, db_torch = torch.autograd.grad(y, (w, b), dz)
    dw_buf, dw = _poisoned(torch, n, k)
    db_buf, db = _poisoned(torch, n)
    kern(dz, x, dw, db)
    torch.cuda.synchronize()
    assert _untouched_past_end(torch, dw_buf, n) and _untouched_past_end(torch, db_buf, n)
    assert _rel(torch, dw, dz.double().T @ x.double()) <= BF16_ROUND_BOUND
    assert _rel(torch, db, dz.double().sum(dim=0)) <= BF16_ROUND_BOUND
    assert _rel(torch, dw, dw_torch) <= BF16_TORCH_BOUND
    assert _rel(torch, db, db_torch) <= BF16_TORCH_BOUND


@pytest.mark.parametrize("m, d, h", [(1000, 256, 1024), (64, 512, 1536)])
def test_mlp_backward_from_the_two_gemms(torch_module: Any, m: int, d: int, h: int) -> None:
    """The backward of Y = F.linear(F.silu(F.linear(X, W1, b1)), W2, b2) in four launches, as the training
    test's MLP block needs it: dW2, db2 = wgrad(dY, A1); dZ1 = dgrad(dY, W2, Z1, ACT = 2) (SiLU's
    derivative in the epilogue); dW1, db1 = wgrad(dZ1, X); dX = dgrad(dZ1, W1, ACT = 0)."""
    torch = torch_module
    dgrad_silu, dgrad, wgrad = _kernel("linear_dgrad", ACT=2), _kernel("linear_dgrad", ACT=0), _kernel("linear_wgrad")
    gen = torch.Generator(device="cuda").manual_seed(m + d + h)

    def param(*shape: int, scale: float = 1.0) -> Any:
        return (scale * torch.randn(*shape, device="cuda", generator=gen)).to(torch.bfloat16).requires_grad_()

    x = param(m, d)
    w1, b1 = param(h, d, scale=d ** -0.5), param(h, scale=0.1)
    w2, b2 = param(d, h, scale=h ** -0.5), param(d, scale=0.1)
    z1 = torch.nn.functional.linear(x, w1, b1)
    a1 = torch.nn.functional.silu(z1)
    y = torch.nn.functional.linear(a1, w2, b2)
    dy = torch.randn(m, d, device="cuda", generator=gen).to(torch.bfloat16)
    want = torch.autograd.grad(y, (x, w1, b1, w2, b2), dy)
    z1, a1 = z1.detach(), a1.detach()

    def empty(*shape: int) -> Any:
        return torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)

    dx, dw1, db1, dw2, db2, dz1 = empty(m, d), empty(h, d), empty(h), empty(d, h), empty(d), empty(m, h)
    wgrad(dy, a1, dw2, db2)
    dgrad_silu(dy, w2.detach(), z1, dz1)
    wgrad(dz1, x.detach(), dw1, db1)
    dgrad(dz1, w1.detach(), dx, dx)
    torch.cuda.synchronize()
    for name, got, ref in zip(["dX", "dW1", "db1", "dW2", "db2"], [dx, dw1, db1, dw2, db2], want, strict=True):
        assert _rel(torch, got, ref) <= COMPOSED_BOUND, name
