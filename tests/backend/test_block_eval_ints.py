"""The backend's integer paths on the CPU: the LLVM text of integer-tile kernels run block by block by
tests/llvm_block_eval.py, every thread, against the interpreter (the oracle) and numpy.

* tests/filecheck/backend/src/ints.tk: i32 and u32 arithmetic (`/` and `%` truncating, u32 unsigned), casts
  both ways with NaN, infinities and out-of-range floats (LLVM's fptosi.sat: toward zero, saturating, NaN 0),
  row_argmax, a gather; bit for bit equal to the interpreter's outputs. Its gather with ids outside the
  table reads rows of zeros (the GPU's documented behaviour; the interpreter refuses such ids).
* examples/argmax.tk (rows over 4 warps: the value and column merged across warps through shared memory; 4
  rows a block: within warps), against np.argmax with ties across chunks, NaN rows and -inf rows.
* examples/cross_entropy.tk and examples/embedding.tk against the interpreter.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from llvm_block_eval import run_block

import tkir

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
INTS = ROOT / "tests" / "filecheck" / "backend" / "src" / "ints.tk"
BF16 = ml_dtypes.bfloat16
TARGETS = ["sm_90a", "sm_80"]


def _run(k: tkir.CompiledKernel, args: list, grid: int | tuple[int, int]) -> None:
    """Every block of k's LLVM text (a 1-D or 2-D grid) on the CPU (stores land in args' arrays)."""
    gx, gy = (grid, 1) if isinstance(grid, int) else grid
    for by in range(gy):
        for bx in range(gx):
            run_block(k.asm["llvm"], args, block=(bx, by, 0), grid=(gx, gy, 1), threads=k.launch.block[0],
                      smem_bytes=k.launch.dynamic_smem)


def _ints_args(ids: list[int]) -> list:
    n, d, v = 8, 256, 9
    rng = np.random.default_rng(0)
    x = rng.integers(-1000, 1000, (n, d)).astype(np.int32)
    x[0, :3] = [2**31 - 1, -(2**31), -7]
    u = rng.integers(0, 2**32, (n, d), dtype=np.uint64).astype(np.uint32)
    f = (rng.standard_normal((n, d)) * 3e7).astype(np.float32)
    f[0, :8] = [np.nan, np.inf, -np.inf, 3e9, -3e9, -0.5, 2.5, -2.5]
    f[1, [3, 200]] = np.nan  # row_argmax: the first NaN
    t = rng.standard_normal((v, d)).astype(BF16)
    outs = [np.zeros((n, d), np.int32), np.zeros((n, d), np.float32), np.full(n, -1, np.int32),
            np.full((n, d), np.nan, BF16)]
    return [x, u, f.astype(BF16), t, np.array(ids, np.int32), *outs]


@pytest.mark.parametrize("target", TARGETS)
def test_integer_ops_casts_argmax_gather_equal_the_interpreter(target: str) -> None:
    k = tkir.compile(str(INTS), target=target)
    ids = [3, 0, 8, 8, 1, 2, 5, 7]
    on_cpu, oracle = _ints_args(ids), _ints_args(ids)
    _run(k, [*on_cpu, 8, 9], 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the arithmetic wraps (x * ..., 2**31 - 1): as on the GPU
        tkir.interpret(k, *oracle)
    for name, got, want in zip(("Y", "W", "A", "G"), on_cpu[5:], oracle[5:], strict=True):
        np.testing.assert_array_equal(got, want, err_msg=f"{target}: {name}")
    assert oracle[7][1] == 3  # the first NaN of row 1


def test_gather_ids_outside_the_table_read_zeros() -> None:
    """What the GPU does with an id outside 0 .. V - 1 (negative ones compare as large unsigned ones)."""
    k = tkir.compile(str(INTS))
    args = _ints_args([3, -1, 9, 2**31 - 1, -(2**31), 8, 0, 100])
    _run(k, [*args, 8, 9], 2)
    g, t = args[8].astype(np.float32), args[3].astype(np.float32)
    np.testing.assert_array_equal(g[[0, 5, 6]], t[[3, 8, 0]])
    assert (g[[1, 2, 3, 4, 7]] == 0).all()


def _argmax_input(n: int, v: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    x = rng.integers(-8, 8, (n, v)).astype(np.float32) / 4
    x[0, [100, 599]] = 9.0                  # a tie across chunks: the first
    x[1, [300, 598]] = np.nan               # the first NaN, over the larger numbers
    x[1, 5] = np.inf
    x[2, :] = -np.inf                       # index 0
    x[3, [0, 1]] = [-0.0, 0.0]              # equal: the first
    x[3, 2:] = -1.0
    x[4, 599] = 50.0                        # the max in the ragged last chunk
    return x.astype(BF16)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("consts", [dict(ROWS=1, VC=256, WG=1), dict(ROWS=4, VC=256, WG=1)], ids=["split-row", "rows4"])
def test_argmax_example(target: str, consts: dict) -> None:
    k = tkir.compile(str(EXAMPLES / "argmax.tk"), target=target, **consts)
    n, v = 8, 600
    x = _argmax_input(n, v)
    a = np.full(n, -1, np.int32)
    _run(k, [x, a, n, v], -(-n // consts["ROWS"]))
    np.testing.assert_array_equal(a, np.argmax(x.astype(np.float32), axis=1))


@pytest.mark.parametrize("target", TARGETS)
def test_cross_entropy_example(target: str) -> None:
    consts = dict(ROWS=2, VC=256, WG=1)
    k = tkir.compile(str(EXAMPLES / "cross_entropy.tk"), target=target, **consts)
    n, v = 5, 600
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((n, v)) * 4).astype(BF16)
    labels = np.array([599, -100, 0, 300, 7], np.int32)
    got, want = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    _run(k, [x, labels, got, n, v], 3)
    tkir.interpret(k, x, labels, want)
    assert got[1] == 0.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_embedding_example(target: str) -> None:
    k = tkir.compile(str(EXAMPLES / "embedding.tk"), target=target, D=512, DC=256, ROWS=2)
    v, t = 11, 5
    table = np.random.default_rng(3).standard_normal((v, 512)).astype(BF16)
    ids = np.array([10, 0, 4, 4, 9], np.int32)
    out = np.full((t, 512), np.nan, BF16)
    _run(k, [table, ids, out, v, t], (3, 2))  # cdiv(T, ROWS) x D / DC
    np.testing.assert_array_equal(out.astype(np.float32), table[ids].astype(np.float32))
