"""The integer examples on the GPU against torch (marked gpu): cross_entropy.tk against
torch.nn.functional.cross_entropy, argmax.tk against torch.argmax (exact), embedding.tk against
torch.nn.functional.embedding (exact), and float -> i32 casts against torch's .to(torch.int32), on both targets'
PTX (sm_80's JIT-compiled for the Hopper card).

Tolerances. argmax and embedding are exact (an index; a copy). cross_entropy computes in f32 with ex2.approx and
lg2.approx (relative error about 2^-22 each) and sums V terms in another order than torch: its loss, a
difference of two numbers of the order of 10 (the logsumexp and the label's logit), must be within 1e-4 of
torch's f32 result relative to the largest loss plus 1e-4 relative (about 100 times the f32 rounding of a sum of
128k terms), and ||out - ref|| / ||ref|| <= 1e-5. Every output starts as NaN (losses) or -1 (indices), so an
element never written fails.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import tkir

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TARGETS = ("sm_90a", "sm_80")
LOSS_RTOL, LOSS_ATOL_OF_MAX, LOSS_NORM = 1e-4, 1e-4, 1e-5
IGNORE = -100  # cross_entropy.tk's IGNORE, torch's default ignore_index

pytestmark = pytest.mark.gpu


@functools.cache
def _kernel(name: str, target: str, **consts: int) -> tkir.CompiledKernel:
    return tkir.compile(str(EXAMPLES / f"{name}.tk"), target=target, **consts)


# ---------------------------------------------------------------------------------------------
# cross-entropy

# (N, V): LLM vocabularies, a ragged width (a multiple of 8: 16-byte aligned rows), one row, a ragged row count
CE_SHAPES = [(4096, 32000), (1000, 128256), (127, 50264), (1, 32000), (3, 8)]
CE_CONSTS = [{}, {"ROWS": 2, "VC": 2048, "WG": 2}]


def _logits(torch, n: int, v: int, seed: int):  # noqa: ANN001, ANN202
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(n, v, device="cuda", generator=gen) * 4).to(torch.bfloat16)
    labels = torch.randint(0, v, (n,), device="cuda", generator=gen, dtype=torch.int32)
    labels[0] = v - 1
    if n > 2:
        labels[1] = IGNORE
        labels[2] = 0
    return x, labels


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("consts", CE_CONSTS, ids=["default", "rows2-vc2048-wg2"])
@pytest.mark.parametrize(("n", "v"), CE_SHAPES, ids=[f"N{n}-V{v}" for n, v in CE_SHAPES])
def test_cross_entropy_matches_torch(torch_module, n: int, v: int, consts: dict, target: str) -> None:  # noqa: ANN001
    torch = torch_module
    x, labels = _logits(torch, n, v, seed=n + v)
    loss = torch.full((n,), float("nan"), device="cuda")
    _kernel("cross_entropy", target, **consts)(x, labels, loss)
    torch.cuda.synchronize()
    ref = torch.nn.functional.cross_entropy(x.float(), labels.long(), reduction="none", ignore_index=IGNORE)
    what = f"cross_entropy N={n} V={v} {consts} {target}"
    assert not torch.isnan(loss).any(), f"{what}: NaN (a row never written)"
    if n > 2:
        assert float(loss[1]) == 0.0, f"{what}: an ignored label's loss is {float(loss[1])}, not 0"
    rel = float((loss.double() - ref.double()).norm() / ref.double().norm())
    assert rel <= LOSS_NORM, f"{what}: ||out - ref|| / ||ref|| = {rel:.3e}"
    torch.testing.assert_close(loss, ref, rtol=LOSS_RTOL, atol=LOSS_ATOL_OF_MAX * float(ref.abs().max()),
                               msg=lambda m: f"{what}: {m}")


# ---------------------------------------------------------------------------------------------
# argmax

AM_SHAPES = [(4096, 32000), (1000, 128256), (127, 1000), (1, 8)]
AM_CONSTS = [{}, {"ROWS": 4, "VC": 1024, "WG": 1}]


def _argmax_rows(torch, n: int, v: int, seed: int):  # noqa: ANN001, ANN202
    """Few distinct values (ties in every row, across chunks too), and rows that test the rules: a NaN row (the
    first NaN wins), an all -inf row (index 0), a row with +inf twice (the first)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randint(-40, 40, (n, v), device="cuda", generator=gen).float() / 8
    if n > 3:
        x[1, v // 2] = float("nan")
        x[1, v - 1] = float("nan")
        x[2, :] = float("-inf")
        x[3, 1] = float("inf")
        x[3, v - 1] = float("inf")
    return x.to(torch.bfloat16)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("consts", AM_CONSTS, ids=["default", "rows4-vc1024-wg1"])
@pytest.mark.parametrize(("n", "v"), AM_SHAPES, ids=[f"N{n}-V{v}" for n, v in AM_SHAPES])
def test_argmax_equals_torch_argmax(torch_module, n: int, v: int, consts: dict, target: str) -> None:  # noqa: ANN001
    torch = torch_module
    x = _argmax_rows(torch, n, v, seed=n * v)
    out = torch.full((n,), -1, device="cuda", dtype=torch.int32)
    _kernel("argmax", target, **consts)(x, out)
    torch.cuda.synchronize()
    ref = torch.argmax(x, dim=1).to(torch.int32)
    bad = (out != ref).nonzero().flatten()
    assert bad.numel() == 0, (f"argmax N={n} V={v} {consts} {target}: {bad.numel()} rows differ, first row "
                              f"{int(bad[0])}: tkir {int(out[bad[0]])}, torch {int(ref[bad[0]])}")


# ---------------------------------------------------------------------------------------------
# embedding

EMB_CASES = [(131072, 4096, 8192, {}), (50000, 4096, 8191, {"ROWS": 1, "DC": 2048, "WG": 2}),
             (1000, 768, 33, {"D": 768, "DC": 768, "ROWS": 4}), (7, 4096, 1, {})]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("v", "d", "t", "consts"), EMB_CASES, ids=[f"V{c[0]}-D{c[1]}-T{c[2]}" for c in EMB_CASES])
