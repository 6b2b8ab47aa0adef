"""The row backward examples on the GPU against torch autograd (marked gpu): rmsnorm_bwd.tk and layernorm_bwd.tk
then col_sum.tk on their partials, launched as a caller does (the companions' torch_backward), on bf16 inputs
at ragged sizes, against torch.autograd.grad of torch.nn.functional.rms_norm / layer_norm in f32 on the same
(bf16-valued) inputs.

Tolerances. Every output of the kernels is one rounding to bf16 of an f32 result: with 8 significant bits
that rounding is at most 2^-8 of the value (bf16's unit roundoff). The f32 results themselves differ from
torch's f32 autograd only by f32 rounding (other summation orders, rsqrt.approx's 2^-22 relative error),
about 1e-6 relative, except where terms cancel (an element of DX near zero, a column of DW whose products
sum to near zero), where the difference is about 1e-6 of the terms' size, which is at most a few times the
largest element. So each element must satisfy |out - ref| <= 2^-7 |ref| + 1e-4 max|ref| (twice the rounding,
for a value that sits at a rounding boundary, plus the cancellation allowance with a factor 100 to spare),
and the whole tensor ||out - ref|| / ||ref|| <= 2^-8. An unwritten element fails: every output starts as NaN
(partials included: a partial row the row kernel skipped would make its column sums NaN).

G, the partial rows (a const of the row kernels), is what a caller picks for N (the companions' partial_rows
at the compiled kernel's resident slots), and in one test 1, 3, the default 264 and 2000 at N = 1000.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import tkir
from tkir.tools.examples import load_companion

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BF16_UNIT_ROUNDOFF = 2.0**-8  # relative error of one rounding to bf16 (8 significant bits)
ELEMENT_RTOL = 2 * BF16_UNIT_ROUNDOFF
ELEMENT_ATOL_OF_MAX = 1e-4  # times max|ref|: f32 rounding where the terms of an element cancel
# The configurations per row width (the bench's: a row a warp at 768, one row over 16 warps at 4096,
# 8192 over 32 warps in one block an SM); 1024 takes the examples' defaults (4 rows over 16 warps).
CONSTS = {768: {"ROWS": 4, "WG": 1}, 1024: {}, 4096: {"ROWS": 1, "WG": 4}, 8192: {"ROWS": 1, "WG": 8, "OCC": 1}}
NAMES = ("rmsnorm_bwd", "layernorm_bwd")
CASES = [(name, n, d, "sm_90a") for name in NAMES for n in (1, 127, 1000, 4096) for d in (768, 1024, 4096)]
CASES += [("rmsnorm_bwd", 1000, 8192, "sm_90a")]
# sm_80 PTX (the driver JITs it for the Hopper card): the same kernels without Hopper-only instructions
CASES += [(name, n, d, "sm_80") for name in NAMES for n, d in ((127, 768), (1000, 4096))]

pytestmark = pytest.mark.gpu


@functools.cache
def _kernels(name: str, d: int, target: str, g: int) -> tuple:
    return (tkir.compile(str(EXAMPLES / f"{name}.tk"), target=target, D=d, G=g, **CONSTS[d]),
            tkir.compile(str(EXAMPLES / "col_sum.tk"), target=target))


def _partial_rows(name: str, n: int, d: int, target: str) -> int:
    """G as a caller picks it for N rows: one wave of resident blocks, each walking the same number of tiles."""
    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    row, _ = _kernels(name, d, target, comp.DEFAULT_CONSTS["G"])
    return comp.partial_rows(n, int(row.module.kernel.attrs["consts"]["ROWS"]), comp.resident_slots(row))


def _inputs(torch, n: int, d: int, seed: int) -> tuple:  # noqa: ANN001
    gen = torch.Generator(device="cuda").manual_seed(seed)
    # a scale and an offset per row, so a kernel that takes the wrong row's statistics fails
    scale = torch.randn(n, 1, device="cuda", generator=gen).exp()
    shift = torch.randn(n, 1, device="cuda", generator=gen)
    x = (torch.randn(n, d, device="cuda", generator=gen) * scale + shift).to(torch.bfloat16)
    w = torch.randn(d, device="cuda", generator=gen).to(torch.bfloat16)
    dy = torch.randn(n, d, device="cuda", generator=gen).to(torch.bfloat16)
    return x, w, dy


def _reference(torch, name: str, x, w, dy) -> dict:  # noqa: ANN001
    """torch autograd in f32 on the bf16 inputs' values."""
    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    xf = x.float().requires_grad_()
    wf = w.float().requires_grad_()
    d = x.shape[1]
    if name == "rmsnorm_bwd":
        y = torch.nn.functional.rms_norm(xf, (d,), wf, eps=comp.EPS)
        dx, dw = torch.autograd.grad(y, (xf, wf), dy.float())
        return {"DX": dx, "DW": dw}
    bf = torch.zeros(d, device=x.device, requires_grad=True)
    y = torch.nn.functional.layer_norm(xf, (d,), wf, bf, eps=comp.EPS)
    dx, dw, db = torch.autograd.grad(y, (xf, wf, bf), dy.float())
    return {"DX": dx, "DW": dw, "DB": db}


