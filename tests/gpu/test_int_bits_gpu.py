"""The bit operators on the GPU (marked gpu): the kernels of tests/frontend/test_int_bits.py (integer tiles and
vectors; `~`; run-time i32/u32 scalars) on both targets' PTX (sm_80's JIT-compiled for the Hopper card) against the
interpreter on the same inputs, exactly. The interpreter is the oracle there: test_int_bits.py checks it against
Python integers. Outputs start at a sentinel, so an element never written fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_int_bits import BITS, NOT, SCALARS  # tests/frontend (pytest's pythonpath)

import tkir

TARGETS = ("sm_90a", "sm_80")
SENTINEL = 0x5A5A5A5A

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::tkir.interp.ops.IntegerOverflowWarning")]


def _i32(rng: np.random.Generator, shape: tuple[int, ...], lo: int = -(2**31), hi: int = 2**31) -> np.ndarray:
    return rng.integers(lo, hi, shape, dtype=np.int64).astype(np.int32)


def _u32(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)


def _inputs(name: str, rng: np.random.Generator) -> list[np.ndarray]:
    """The kernel's arguments in order, outputs at SENTINEL; N ragged (not a multiple of ROWS = 4)."""
    n, d = 203, 64
    out_i = np.full((n, d), SENTINEL, np.int32)
    out_u = np.full((n, d), SENTINEL, np.uint32)
    if name == "bits":  # X, Y (counts -3 .. 39), C, U, S, V
        return [_i32(rng, (n, d)), _i32(rng, (n, d), -3, 40), _i32(rng, (d,)), _u32(rng, (n, d)), out_i, out_u]
    if name == "not":  # X, U, R (counts 0 .. 39), S, V
        x = _i32(rng, (n, d))
        x[:, ::3] &= ~np.int32(255)
        return [x, _u32(rng, (n, d)), _i32(rng, (d,), 0, 40), out_i, out_u]
    return [_i32(rng, (n, d)), out_i, _u32(rng, (n, d)), out_u]  # scalars: X, S, U, V


def _to_torch(torch, a: np.ndarray):  # noqa: ANN001, ANN202
    t = torch.from_numpy(a.view(np.int32).copy()).cuda()
    return t.view(torch.uint32) if a.dtype == np.uint32 else t


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, text", [("bits", BITS), ("not", NOT), ("scalars", SCALARS)], ids=["bits", "not", "scalars"])
def test_bit_operators_on_the_gpu_equal_the_interpreter(torch_module, tmp_path: Path, name: str, text: str,  # noqa: ANN001
                                                         target: str) -> None:
    torch = torch_module
    path = tmp_path / f"{name}.tk"
    path.write_text(text)
    k = tkir.compile(str(path), target=target)
    args = _inputs(name, np.random.default_rng(11))
    want = [a.copy() for a in args]
    tkir.interpret(k, *want)
    dev = [_to_torch(torch, a) for a in args]
    k(*dev)
    torch.cuda.synchronize()
    for i, (got, ref) in enumerate(zip(dev, want, strict=True)):
        got = got.view(torch.int32).cpu().numpy().view(ref.dtype)
        bad = np.argwhere(got != ref)
        assert bad.size == 0, f"{name} {target}: argument {i} differs at {tuple(bad[0])}: {got[tuple(bad[0])]} " \
                              f"on the GPU, {ref[tuple(bad[0])]} in the interpreter ({len(bad)} elements)"
