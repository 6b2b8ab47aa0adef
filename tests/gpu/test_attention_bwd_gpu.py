"""Attention with autograd from tkir kernels (examples/attention_autograd.py: attention_fwd.tk, then in the
backward either the fused path, attention_bwd_prep.tk, attention_bwd.tk (dQ added into an f32 workspace by TMA
reduce-add) and attention_bwd_dq_convert.tk, or the three kernels attention_bwd_prep.tk, attention_bwd_dkdv.tk,
attention_bwd_dq.tk) against autograd through torch.nn.functional.scaled_dot_product_attention in float32 on the
same bf16 values: the output and the gradients of q, k and v within ||d - ref|| / ||ref|| < 2e-2, causal and not,
at (B, H, N, D) = (1, 1, 1, 64), (2, 3, 1000, 64), (4, 8, 2048, 128), (16, 16, 4096, 128) and (8, 16, 8192, 128)
(at the last two the f32 reference runs on the first two heads of batch 0 only: its scores for all heads would take
17 and 34 GB; the deterministic mode's workspace at N = 8192 is 64 slots of 537 MB), for
the fused backward, the fused one with deterministic=True, and the three-kernel one; D = 256 at (4, 8, 2048, 256)
through the fused backward (-D DS=4), deterministic and not (the three-kernel backward refuses D = 256).
At N = 1 a query has one key (P = 1 whatever the score), so dQ = dK = 0 exactly and SDPA's are 0: tkir's are held
to an absolute bound there. The three-kernel backward is deterministic by construction (no atomics): two runs
give the same bits; so does the fused one with deterministic=True (each key block's dQ part in its own workspace
slot, summed in key-block order); the fused one without gives the same dK and dV bits (each block owns its rows)
and a dQ whose f32 sums may differ in order."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REL_TOL = 2e-2  # bf16 outputs from bf16 products of P and dS, against f32 autograd
ZERO_GRAD_TOL = 1e-4  # N = 1: max |dQ|, max |dK| against max |dV| (rounding of dP - Delta in f32)
SHAPES = [(1, 1, 1, 64), (2, 3, 1000, 64), (4, 8, 2048, 128), (16, 16, 4096, 128), (8, 16, 8192, 128)]
REF_HEADS = 2  # heads of batch 0 the f32 reference computes at the largest shape (as scripts/bench/attention_bwd.py)
D256_SHAPE = (4, 8, 2048, 256)  # the D = 256 size: the fused backward only
# attention(..., backward=, deterministic=) by test id
BACKWARDS = {"fused": ("fused", False), "fused-deterministic": ("fused", True), "three-kernel": ("three-kernel", False)}

pytestmark = pytest.mark.gpu


def _example():  # noqa: ANN202 - the example module
    from tkir.tools.examples import load_module

    return load_module(ROOT / "examples/attention_autograd.py")  # once per process (sys.modules)


def _inputs(torch, shape: tuple, seed: int) -> tuple:  # noqa: ANN001
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(4))
    return q, k, v, do


def _reference(torch, q, k, v, do, causal: bool) -> tuple:  # noqa: ANN001
    """O and the gradients of q, k, v by autograd through SDPA in float32 (the math backend: the definition)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
    return (o.detach(), *torch.autograd.grad(o, (qf, kf, vf), do.float()))


def _rel(torch, got, want) -> float:  # noqa: ANN001
    return float((got.float() - want).norm() / want.norm())


def _cases() -> list:
    out = [pytest.param(shape, b, id=f"{'x'.join(map(str, shape))}-{b}") for shape in SHAPES for b in BACKWARDS]
    out += [pytest.param(D256_SHAPE, b, id=f"{'x'.join(map(str, D256_SHAPE))}-{b}")
            for b in ("fused", "fused-deterministic")]
    return out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape, backward", _cases())