def _run(torch, name: str, x, w, dy, target: str, g: int) -> dict:  # noqa: ANN001
    """The tkir backward with G partial rows, both kernels launched as the companion's torch_backward launches
    them, with every output and the partials poisoned with NaN first."""
    row, col_sum = _kernels(name, x.shape[1], target, g)
    d = x.shape[1]
    width = d if name == "rmsnorm_bwd" else 2 * d  # DWP; DWBP holds DW's partials, then DB's
    dx = torch.full_like(x, float("nan"))
    part = torch.full((g, width), float("nan"), device=x.device)
    sums = torch.full((width,), float("nan"), device=x.device, dtype=torch.bfloat16)
    row(x, w, dy, dx, part)
    col_sum(part, sums)
    torch.cuda.synchronize()
    return {"DX": dx, "DW": sums[:d]} | ({"DB": sums[d:]} if name == "layernorm_bwd" else {})


def _assert_close(torch, name: str, got: dict, want: dict, what: str) -> None:  # noqa: ANN001
    assert set(got) == set(want)
    for key, ref in want.items():
        out = got[key].float()
        assert not torch.isnan(out).any(), f"{what} {key}: NaN (an element or a partial row never written)"
        rel = float((out.double() - ref.double()).norm() / ref.double().norm())
        assert rel <= BF16_UNIT_ROUNDOFF, f"{what} {key}: ||out - ref|| / ||ref|| = {rel:.3e}"
        torch.testing.assert_close(out, ref, rtol=ELEMENT_RTOL, atol=ELEMENT_ATOL_OF_MAX * float(ref.abs().max()),
                                   msg=lambda m, key=key: f"{what} {key}: {m}")


@pytest.mark.parametrize("name, n, d, target", CASES, ids=[f"{c[0]}-N{c[1]}-D{c[2]}-{c[3]}" for c in CASES])
def test_row_backward_matches_torch_autograd(torch_module, name: str, n: int, d: int, target: str) -> None:  # noqa: ANN001
    torch = torch_module
    x, w, dy = _inputs(torch, n, d, seed=n + d)
    got = _run(torch, name, x, w, dy, target, _partial_rows(name, n, d, target))
    _assert_close(torch, name, got, _reference(torch, name, x, w, dy), f"{name} N={n} D={d} {target}")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("g", [1, 3, 264, 2000])
def test_any_number_of_partial_rows(torch_module, name: str, g: int) -> None:  # noqa: ANN001
    """G = 1 (one block walks every tile), 3 (uneven), the default 264 and 2000 (more blocks than the 250
    tiles: zero partials)."""
    torch = torch_module
    x, w, dy = _inputs(torch, 1000, 1024, seed=g)
    got = _run(torch, name, x, w, dy, "sm_90a", g=g)
    _assert_close(torch, name, got, _reference(torch, name, x, w, dy), f"{name} G={g}")


@pytest.mark.parametrize("name", NAMES)
def test_companion_torch_backward_gives_the_same_gradients(torch_module, name: str) -> None:  # noqa: ANN001
    """The companion's torch_backward (what the bench and a caller use: outputs from torch.empty) returns what
    the poisoned launches above return, bit for bit (the same kernels)."""
    torch = torch_module
    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    x, w, dy = _inputs(torch, 1000, 768, seed=7)
    g = _partial_rows(name, 1000, 768, "sm_90a")
    row, col_sum = _kernels(name, 768, "sm_90a", g)
    got = comp.torch_backward(row, col_sum, x, w, dy)
    torch.cuda.synchronize()
    want = _run(torch, name, x, w, dy, "sm_90a", g)
    assert len(got) == len(want)
    for key, out in zip(want, got, strict=True):
        assert torch.equal(out, want[key]), key


@pytest.mark.parametrize("name", NAMES)
def test_repeated_calls_on_fresh_inputs(torch_module, name: str) -> None:  # noqa: ANN001
    """Nothing carries over between calls (the partials are rewritten whole every time)."""
    torch = torch_module
    for seed in range(3):
        x, w, dy = _inputs(torch, 4096, 768, seed=100 + seed)
        got = _run(torch, name, x, w, dy, "sm_90a", _partial_rows(name, 4096, 768, "sm_90a"))
        _assert_close(torch, name, got, _reference(torch, name, x, w, dy), f"{name} call {seed}")