def test_embedding_equals_torch(torch_module, v: int, d: int, t: int, consts: dict, target: str) -> None:  # noqa: ANN001
    torch = torch_module
    gen = torch.Generator(device="cuda").manual_seed(v + t)
    table = torch.randn(v, d, device="cuda", generator=gen).to(torch.bfloat16)
    ids = torch.randint(0, v, (t,), device="cuda", generator=gen, dtype=torch.int32)
    ids[0] = v - 1
    out = torch.full((t, d), float("nan"), device="cuda", dtype=torch.bfloat16)
    _kernel("embedding", target, **consts)(table, ids, out)
    torch.cuda.synchronize()
    ref = torch.nn.functional.embedding(ids, table)
    assert torch.equal(out, ref), (f"embedding V={v} D={d} T={t} {target}: "
                                   f"{int((out != ref).any(dim=1).sum())} of {t} rows differ")


def test_embedding_out_of_range_ids_read_zeros(torch_module) -> None:  # noqa: ANN001
    """An id outside 0 .. V - 1 (negative, V, the largest i32) gives a row of zeros on the GPU, nothing read
    there (docs/language.md, "Gathers"); the interpreter refuses such an id."""
    torch = torch_module
    v, d = 100, 4096
    table = torch.randn(v, d, device="cuda").to(torch.bfloat16)
    ids = torch.tensor([3, -1, v, 2**31 - 1, v - 1, -(2**31)], device="cuda", dtype=torch.int32)
    out = torch.full((len(ids), d), float("nan"), device="cuda", dtype=torch.bfloat16)
    _kernel("embedding", "sm_90a")(table, ids, out)
    torch.cuda.synchronize()
    assert torch.equal(out[0], table[3]) and torch.equal(out[4], table[v - 1])
    for r in (1, 2, 3, 5):
        assert torch.equal(out[r], torch.zeros_like(out[r])), f"row {r} (id {int(ids[r])}) is not zeros"


# ---------------------------------------------------------------------------------------------
# casts

CAST = """
kernel k<ROWS=2, D=64>(X: gl<f32>[N, D], I: gl<i32>[N, D])
    grid(cdiv(N, ROWS))
{
    reg x: rt<f32, ROWS, D> = X[block.x, 0]
    I[block.x, 0] = i32(x)
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_float_to_i32_cast_equals_torch(torch_module, tmp_path: Path, target: str) -> None:  # noqa: ANN001
    """i32(x) truncates toward zero and saturates, NaN giving 0: what x.to(torch.int32) computes on the GPU (PTX
    cvt.rzi.s32.f32), and what the interpreter computes (tests/frontend/test_int_tiles.py)."""
    torch = torch_module
    path = tmp_path / "cast.tk"
    path.write_text(CAST)
    k = tkir.compile(str(path), target=target)
    special = [float("nan"), float("inf"), float("-inf"), 3e9, -3e9, 2.5, -2.5, -0.7, 0.7, 2.0**31, -(2.0**31),
               16777217.0, -1.0, 123456.75]
    x = torch.randn(4, 64, device="cuda") * 1e5
    x.view(-1)[: len(special)] = torch.tensor(special, device="cuda")
    out = torch.full((4, 64), -1, device="cuda", dtype=torch.int32)
    k(x, out)
    torch.cuda.synchronize()
    ref = x.to(torch.int32)
    bad = (out != ref).nonzero()
    assert bad.numel() == 0, f"{target}: i32({float(x[tuple(bad[0])])}) is {int(out[tuple(bad[0])])}, torch " \
                             f"gives {int(ref[tuple(bad[0])])}"
