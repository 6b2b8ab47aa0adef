"""Grouped-query attention with autograd from tkir kernels (examples/attention_autograd.py with k, v of H / G
heads: attention_fwd.tk, attention_bwd_dkdv.tk and attention_bwd_dq.tk compiled with -D G) against autograd
through torch.nn.functional.scaled_dot_product_attention(enable_gqa=True) in float32 on the same bf16 values: O
and the gradients of q, k and v within ||d - ref|| / ||ref|| < 2e-2, causal and not, at (B, H, N, D, G) =
(2, 8, 1000, 64, 4) and (2, 16, 2048, 128, 8); dK and dV in k's and v's shape. The backward stays deterministic
(dK, dV of a K/V head sum its G query heads in one loop, in order). A head count that is not a multiple of the
K/V heads is refused by `attention` before any launch, and by the runtime when the op is called directly."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REL_TOL = 2e-2  # bf16 outputs from bf16 products of P and dS, against f32 autograd
CASES = [(2, 8, 1000, 64, 4), (2, 16, 2048, 128, 8)]  # (B, H, N, D, G)

pytestmark = pytest.mark.gpu


def _example():  # noqa: ANN202 - the example module
    from tkir.tools.examples import load_module

    return load_module(ROOT / "examples/attention_autograd.py")  # once per process (sys.modules)


def _inputs(torch, case: tuple, seed: int) -> tuple:  # noqa: ANN001
    b, h, n, d, g = case
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape: int):  # noqa: ANN202
        return torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)
    return randn(b, h, n, d), randn(b, h // g, n, d), randn(b, h // g, n, d), randn(b, h, n, d)


def _reference(torch, q, k, v, do, causal: bool) -> tuple:  # noqa: ANN001
    """O and the gradients of q, k, v by autograd through SDPA(enable_gqa=True) in float32 (the math backend)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, enable_gqa=True)
    return (o.detach(), *torch.autograd.grad(o, (qf, kf, vf), do.float()))


def _rel(torch, got, want) -> float:  # noqa: ANN001
    return float((got.float() - want).norm() / want.norm())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backward", ["fused", "three-kernel"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c[:4])) + f"-G{c[4]}" for c in CASES])
def test_gqa_gradients_match_sdpa(torch_module, case: tuple, causal: bool, backward: str) -> None:  # noqa: ANN001
    torch = torch_module
    attention = _example().attention
    q, k, v, do = _inputs(torch, case, seed=case[2] + int(causal))
    args = [t.clone().requires_grad_() for t in (q, k, v)]
    o = attention(*args, causal=causal, backward=backward)
    got = torch.autograd.grad(o, args, do)
    want_o, *want = _reference(torch, q, k, v, do, causal)
    torch.cuda.synchronize()
    assert o.dtype == torch.bfloat16 and o.shape == q.shape
    assert _rel(torch, o, want_o) < REL_TOL, _rel(torch, o, want_o)
    for name, g, r, like in zip(("dQ", "dK", "dV"), got, want, (q, k, v), strict=True):
        assert g.dtype == torch.bfloat16 and g.shape == like.shape, name
        assert bool(torch.isfinite(g).all()), name
        err = _rel(torch, g, r)
        assert err < REL_TOL, f"{name} {case} causal={causal} backward={backward}: relative error {err:.3e}"


def test_gqa_backward_is_deterministic(torch_module) -> None:  # noqa: ANN001
    """The three-kernel backward (no atomics) gives the same bits twice; the fused one's dQ need not."""
    torch = torch_module
    attention = _example().attention
    q, k, v, do = _inputs(torch, CASES[0], seed=5)
    runs = []
    for _ in range(2):
        args = [t.clone().requires_grad_() for t in (q, k, v)]
        runs.append(torch.autograd.grad(attention(*args, causal=True, backward="three-kernel"), args, do))
    torch.cuda.synchronize()
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


def test_head_counts_are_checked_before_any_launch(torch_module) -> None:  # noqa: ANN001
    """6 query heads to 4 K/V heads: `attention` refuses; the forward op of G = 4 called directly with 6 query
    heads and one K/V head: the runtime refuses (H % 4) before the launch."""
    torch = torch_module
    ex = _example()
    q, k, v, _ = _inputs(torch, (1, 6, 128, 64, 1), seed=3)
    with pytest.raises(ValueError, match="q has 6 heads and k, v have 4"):
        ex.attention(q, k[:, :4], v[:, :4])
    with torch.no_grad(), pytest.raises(Exception, match=r"H must be a multiple of 4 \(H % 4 is 2"):  # noqa: PT011
        ex._forward_only(64, False, 4)(q, k[:, :1].contiguous(), v[:, :1].contiguous())
