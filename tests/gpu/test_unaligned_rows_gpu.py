"""Rows that do not start aligned to a kernel's vector pieces, on the GPU (marked gpu): softmax over a
GPT-2 vocabulary of 50,257 bf16 columns (examples/softmax_vocab.tk) against torch.softmax, through the
launch's narrower-piece variant, and aligned rows still through the kernel itself.

Tolerance. Every output element is one rounding to bf16 of an f32 result; the f32 results differ from
torch's f32 softmax only by f32 rounding (another summation order over 50,257 terms: about 1e-6
relative). So each element must satisfy |out - ref| <= 2^-7 |ref| + 1e-6 max|ref| (twice the bf16
rounding, for a value at a rounding boundary, plus the summation allowance), and the whole tensor
||out - ref|| / ||ref|| <= 2^-8. Outputs start as NaN: an unwritten element fails.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import tkir
from tkir.backend.runtime import UnalignedRowsWarning

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "examples" / "softmax_vocab.tk")
VOCAB = 50257
BF16_UNIT_ROUNDOFF = 2.0**-8
ELEMENT_RTOL = 2 * BF16_UNIT_ROUNDOFF
ELEMENT_ATOL_OF_MAX = 1e-6

pytestmark = pytest.mark.gpu


def _inputs(torch, n: int, v: int, offset: int = 0):  # noqa: ANN001, ANN202
    """X of (n, v) bf16 logits (spread 3, as a softmax sees them) and a NaN Y; with `offset` elements,
    both are views that far into a larger buffer (their bases move by 2 * offset bytes)."""
    g = torch.Generator(device="cuda").manual_seed(n * 7919 + v)
    x = (3 * torch.randn(n * v + offset, device="cuda", generator=g)).to(torch.bfloat16)[offset:].view(n, v)
    y = torch.full((n * v + offset,), float("nan"), device="cuda", dtype=torch.bfloat16)[offset:].view(n, v)
    return x, y


def _check(torch, x, y) -> None:  # noqa: ANN001
    ref = torch.softmax(x.float(), dim=1)
    out = y.float()
    assert not torch.isnan(out).any(), f"{int(torch.isnan(out).sum())} elements of Y were never written"
    bound = ELEMENT_RTOL * ref.abs() + ELEMENT_ATOL_OF_MAX * ref.abs().max()
    bad = (out - ref).abs() > bound
    if bad.any():
        i = tuple(int(t) for t in bad.nonzero()[0])
        raise AssertionError(f"{int(bad.sum())} elements past |out - ref| <= 2^-7 |ref| + 1e-6 max|ref|; first "
                             f"at {i}: out {float(out[i]):.6g}, ref {float(ref[i]):.6g}")
    rel = float((out - ref).norm() / ref.norm())
    assert rel <= BF16_UNIT_ROUNDOFF, f"||out - ref|| / ||ref|| = {rel:.3e} > 2^-8"


@pytest.mark.parametrize("n", [1, 7, 4096])
def test_softmax_over_an_odd_vocabulary_runs_the_variant(torch_module, n: int) -> None:  # noqa: ANN001
    torch = torch_module
    k = tkir.compile(SOFTMAX)
    x, y = _inputs(torch, n, VOCAB)
    kernel = k.launcher()
    chosen = kernel.choose(x, y)
    assert chosen is not kernel and chosen.launch.aligned == (), "rows of 100,514 bytes must take the variant"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnalignedRowsWarning)
        k(x, y)
    torch.cuda.synchronize()
    _check(torch, x, y)
    assert set(k._variants) == {2}, f"variants made: {sorted(k._variants)} (want the 2-byte one only)"


@pytest.mark.parametrize("v, offset, piece", [(VOCAB + 1, 0, 4), (VOCAB + 3, 0, 8), (VOCAB - 1, 1, 2),
                                              (VOCAB - 1, 4, 8)])
def test_narrower_variants_for_pitches_and_bases(torch_module, v: int, offset: int, piece: int) -> None:  # noqa: ANN001
    """Rows 4- or 8-byte aligned, and aligned rows of views 2 or 8 bytes into a buffer: the widest variant
    that fits, each correct."""
    torch = torch_module
    k = tkir.compile(SOFTMAX)
    x, y = _inputs(torch, 33, v, offset)
    assert k.launcher().choose(x, y) is k.variant(piece).launcher()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnalignedRowsWarning)
        k(x, y)
    torch.cuda.synchronize()
    _check(torch, x, y)


@pytest.mark.parametrize("n", [7, 4096])
def test_aligned_rows_still_take_the_kernel_itself(torch_module, n: int) -> None:  # noqa: ANN001
    torch = torch_module
    k = tkir.compile(SOFTMAX)
    x, y = _inputs(torch, n, VOCAB - 1)  # 100,512-byte rows: 16-byte aligned
    kernel = k.launcher()
    assert kernel.choose(x, y) is kernel
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnalignedRowsWarning)  # no variant may be made
        k(x, y)
    torch.cuda.synchronize()
    _check(torch, x, y)
    assert not k._variants, f"an aligned call made variants {sorted(k._variants)}"
    assert "ld.global.nc.L2::cache_hint.v4.b32" in k.asm["ptx"] and "st.global.v4.b32" in k.asm["ptx"]


def test_the_variant_then_the_kernel_on_one_launcher(torch_module) -> None:  # noqa: ANN001
    """One Kernel, calls alternating between an odd and an even vocabulary: each takes its own kernel."""
    torch = torch_module
    k = tkir.compile(SOFTMAX)
    odd, even = _inputs(torch, 64, VOCAB), _inputs(torch, 64, VOCAB - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnalignedRowsWarning)
        for _ in range(3):
            for x, y in (odd, even):
                y.fill_(float("nan"))
                k(x, y)
                torch.cuda.synchronize()
                _check(torch, x, y)
    assert set(k._variants) == {2}
