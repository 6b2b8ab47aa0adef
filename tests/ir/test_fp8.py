"""fp8 (e4m3, e5m2) in the core and the interpreter: tkir/scalar.py's rounding rule, the interpreter's
rounding of fp8 tiles, the IR text of fp8 tiles and mixed e4m3 x e5m2 mmas, and the fp8 GEMM examples
(examples/gemm_fp8.tk, examples/gemm_fp8_block.tk) against float64 of their dequantised inputs at ragged sizes.

The rule (PTX `cvt.rn.satfinite.{e4m3x2|e5m2x2}.f32`): round to nearest even; a magnitude past the largest
finite value (448 for e4m3, 57344 for e5m2), infinity included, becomes that value with its sign; NaN stays NaN.
"""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tkir
from tkir.interp.frame import round_array
from tkir.parser import parse_module
from tkir.printer import print_module
from tkir.scalar import FP8_MAX, round_fp8, saturate_fp8
from tkir.tools.examples import check_interpreted, load_companion
from tkir.verifier import verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NP_FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
FP8 = sorted(NP_FP8)


def _every_value(dtype: str) -> np.ndarray:
    """Every finite value of the fp8 dtype, sorted (256 bit patterns, NaNs and infinities left out)."""
    v = np.arange(256, dtype=np.uint8).view(NP_FP8[dtype]).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FP8), st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_round_fp8_is_ml_dtypes_after_saturation(dtype: str, x: float) -> None:
    want = float(np.asarray(saturate_fp8(np.float32(x), dtype), np.float32).astype(NP_FP8[dtype]))
    got = round_fp8(x, dtype)
    assert (math.isnan(got) and math.isnan(want)) or (got == want and math.copysign(1, got) == math.copysign(1, want))


@pytest.mark.parametrize("dtype", FP8)
def test_round_fp8_on_every_value_and_midpoint(dtype: str) -> None:
    """Representable values stay; a midpoint goes to the neighbour with the even last bit (ties to even);
    beyond the largest value, saturation; the smallest subnormal's half rounds to zero (even)."""
    vals = _every_value(dtype)
    assert all(round_fp8(v, dtype) == v for v in vals)
    for lo, hi in zip(vals[:-1], vals[1:], strict=True):
        mid = (lo + hi) / 2
        got = round_fp8(mid, dtype)
        lo_bits = int(np.float64(lo).astype(NP_FP8[dtype]).view(np.uint8))
        assert got == (lo if lo_bits % 2 == 0 else hi), (lo, hi, got)
    top = FP8_MAX[dtype]
    assert vals.max() == top
    for x in (top * 1.01, top * 2, 1e30, math.inf):
        assert round_fp8(x, dtype) == top and round_fp8(-x, dtype) == -top
    assert math.isnan(round_fp8(math.nan, dtype))
    tiny = vals[vals > 0].min()
    assert round_fp8(tiny / 2, dtype) == 0.0 and round_fp8(tiny * 0.51, dtype) == tiny


@pytest.mark.parametrize("dtype", FP8)
def test_interpreter_rounds_fp8_tiles_with_saturation(dtype: str) -> None:
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 0.1, -3.3, 1e-9], np.float32)
    got = round_array(x, dtype)
    want = np.array([round_fp8(float(v), dtype) for v in x])
    assert got.dtype == np.float32
    assert np.array_equal(got, want, equal_nan=True)
    # ml_dtypes alone would give NaN (e4m3, no infinities) or inf (e5m2): the saturation is the interpreter's
    assert not np.isfinite(x[:2].astype(NP_FP8[dtype]).astype(np.float32)).any()


MIXED_MMA = """tk.kernel @k {grid = ["M / 64"]} {
  ^(%A: gl<e4m3>[M, 64], %B: gl<e5m2>[64, 64])
  %c0 = arith.const {value = 0} : i32
  %a = tk.alloc : st<e4m3, 64, 64>
  %b = tk.alloc : st<e5m2, 64, 64>
  %acc = tk.fill {value = 0.0} : rt<f32, 64, 64>
  %acc.1 = tk.mma %a, %b, %acc {trans_b = true} : rt<f32, 64, 64>
}
"""


def test_mixed_fp8_mma_verifies_and_round_trips() -> None:
    """wgmma pairs e4m3 and e5m2 freely: the verifier takes an e4m3 x e5m2 mma; bf16 x e4m3 it refuses."""
    m = parse_module(MIXED_MMA)
    verify(m)
    assert print_module(parse_module(print_module(m))) == print_module(m)
    bad = parse_module(MIXED_MMA.replace("st<e5m2", "st<bf16").replace("gl<e5m2>", "gl<bf16>"))
    with pytest.raises(Exception, match="operand dtypes differ: e4m3 @ bf16"):
        verify(bad)


def _cases() -> list:
    out = []
    for name in ("gemm_fp8", "gemm_fp8_block"):
        comp = load_companion(str(EXAMPLES / f"{name}.tk"))
        for i, (sizes, consts) in enumerate(zip(comp.CHECK_SIZES, comp.CHECK_CONSTS, strict=True)):
            out.append(pytest.param(name, sizes, consts, id=f"{name}-{i}"))
    return out


@pytest.mark.parametrize(("name", "sizes", "consts"), _cases())
def test_fp8_gemm_examples_match_the_dequantised_float64_reference(name: str, sizes: dict, consts: dict) -> None:
    """||C - ref|| / ||ref|| < 3e-2 (the companions' TOLERANCE) at sizes no tile divides, where ref is float64
    of the dequantised fp8 inputs; the companions' quantisation puts each block's largest value at 448."""
    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    assert comp.TOLERANCE <= 3e-2
    assert all(sizes[d] % 128 for d in ("M", "N", "K"))  # ragged in every dim
    k = tkir.compile(str(EXAMPLES / comp.KERNEL), **consts)  # the IR after the default pipeline, as it runs
    results = check_interpreted(k.module, comp, sizes, consts, seed=0)
    assert results and all(r.ok for r in results), [str(r) for r in results]


def test_fp8_gemm_block_scales_matter() -> None:
    """The block kernel applies each K slice's own scales: with the scales of slice 1 doubled the result
    changes by the product of that slice (a kernel applying one scale to the whole sum would not follow)."""
    from tkir.interp import interpret

    comp = load_companion(str(EXAMPLES / "gemm_fp8_block.tk"))
    sizes = dict(M=64, N=128, K=256)
    module = tkir.compile(str(EXAMPLES / comp.KERNEL), BM=64).module
    inputs = comp.make_inputs(np.random.default_rng(1), sizes, {})
    interpret(module, *inputs)
    base = inputs[-1].astype(np.float64)
    inputs[2][1] *= 2  # SA's slice 1
    inputs[-1][...] = np.nan
    interpret(module, *inputs)
    want = comp.reference(inputs, sizes, {})["C"]
    got = inputs[-1].astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 3e-2
    assert np.linalg.norm(got - base) > 0.1 * np.linalg.norm(base)