def test_gradients_match_sdpa(torch_module, shape: tuple, causal: bool, backward: str) -> None:  # noqa: ANN001
    torch = torch_module
    attention = _example().attention
    q, k, v, do = _inputs(torch, shape, seed=shape[2] + int(causal))
    args = [t.clone().requires_grad_() for t in (q, k, v)]
    path, deterministic = BACKWARDS[backward]
    o = attention(*args, causal=causal, backward=path, deterministic=deterministic)
    got = torch.autograd.grad(o, args, do)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape
    for name, g in zip(("dQ", "dK", "dV"), got, strict=True):
        assert g.dtype == torch.bfloat16 and g.shape == q.shape, name
        assert bool(torch.isfinite(g).all()), f"{name} {shape} causal={causal} backward={backward}: not finite"
    if shape[0] * shape[1] > 32:  # the reference on the first heads of batch 0 (each head is independent)
        o, got = o[:1, :REF_HEADS], [g[:1, :REF_HEADS] for g in got]
        q, k, v, do = (t[:1, :REF_HEADS] for t in (q, k, v, do))
    want_o, *want = _reference(torch, q, k, v, do, causal)
    torch.cuda.synchronize()
    assert _rel(torch, o, want_o) < REL_TOL, _rel(torch, o, want_o)
    for name, g, r in zip(("dQ", "dK", "dV"), got, want, strict=True):
        if shape[2] == 1 and name != "dV":  # zero in exact arithmetic, and SDPA's are 0
            top = float(g.float().abs().max())
            assert top <= ZERO_GRAD_TOL * float(want[2].abs().max()), (name, top)
        else:
            err = _rel(torch, g, r)
            assert err < REL_TOL, f"{name} {shape} causal={causal} backward={backward}: relative error {err:.3e}"


def _twice(torch, attention, backward: str, shape: tuple, causal: bool = True) -> list:  # noqa: ANN001
    q, k, v, do = _inputs(torch, shape, seed=5)
    path, deterministic = BACKWARDS[backward]
    runs = []
    for _ in range(2):
        args = [t.clone().requires_grad_() for t in (q, k, v)]
        o = attention(*args, causal=causal, backward=path, deterministic=deterministic)
        runs.append(torch.autograd.grad(o, args, do))
    torch.cuda.synchronize()
    return runs


def test_backward_is_deterministic(torch_module) -> None:  # noqa: ANN001
    """The three-kernel backward, the same inputs twice: dQ, dK, dV equal bit for bit (each block owns its rows;
    no atomics)."""
    runs = _twice(torch_module, _example().attention, "three-kernel", (2, 3, 1000, 64))
    for a, b in zip(*runs, strict=True):
        assert torch_module.equal(a, b)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(2, 3, 1000, 64), (4, 16, 4096, 128), D256_SHAPE], ids=["d64", "d128", "d256"])
def test_fused_deterministic_backward_repeats_every_bit(torch_module, shape: tuple, causal: bool) -> None:  # noqa: ANN001
    """The fused backward with deterministic=True, the same inputs twice: dQ, dK and dV equal bit for bit (dQ's
    key-block parts summed in key-block order by the convert, whatever order the main kernel's blocks ran in)."""
    torch = torch_module
    runs = _twice(torch, _example().attention, "fused-deterministic", shape, causal)
    for name, a, b in zip(("dQ", "dK", "dV"), *runs, strict=True):
        diff = int((a != b).sum())
        assert diff == 0, f"{name} {shape} causal={causal}: {diff} of {a.numel()} elements differ between two runs"


@pytest.mark.parametrize("shape", [(2, 3, 1000, 64), (2, 4, 2048, 128)], ids=["d64", "d128"])
def test_fused_backward_repeats_dk_dv_bits(torch_module, shape: tuple) -> None:  # noqa: ANN001
    """The fused backward twice: dK and dV equal bit for bit (each block owns its key rows); dQ's f32 sums of the
    key blocks' parts land in the hardware's order, so its bf16 values may differ in the last bit, no more."""
    torch = torch_module
    (dq1, dk1, dv1), (dq2, dk2, dv2) = _twice(torch, _example().attention, "fused", shape)
    assert torch.equal(dk1, dk2) and torch.equal(dv1, dv2)
    assert _rel(torch, dq1, dq2.float()) < 1e-2, _rel(torch, dq1, dq2.float())


