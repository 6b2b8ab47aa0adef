"""fp8 in the backend without a GPU: the casts and copies of fp8 register and shared tiles run on the CPU
(tests/llvm_block_eval.py executes one block of the kernel's LLVM text, both targets), the fp8 wgmma and the
conversions show in the SASS (ptxas / nvdisasm), and fp8 `@` is refused on sm_80 with a located error.

On sm_90a the conversions are PTX's fp8 cvts, which the evaluator computes from their definition (PTX ISA,
cvt: round to nearest even, satfinite, the first source into the upper byte); on sm_80 they are the backend's
own integer arithmetic (backend/f32.py), checked here against tkir/scalar.py's rule on every fp8 value, on
the midpoints between them, and on NaN, infinities, overflow and subnormals.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from llvm_block_eval import run_block

import tkir
from tkir.backend.toolchain import local_memory_ops
from tkir.diagnostics import CompileError
from tkir.scalar import round_fp8

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TARGETS = ["sm_90a", "sm_80"]
NP_FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
ROWS = 64

# f32 -> fp8 in registers, stored (Y), back up to f32 (Z), and through a shared tile (S); bf16 -> fp8 -> bf16
# (W, the 16-bit path of the casts); and every fp8 bit pattern (P) loaded from global memory and cast to f32
# (T). No tensor is both written and read: on the GPU that would race between threads.
ROUND_TRIP = """
kernel rt(X: gl<f32>[N, 64], Y: gl<DT>[N, 64], Z: gl<f32>[N, 64], W: gl<bf16>[N, 64], S: gl<f32>[N, 64],
          P: gl<DT>[N, 64], T: gl<f32>[N, 64])
    grid(cdiv(N, 64))
{
    shared s: st<DT, 64, 64>
    reg x: rt<f32, 64, 64> = X[block.x, 0]
    Y[block.x, 0] = DT(x)
    reg r: rt<DT, 64, 64> = DT(x)
    Z[block.x, 0] = f32(r)
    W[block.x, 0] = bf16(DT(bf16(x)))
    s = DT(x)
    reg t: rt<DT, 64, 64> = s
    S[block.x, 0] = f32(t)
    reg p: rt<DT, 64, 64> = P[block.x, 0]
    T[block.x, 0] = f32(p)
}
"""


def every_pattern(dtype: str) -> np.ndarray:
    """ROWS x 64 fp8: the 256 bit patterns (NaNs and infinities included), repeated."""
    return np.resize(np.arange(256, dtype=np.uint8), (ROWS, 64)).view(NP_FP8[dtype])


def round_trip_arrays(dtype: str) -> list[np.ndarray]:
    """ROUND_TRIP's arguments (host arrays): the hard values, the bit patterns, outputs poisoned."""
    x = _hard_values(dtype)
    nan = np.full((ROWS, 64), np.nan, np.float32)
    return [x, np.zeros((ROWS, 64), NP_FP8[dtype]), nan.copy(), np.full((ROWS, 64), np.nan, ml_dtypes.bfloat16),
            nan.copy(), every_pattern(dtype), nan.copy()]


def check_round_trip(arrays: list[np.ndarray], dtype: str, where: str) -> None:
    """Each output of ROUND_TRIP against tkir/scalar.py's rule, bit for bit (NaN where NaN)."""
    x, y, z, w, s, p, t = arrays
    want = np.vectorize(lambda v: round_fp8(float(v), dtype))(x)
    for name, got in (("stored fp8", y.astype(np.float32)), ("fp8 -> f32", z), ("through shared", s)):
        ok = _same(got, want)
        assert ok.all(), (f"{where} {dtype} {name}: {int((~ok).sum())} of {ok.size} wrong; first inputs "
                          f"{x[~ok][:4]}, got {np.asarray(got)[~ok][:4]}, want {want[~ok][:4]} (neighbours swapped: "
                          "the cvt's byte order is not the one backend/f32.py assumes)")
    want_b = np.vectorize(lambda v: round_fp8(float(v), dtype))(x.astype(ml_dtypes.bfloat16).astype(np.float64))
    ok = _same(w.astype(np.float64), want_b)
    assert ok.all(), f"{where} {dtype} bf16 -> fp8 -> bf16: first inputs {x[~ok][:4]}"
    ok = _same(t, p.astype(np.float64))
    assert ok.all(), f"{where} {dtype} fp8 -> f32 of the bit patterns {p.view(np.uint8)[~ok][:8]}: got {t[~ok][:8]}"


def _compile(tmp_path: Path, src: str, target: str) -> tkir.CompiledKernel:
    path = tmp_path / "k.tk"
    path.write_text(src)
    return tkir.compile(str(path), target=target)


def _hard_values(dtype: str) -> np.ndarray:
    """64 x 64 f32: every finite fp8 value, the midpoints between neighbours (ties to even), both signs;
    NaN, infinities, overflow, subnormal and tiny values; random magnitudes over 20 octaves to fill up."""
    v = np.arange(256, dtype=np.uint8).view(NP_FP8[dtype]).astype(np.float64)
    v = np.unique(v[np.isfinite(v)])
    mids = (v[1:] + v[:-1]) / 2
    special = [np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-30, -0.0, 464.0, -464.0, 61440.0, 57344.0 * 1.1]
    vals = np.concatenate([v, mids, special]).astype(np.float32)
    rng = np.random.default_rng(0)
    fill = (rng.standard_normal(ROWS * 64) * 2.0 ** rng.integers(-12, 8, ROWS * 64)).astype(np.float32)
    fill[:vals.size] = vals
    return fill.reshape(ROWS, 64)


