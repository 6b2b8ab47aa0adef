"""Rows that do not start aligned to a kernel's vector pieces: the variant with narrower pieces, on the CPU.

A register row tile copied in 16-byte pieces needs every row (and the base address) 16-byte aligned;
a vocabulary of 50,257 bf16 columns gives rows of 100,514 bytes, 2-byte aligned. The kernel's variant
(CompiledKernel.variant: infer-layouts{max_vec_bytes=B}) copies them in B-byte pieces; tkir.interpret,
`tkc run --interpret` and the launch (tests/runtime/test_unaligned_rows_launch.py) take it for such rows,
and the kernel itself for aligned ones, whose PTX the variant machinery leaves unchanged.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.backend.launch import LaunchDescription, LaunchError
from tkir.cli import main
from tkir.interp import InterpError
from tkir.interp import interpret as interpret_module
from tkir.requires import row_piece_tensors, unaligned_piece
from tkir.tools.examples import check_interpreted, load_companion

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "examples" / "softmax_vocab.tk")
RMSNORM = str(ROOT / "tests" / "data" / "rmsnorm_ragged.tk")
VOCAB = 50257
BF16 = ml_dtypes.bfloat16


def _softmax_ref(x: np.ndarray) -> np.ndarray:
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _rel(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def softmax() -> tkir.CompiledKernel:
    return tkir.compile(SOFTMAX)


# --- which piece a call needs ----------------------------------------------------------------------

@pytest.mark.parametrize("ptr, shape, strides, want", [
    (0x1000, (4, 50256), (100512, 2), None),   # every row 16-byte aligned: the kernel itself
    (0x1000, (4, 50257), (100514, 2), 2),      # an odd vocabulary: 2-byte rows
    (0x1000, (4, 50258), (100516, 2), 4),
    (0x1000, (4, 50260), (100520, 2), 8),
    (0x1008, (4, 50256), (100512, 2), 8),      # aligned rows, a base 8 bytes into a buffer
    (0x1002, (4, 50256), (100512, 2), 2),
    (0x1001, (4, 50256), (100512, 2), None),   # not even element-aligned: no variant copies that
    (0x1000, (1, 50257), (100514, 2), 2),      # one row: the row's bytes count, as `requires` counts them
    (0x1000, (50257,), (2,), 2),               # a vector of the row's length (rmsnorm's W)
    (0x1010, (50256,), (2,), None),
])
def test_the_piece_is_what_the_base_and_the_row_pitch_allow(ptr: int, shape: tuple, strides: tuple,
                                                             want: int | None) -> None:
    assert unaligned_piece({"X": 16}, {"X": (ptr, shape, strides, 2)}) == want


def test_the_call_takes_the_narrowest_piece_of_its_tensors() -> None:
    pieces = {"X": 16, "W": 8}
    tensors = {"X": (0x1000, (4, 50260), (100520, 2), 2), "W": (0x1004, (50260,), (2,), 2)}
    assert unaligned_piece(pieces, tensors) == 4
    assert unaligned_piece(pieces, {"X": tensors["X"]}) == 8
    assert unaligned_piece(pieces, {"W": (0x1008, (50260,), (2,), 2)}) is None  # W fits its own 8 bytes


def test_the_row_tensors_are_those_copied_only_in_register_pieces(softmax: tkir.CompiledKernel) -> None:
    assert row_piece_tensors(softmax.module.kernel) == {"X": 16, "Y": 16}
    assert softmax.launch.unaligned == ("X", "Y") and softmax.launch.to_json()["unaligned"] == ["X", "Y"]
    sm80 = tkir.compile(str(ROOT / "examples" / "gemm.tk"), target="sm_80")  # cp.async chunks: no variant
    assert {a.tensor for a in sm80.launch.aligned} == {"A", "B"} and sm80.launch.unaligned == ()
    assert "unaligned" not in sm80.launch.to_json()
    gemm = tkir.compile(str(ROOT / "examples" / "gemm.tk"))  # TMA and the accumulator's element stores
    assert gemm.launch.unaligned == ()


def test_the_description_reads_unaligned_back_and_checks_it(softmax: tkir.CompiledKernel) -> None:
    data = softmax.launch.to_json()
    assert LaunchDescription.from_json(data).unaligned == ("X", "Y")
    with pytest.raises(LaunchError, match=r"unaligned \['Z'\] must list tensors of the kernel"):
        LaunchDescription.from_json({**data, "unaligned": ["Z"]})
    with pytest.raises(LaunchError, match=r"unaligned\[0\] is not a name"):
        LaunchDescription.from_json({**data, "unaligned": [3]})


# --- the variant -----------------------------------------------------------------------------------

def test_the_variant_copies_rows_in_element_pieces_and_asks_no_alignment(softmax: tkir.CompiledKernel) -> None:
    v = softmax.variant(2)
    assert v is softmax.variant(2)  # made once
    assert "infer-layouts{max_vec_bytes=2}" in v.pipeline_spec
    assert set(re.findall(r"vec = (\d+)", v.ir)) == {"1"} and set(re.findall(r"vec = (\d+)", softmax.ir)) == {"8"}
    assert v.launch.aligned == () and v.launch.requires == () and v.launch.unaligned == ()
    assert [r.expr for r in softmax.launch.requires] == ["(V * 2) % 16"]
    ptx = v.asm["ptx"]
    assert "ld.global.nc.L2::cache_hint.b16" in ptx and "st.global.b16" in ptx
    assert not re.search(r"(ld|st)\.global\S*\.v4", ptx)  # no 16-byte global access (the row exchange's are shared)
    assert softmax.variant(4).launch.requires[0].expr == "(V * 2) % 4"


def test_aligned_rows_cost_nothing(softmax: tkir.CompiledKernel) -> None:
    """The kernel itself is what it was (the variant of 16-byte pieces is its PTX, md5 for md5), and a
    call with aligned rows runs it, not a variant."""
    assert _md5(softmax.variant(16).asm["ptx"]) == _md5(softmax.asm["ptx"])
    x = np.zeros((2, VOCAB - 1), BF16)
    assert softmax.unaligned_piece(x, np.zeros_like(x)) is None


@pytest.mark.parametrize("n", [3, 1])
def test_softmax_over_50257_columns_in_the_interpreter(softmax: tkir.CompiledKernel, n: int) -> None:
    rng = np.random.default_rng(n)
    x = (3 * rng.standard_normal((n, VOCAB), np.float32)).astype(BF16)
    y = np.full_like(x, np.nan)
    with pytest.raises(InterpError, match=r"rows must start 16-byte aligned \(\(V \* 2\) % 16 is 2"):
        interpret_module(softmax.module, x, y)  # the kernel itself refuses these rows, with the launch's message
    assert softmax.unaligned_piece(x, y) == 2
    tkir.interpret(softmax, x, y)
    assert _rel(y, _softmax_ref(x)) < 1e-2 and not np.isnan(y.astype(np.float32)).any()


def test_rmsnorm_over_50257_columns_in_the_interpreter() -> None:
    k = tkir.compile(RMSNORM)
    assert set(k.launch.unaligned) == {"X", "W", "Y"}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, VOCAB), np.float32).astype(BF16)
    w = rng.standard_normal(VOCAB, np.float32).astype(BF16)
    y = np.full_like(x, np.nan)
    assert k.unaligned_piece(x, w, y) == 2
    tkir.interpret(k, x, w, y)
    xf = x.astype(np.float64)
    ref = xf / np.sqrt((xf ** 2).mean(axis=1, keepdims=True) + 1e-6) * w.astype(np.float64)
    assert _rel(y, ref) < 1e-2


def test_the_companion_check_takes_the_variant(softmax: tkir.CompiledKernel) -> None:
    comp = load_companion(SOFTMAX)
    for sizes, consts in zip(comp.CHECK_SIZES, comp.CHECK_CONSTS, strict=True):
        k = tkir.compile(SOFTMAX, **consts)
        for r in check_interpreted(k, comp, sizes, consts, seed=0):
            assert r.ok, f"{sizes} {consts}: {r}"


def test_tkc_run_interpret_checks_a_vocabulary_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", SOFTMAX, "--interpret", "--check", "--size", "N=2", "--size", f"V={VOCAB}",
                 "--seed", "0"]) == 0
    assert re.search(rf"softmax_vocab.tk \[N=2 V={VOCAB}\] Y: rel_err \S+ \(bound 2e-02\) ok", capsys.readouterr().out)


def test_tkc_report_says_which_rows_take_the_variant(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", SOFTMAX]) == 0
    out = capsys.readouterr().out
    assert re.search(r"unaligned rows: X, Y in 16-byte pieces; .*variant", out), out