def test_forward_without_grad_and_refusals(torch_module) -> None:  # noqa: ANN001
    """Without a gradient the forward alone runs (D = 256 too); D = 256 with a gradient through the three-kernel
    backward, f32 inputs, and shapes that differ (k and v; q's heads not a multiple of k's) are refused before
    any launch."""
    torch = torch_module
    attention = _example().attention
    q, k, v, _ = _inputs(torch, (1, 2, 300, 256), seed=7)
    with torch.no_grad():
        o = attention(q, k, v)
    want_o = _reference(torch, q, k, v, torch.zeros_like(q), False)[0]
    assert _rel(torch, o, want_o) < REL_TOL
    with pytest.raises(ValueError, match="head dim 256 is not supported by the three-kernel backward"):
        attention(q.requires_grad_(), k, v, backward="three-kernel")
    with pytest.raises(TypeError, match="bfloat16"):
        attention(q.float(), k, v)
    with pytest.raises(ValueError, match="k and v must have one shape"):
        attention(q.detach(), k[:, :1], v)
    with pytest.raises(ValueError, match="q has 1 heads and k, v have 2"):
        attention(q[:, :1].detach(), k, v)


def test_head_dim_256_takes_the_fused_backward_by_default(torch_module, monkeypatch) -> None:  # noqa: ANN001
    """`attention` at D = 256 without backward= (and $TKIR_ATTENTION_BWD=three-kernel, which other head dims
    follow) takes the fused backward, the only one with D = 256, and its gradients match SDPA's."""
    torch = torch_module
    ex = _example()
    monkeypatch.setenv(ex.BACKWARD_ENV, "three-kernel")
    q, k, v, do = _inputs(torch, (1, 2, 300, 256), seed=9)
    args = [t.clone().requires_grad_() for t in (q, k, v)]
    got = torch.autograd.grad(ex.attention(*args, causal=True), args, do)
    want = _reference(torch, q, k, v, do, True)[1:]
    torch.cuda.synchronize()
    for name, g, r in zip(("dQ", "dK", "dV"), got, want, strict=True):
        err = _rel(torch, g, r)
        assert err < REL_TOL, f"{name} D=256 default backward: relative error {err:.3e}"


@pytest.mark.parametrize("causal, g", [(False, 1), (True, 1), (True, 4)], ids=["full", "causal", "causal-gqa4"])
def test_companion_torch_hooks_match_float64(torch_module, causal: bool, g: int) -> None:  # noqa: ANN001
    """attention_bwd.py's torch_inputs / torch_reference (what `tkc bench` and scripts/bench/ab.py use at bench
    sizes) against the float64 numpy forward and backward on the same bf16 values, then the kernel against them."""
    import numpy as np

    import tkir
    from tkir.tools.examples import load_companion

    torch = torch_module
    comp = load_companion(str(ROOT / "examples/attention_bwd.tk"))
    sizes, consts = dict(B=2, H=4, N=200), {"CAUSAL": int(causal), "G": g}
    inputs = comp.torch_inputs(sizes, consts)
    host = [t.float().cpu().numpy() for t in inputs[:4]]
    lse64 = comp._PREP.forward64(*host[:3], causal=causal)[1]
    assert np.abs(inputs[4].cpu().numpy() - lse64).max() < 1e-4
    ref = comp.torch_reference(inputs, sizes, consts)
    want = comp.reference([*host, inputs[4].cpu().numpy(), inputs[5].cpu().numpy()], sizes, consts)
    for name, r in ref.items():
        w = want[name]
        assert np.linalg.norm(r.double().cpu().numpy() - w) / np.linalg.norm(w) < 1e-5, name
    tkir.compile(str(ROOT / "examples/attention_bwd.tk"), **consts)(*inputs)
    torch.cuda.synchronize()
    for name in comp.OUTPUTS:
        got = inputs[comp.PARAMS.index(name)]
        assert float((got.float() - ref[name]).norm() / ref[name].norm()) < comp.TOLERANCE[name], name