def _same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # NaN payloads of fp8 arrays cast to float64
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return (got == want) | (np.isnan(got) & np.isnan(want))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", sorted(NP_FP8))
def test_fp8_casts_and_copies_on_the_cpu(tmp_path: Path, target: str, dtype: str) -> None:
    k = _compile(tmp_path, ROUND_TRIP.replace("DT", dtype), target)
    arrays = round_trip_arrays(dtype)
    run_block(k.asm["llvm"], [*arrays, ROWS], block=0, grid=1, threads=k.launch.block[0],
              smem_bytes=k.launch.dynamic_smem)
    check_round_trip(arrays, dtype, target)


def test_fp8_vectors_on_the_cpu(tmp_path: Path) -> None:
    """rv<e4m3> / rv<e5m2> loaded (one byte a lane), cast and broadcast; an fp8 vector stored."""
    src = """
kernel v(X: gl<f32>[N, 64], V: gl<e4m3>[64], W: gl<e5m2>[N], Y: gl<f32>[N, 64], U: gl<e4m3>[64])
    grid(cdiv(N, 64))
{
    reg x: rt<f32, 64, 64> = X[block.x, 0]
    reg v: rv<e4m3, 64> = V[0]
    reg w: rv<e5m2, 64> = W[block.x]
    Y[block.x, 0] = x * col(f32(v)) + row(f32(w))
    U[0] = e4m3(row_sum(x))
}
"""
    rng = np.random.default_rng(2)
    for target in TARGETS:
        k = _compile(tmp_path, src, target)
        n = 2 * ROWS
        x = rng.standard_normal((n, 64)).astype(np.float32)
        v = rng.standard_normal(64).astype(NP_FP8["e4m3"])
        w = rng.standard_normal(n).astype(NP_FP8["e5m2"])
        y, yi = (np.full((n, 64), np.nan, np.float32) for _ in range(2))
        u, ui = (np.zeros(64, NP_FP8["e4m3"]) for _ in range(2))
        run_block(k.asm["llvm"], [x, v, w, y, u, n], block=1, grid=2, threads=k.launch.block[0],
                  smem_bytes=k.launch.dynamic_smem)
        tkir.interpret(k, x, v, w, yi, ui)
        assert np.allclose(y[ROWS:], yi[ROWS:], rtol=1e-6, atol=1e-6), target
        assert np.isnan(y[:ROWS]).all(), f"{target}: a store outside the block's rows"
        assert np.array_equal(u.astype(np.float32), ui.astype(np.float32)), target


def test_fp8_gemm_sass() -> None:
    """The fp8 GEMM: QGMMA (Hopper's 8-bit HGMMA) 64 x 256 x 32 e4m3 x e4m3, TMA loads, no local memory in
    the spill-free configurations (the default 128 x 256 tile spills 12 bytes around its epilogue, as
    examples/linear.tk's does), and the block-scaled kernel's per-slice wgmma (64 x 128 x 32)."""
    k = tkir.compile(str(EXAMPLES / "gemm_fp8.tk"))
    sass = k.asm["sass"]
    assert sass.count("QGMMA.64x256x32.F32.E4M3.E4M3") >= 4  # 4 k32 steps of a 128-byte BK per stage
    assert "UTMALDG" in sass and "UTMASTG" in sass
    assert [t.swizzle for t in k.launch.tma][:2] == [128, 128]  # A and B: one 128-byte swizzle row of fp8
    small = tkir.compile(str(EXAMPLES / "gemm_fp8.tk"), BN=128)
    assert "QGMMA.64x128x32.F32.E4M3.E4M3" in small.asm["sass"] and not local_memory_ops(small.asm["sass"])
    block = tkir.compile(str(EXAMPLES / "gemm_fp8_block.tk"))
    assert block.asm["sass"].count("QGMMA.64x128x32.F32.E4M3.E4M3") >= 4
    assert not local_memory_ops(block.asm["sass"])


@pytest.mark.parametrize("name", ["gemm_fp8", "gemm_fp8_block"])
def test_fp8_mma_is_refused_on_sm80_at_the_mma(name: str) -> None:
    path = EXAMPLES / f"{name}.tk"
    with pytest.raises(CompileError) as info:
        tkir.compile(str(path), target="sm_80")
    out = info.value.format()
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.lstrip().startswith("acc +="))
    assert out.startswith(f"{path}:{line}:"), out
    assert "an fp8 '@' (e4m3) needs sm_90a's wgmma" in out and "bf16(x)" in out


@pytest.mark.parametrize("target", TARGETS)
def test_fp8_tiles_assemble_on_both_targets(tmp_path: Path, target: str) -> None:
    """fp8 tiles through TMA (sm_90a) or cp.async (sm_80) into swizzled shared tiles and back to global
    memory: ptxas assembles both; sm_90a converts with F2FP, sm_80 has no fp8 instruction at all."""
    src = """
kernel t(Y: gl<e4m3>[N, 128], Q: gl<e5m2>[N, 128])
    grid(cdiv(N, 64))
{
    shared s: st<e4m3, 64, 128>
    shared o: st<e5m2, 64, 128>
    s = Y[block.x, 0]
    reg r: rt<e4m3, 64, 128> = s
    o = e5m2(f32(r) * 2.0)
    Q[block.x, 0] = o
}
"""
    k = _compile(tmp_path, src, target)
    sass = k.asm["sass"]
    assert not local_memory_ops(sass)
    assert ("F2FP" in sass) == (target == "sm_90a")
