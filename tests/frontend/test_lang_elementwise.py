"""Element-wise constructs of the .tk language: tanh/sigmoid/erf, row_index/col_index, tile
comparisons, where(...), mask_causal's fill and the fp8 refusal.

Each construct is checked three ways: the IR the front end emits (text), located errors for bad
uses, and the interpreter's values against numpy on kernels compiled from source.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tkir.diagnostics import CompileError
from tkir.frontend import compile_source
from tkir.interp import interpret
from tkir.parser import parse_module
from tkir.printer import print_module
from tkir.verifier import verify

BF16 = ml_dtypes.bfloat16
KERNEL = ("kernel k<BM=64, BN=32>(A: gl<f32>[M, BN], O: gl<f32>[M, BN], I: gl<i32>[M, BN], eps: f32) "
          "grid(cdiv(M, BM)) {{\n    reg x: rt<f32, BM, BN> = A[block.x, 0]\n{}\n}}\n")


def lower(body: str) -> str:
    module = compile_source(KERNEL.format(body), "t.tk")
    verify(module)
    text = print_module(module)
    again = parse_module(text)
    verify(again)
    assert print_module(again) == text
    return text


def error(body: str) -> CompileError:
    with pytest.raises(CompileError) as info:
        compile_source(KERNEL.format(body), "t.tk")
    return info.value


def run(body: str, a: np.ndarray, eps: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Compile `body` and interpret it on A = `a` (M x 32); return (O, I)."""
    module = compile_source(KERNEL.format(body), "t.tk")
    out = np.full(a.shape, np.nan, np.float32)
    idx = np.full(a.shape, -1, np.int32)
    interpret(module, a, out, idx, scalars={"eps": eps})
    return out, idx


def rand(shape: tuple[int, int] = (128, 32), seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Unary math


@pytest.mark.parametrize("f", ["tanh", "sigmoid", "erf"])
def test_unary_math_lowers_on_tiles_vectors_and_run_time_scalars(f: str) -> None:
    text = lower(f"let y = {f}(x)\nlet v = {f}(row_max(x))\nlet e = {f}(eps)\nO[block.x, 0] = y * e")
    assert f"= tk.{f} %x : rt<f32, 64, 32>" in text
    assert f"tk.{f} %0 : rv<f32, 64>" in text
    assert f"= tk.{f} %eps : f32" in text


@pytest.mark.parametrize(("f", "ref"), [
    ("tanh", math.tanh), ("sigmoid", lambda v: 1 / (1 + math.exp(-v))), ("erf", math.erf)])
def test_unary_math_folds_compile_time_numbers(f: str, ref: object) -> None:
    text = lower(f"let c = {f}(0.75)\nx = x * c\nO[block.x, 0] = x")
    want = float(np.float32(ref(0.75)))
    consts = [float(line.split("value = ")[1].split("}")[0]) for line in text.splitlines()
              if "arith.const" in line and ": f32" in line]
    assert any(abs(c - want) < 1e-6 for c in consts), text
    assert f"tk.{f}" not in text


def test_sigmoid_folds_large_negative_without_overflow() -> None:
    text = lower("let c = sigmoid(0.0 - 1000.0)\nx = x + c\nO[block.x, 0] = x")
    assert "{value = 0.0} : f32" in text


@pytest.mark.parametrize(("f", "ref"), [
    ("tanh", np.tanh),
    ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
    ("erf", np.vectorize(math.erf)),
])
def test_unary_math_interprets_like_numpy(f: str, ref: object) -> None:
    a = rand()
    a[0, :4] = [-100.0, 100.0, 0.0, -0.0]
    out, _ = run(f"O[block.x, 0] = {f}(x)", a)
    np.testing.assert_allclose(out, ref(a.astype(np.float64)), rtol=2e-6, atol=2e-7)


def test_unary_math_on_bf16_rounds_to_bf16() -> None:
    a = rand()
    out, _ = run("let y = f32(tanh(bf16(x)))\nO[block.x, 0] = y", a)
    want = np.tanh(a.astype(BF16).astype(np.float32)).astype(BF16).astype(np.float32)
    np.testing.assert_array_equal(out, want)


def test_unary_math_needs_floats() -> None:
    e = error("let y = tanh(col_index(x))")
    assert "'tanh' needs a float operand, got rt<i32, 64, 32>" in e.message


# ---------------------------------------------------------------------------------------------
# Index tiles and i32 tile arithmetic


def test_index_tiles_and_int_arithmetic_lower_to_i32_ops() -> None:
    text = lower("let j = block.x\nlet c = col_index(x) + j * BN\nlet r = max(row_index(x) - 1, 0) * 2\n"
                 "I[block.x, 0] = c - r")
    assert "tk.index %x {axis = col} : rt<i32, 64, 32>" in text
    assert "tk.index %x {axis = row} : rt<i32, 64, 32>" in text
    assert "%c = tk.add %0, %1 : rt<i32, 64, 32>" in text
    assert "tk.max %3, %c0 : rt<i32, 64, 32>" in text
    assert "tk.mul %4, %c2 : rt<i32, 64, 32>" in text


def test_index_tiles_interpret() -> None:
    a = rand()
    _, idx = run("let c = col_index(x) + block.x * 100\nI[block.x, 0] = c * 2 - row_index(x)", a)
    r, c = np.indices(a.shape)
    block = r // 64
    np.testing.assert_array_equal(idx, (c + block * 100) * 2 - r % 64)


def test_negated_index_tile_and_cast_to_float() -> None:
    a = rand()
    out, _ = run("O[block.x, 0] = f32(-col_index(x)) + x", a)
    np.testing.assert_array_equal(out, a - np.indices(a.shape)[1].astype(np.float32))


@pytest.mark.parametrize(("body", "words"), [
    ("let c = f32(col_index(x)) % 2", "'%' on a float tile (rt<f32, 64, 32>) is not supported"),
    ("let c = col_index(x) + 1.5", "1.5 is not an integer"),
    ("let c = col_index(x) * eps", "scalar type mismatch: f32 where i32 is needed"),
    ("let c = col_index(x) + x", "dtype mismatch in '+'"),
    ("let c = row_index(eps)", "'row_index' takes a register tile, not f32"),
    ("let v = row_max(x)\nlet c = col_index(v)", "'col_index' takes a register tile, not rv<f32, 64>"),
    ("let c = row_sum(col_index(x))", "'row_sum' reduces float tiles"),
    ("reg m: rt<i1, 64, 64>", "rt<i1, ...> cannot be declared"),
    ("reg m: rv<i1, 64>", "rv<i1, ...> cannot be declared"),
    ("let c = x < 0\nlet d = c + 1", "'+' on a predicate"),
    ("let c = x < 0\nlet d = f32(c)", "cannot cast a predicate"),
])
def test_index_and_int_tile_errors(body: str, words: str) -> None:
    e = error(body)
    assert words in e.message, e.format()


# ---------------------------------------------------------------------------------------------
# Comparisons


@pytest.mark.parametrize(("op", "pred"), [("<", "lt"), ("<=", "le"), (">", "gt"), (">=", "ge"),
                                          ("==", "eq"), ("!=", "ne")])
def test_tile_comparisons_lower_to_tk_cmp(op: str, pred: str) -> None:
    text = lower(f"let c = x {op} eps\nO[block.x, 0] = where(c, x, 0)")
    assert f"%c = tk.cmp %x, %eps {{pred = {pred}}} : rt<i1, 64, 32>" in text


def test_comparison_with_a_constant_on_the_left_and_vector_broadcast() -> None:
    text = lower("let m = row_max(x)\nlet c = 0.5 < x\nlet d = x >= m\nlet e = m > 0\n"
                 "O[block.x, 0] = where(c, where(d, x, 1), 2)")
    assert "%c = tk.cmp %cst, %x {pred = lt} : rt<i1, 64, 32>" in text
    assert "%d = tk.cmp %x, %m {pred = ge, bcast = row} : rt<i1, 64, 32>" in text
    assert "%e = tk.cmp %m, %cst.1 {pred = gt} : rv<i1, 64>" in text


@pytest.mark.parametrize(("op", "fn"), [("<", np.less), ("<=", np.less_equal), (">", np.greater),
                                        (">=", np.greater_equal), ("==", np.equal), ("!=", np.not_equal)])
def test_comparisons_interpret(op: str, fn: object) -> None:
    a = np.round(rand())  # integral values so == and != have hits
    out, _ = run(f"O[block.x, 0] = where(x {op} 1.0, x, -inf)", a)
    np.testing.assert_array_equal(out, np.where(fn(a, 1.0), a, -np.inf))


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_float_comparisons_with_nan_are_false_but_not_equal_is_true(op: str) -> None:
    """IEEE 754, numpy and torch: `x != x` is true exactly where x is a NaN (a user's NaN test)."""
    a = rand()
    a[3, :] = np.nan
    out, _ = run(f"O[block.x, 0] = where(x {op} 0.0, 1.0, 2.0 + x * 0.0)", a)
    assert (out[3] == 1.0).all() if op == "!=" else (out[3] != 1.0).all()
    assert (out[:3] == np.where(eval(f"a[:3] {op} 0"), 1.0, 2.0)).all()


def test_vector_broadcast_comparison_interprets() -> None:
    a = rand()
    out, _ = run("let m = row_max(x)\nO[block.x, 0] = where(x >= m - 1.0, x, 0)", a)
    m = a.reshape(2, 64, 32).max(axis=2).reshape(128, 1)
    np.testing.assert_array_equal(out, np.where(a >= m - 1.0, a, 0))


@pytest.mark.parametrize(("body", "words"), [
    ("let c = eps < eps", "run-time scalar comparisons are not supported yet"),
    ("let c = x < col_index(x)", "dtype mismatch in '<'"),
    ("reg y: rt<f32, 64, 64> = 0\nlet c = x < y", "shape mismatch in '<'"),
    ("let c = (x < 0) == (x > 1)", "'==' compares values, not predicates"),
    ("shared s: st<f32, 64, 32>\nlet c = s < 1.0", "computes on registers"),
])
def test_comparison_errors(body: str, words: str) -> None:
    e = error(body)
    assert words in e.message, e.format()


# ---------------------------------------------------------------------------------------------
# where


def test_where_lowers_to_tk_select_with_scalars_on_either_side() -> None:
    text = lower("let a = where(x > 0, x, -inf)\nlet b = where(x > 0, eps, a)\nO[block.x, 0] = b")
    assert "%a = tk.select %0, %x, %cst.1 : rt<f32, 64, 32>" in text
    assert "%b = tk.select %1, %eps, %a : rt<f32, 64, 32>" in text
    assert "{value = -inf} : f32" in text


def test_where_on_i32_tiles_and_vectors() -> None:
    text = lower("let i = where(x > 0, col_index(x), 7)\nlet v = row_max(x)\n"
                 "let w = where(v > 0, v, 0)\nI[block.x, 0] = i")
    assert "%i = tk.select %0, %1, %c7 : rt<i32, 64, 32>" in text
    assert "%w = tk.select %2, %v, %cst : rv<f32, 64>" in text


def test_where_interprets_with_run_time_scalar() -> None:
    a = rand()
    out, idx = run("O[block.x, 0] = where(x < eps, eps, x)\nI[block.x, 0] = where(x < 0, row_index(x), -1)",
                   a, eps=0.25)
    np.testing.assert_array_equal(out, np.maximum(a, np.float32(0.25)))
    np.testing.assert_array_equal(idx, np.where(a < 0, np.indices(a.shape)[0] % 64, -1))


@pytest.mark.parametrize(("body", "words"), [
    ("let y = where(x, x, 0)", "'where' needs a condition tile"),
    ("let y = where(1, x, 0)", "'where' needs a condition tile"),
    ("let y = where(x > 0, 1.0, eps)", "both are scalars"),
    ("reg y: rt<f32, 64, 64> = 0\nlet z = where(x > 0, y, 0)", "shape mismatch in 'where'"),
    ("let y = where(x > 0, x, bf16(x))", "dtype mismatch in 'where'"),
    ("let y = where(x > 0, col_index(x), 0.5)", "0.5 is not an integer"),
    ("let y = where(x > 0, x)", "'where' takes 3 arguments, got 2"),
    ("let v = row_max(x)\nlet y = where(v > 0, x, 0)", "shape mismatch in 'where'"),
])
def test_where_errors(body: str, words: str) -> None:
    e = error(body)
    assert words in e.message, e.format()


# ---------------------------------------------------------------------------------------------
# mask_causal's fill


def test_mask_causal_fill_argument() -> None:
    text = lower("let y = mask_causal(x, 0, 0, -1e4)\nlet z = mask_causal(y, 0, 0)\nO[block.x, 0] = z")
    assert "%y = tk.mask_causal %x, %c0, %c0 {fill = -10000.0}" in text
    assert "%z = tk.mask_causal %y, %c0, %c0 {fill = -inf}" in text


def test_mask_causal_fill_interprets() -> None:
    a = rand()
    out, _ = run("O[block.x, 0] = mask_causal(x, block.x * BM, 8, 0.5)", a)
    r, c = np.indices(a.shape)
    np.testing.assert_array_equal(out, np.where(8 + c > r, np.float32(0.5), a))


@pytest.mark.parametrize(("body", "words"), [
    ("let y = mask_causal(x, 0, 0, eps)", "the fill of 'mask_causal' must be a compile-time number"),
    ("let y = mask_causal(x, 0)", "'mask_causal' takes 3 or 4 arguments, got 2"),
    ("let y = mask_causal(col_index(x), 0, 0)", "masks a float register tile"),
])
def test_mask_causal_errors(body: str, words: str) -> None:
    e = error(body)
    assert words in e.message, e.format()


# ---------------------------------------------------------------------------------------------
# fp8


@pytest.mark.parametrize(("decl", "typ"), [("shared s: st<e4m3, 64, 64>", "st<e4m3, 64, 64>"),
                                         ("reg r: rt<e5m2, 64, 32> = e5m2(x)", "rt<e5m2, 64, 32>"),
                                         ("shared v: sv<e5m2, 64>", "sv<e5m2, 64>"),
                                         ("reg v: rv<e4m3, 64> = e4m3(row_sum(x))", "rv<e4m3, 64>")])
def test_fp8_tiles_and_vectors_are_declared(decl: str, typ: str) -> None:
    assert typ in lower(decl)  # in the IR, which round-trips (lower)


def test_fp8_global_parameters_stay() -> None:
    module = compile_source("kernel k(A: gl<e4m3>[M, K]) grid(M / 64) {\n}\n", "t.tk")
    assert "gl<e4m3>[M, K]" in print_module(module)


def test_fp8_casts_saturate_and_round_trip() -> None:
    """e4m3(x) / e5m2(x) round to nearest even with saturation (cvt.rn.satfinite): past 448 (e4m3) or 57344
    (e5m2) a value becomes the largest finite one, NaN stays NaN; f32(...) of fp8 is exact."""
    text = lower("let y = e4m3(x)\nlet z = f32(e5m2(x))")
    assert "tk.cast %x : rt<e4m3, 64, 32>" in text
    a = rand((64, 32))
    a[0, :6] = [1000.0, -1e9, np.inf, -np.inf, np.nan, 0.3]
    out, _ = run("O[block.x, 0] = f32(e4m3(x))", a)
    assert out[0, :4].tolist() == [448.0, -448.0, 448.0, -448.0] and np.isnan(out[0, 4])
    assert out[0, 5] == float(np.float32(0.3).astype(ml_dtypes.float8_e4m3fn))
    big = np.full((64, 32), 1e6, np.float32)
    out, _ = run("O[block.x, 0] = f32(e5m2(x))", big)
    assert (out == 57344.0).all()


def test_fp8_cast_of_a_scalar_is_refused() -> None:
    e = error("let y = e4m3(eps)")
    assert "'e4m3' casts tiles and vectors; there are no e4m3 scalars" in e.message
    assert (e.loc.line, e.loc.col) == (3, 9)


def test_fp8_cast_of_a_compile_time_number_folds_to_the_fp8_value() -> None:
    text = lower("x = x * e4m3(1000.0) + e5m2(0.3)")
    assert "value = 448.0" in text and "value = 0.3125" in text


# ---------------------------------------------------------------------------------------------
# The brief's masked kernel: through plan-occupancy on both targets, and in the interpreter


MASKED = """kernel masked<BQ=64, BKV=64, D=64>(Q: gl<bf16>[N, D], K: gl<bf16>[N, D], O: gl<f32>[N, BKV]) grid(cdiv(N, BQ)) {
    shared q: st<bf16, BQ, D>
    shared k: st<bf16, BKV, D>
    q = Q[block.x, 0]
    k = K[0, 0]
    reg s: rt<f32, BQ, BKV> = q @ k.T
    s = where(col_index(s) < N, tanh(s), -inf)
    s = where(row_index(s) >= col_index(s), s, 0)
    O[block.x, 0] = s
}
"""


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_masked_kernel_compiles_through_plan_occupancy(tmp_path: Path, target: str) -> None:
    src = tmp_path / "masked.tk"
    src.write_text(MASKED)
    r = subprocess.run([sys.executable, "-m", "tkir.cli", "compile", str(src), "--stop-after=plan-occupancy",
                        f"--target={target}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    layout = "wgmma_acc" if target == "sm_90a" else "mma_c"
    selects = [ln for ln in r.stdout.splitlines() if "tk.select" in ln or "tk.cmp" in ln or "tk.index" in ln]
    assert len(selects) == 7 and all(f"kind = {layout}" in ln for ln in selects), r.stdout
    assert "convert_layout" not in r.stdout
    assert "occupancy = {" in r.stdout


@pytest.mark.parametrize("n", [128, 40])
def test_masked_kernel_interprets(n: int) -> None:
    rng = np.random.default_rng(n)
    q = rng.standard_normal((n, 64)).astype(BF16)
    k = rng.standard_normal((n, 64)).astype(BF16)
    out = np.full((n, 64), np.nan, np.float32)
    interpret(compile_source(MASKED, "masked.tk"), q, k, out)
    kpad = np.zeros((64, 64), np.float32)
    kpad[: min(n, 64)] = k[:64].astype(np.float32)
    s = q.astype(np.float32) @ kpad.T
    row, col = np.indices(s.shape)
    s = np.where(col < n, np.tanh(s), -np.inf)
    s = np.where(row % 64 >= col, s, 0)
    np.testing.assert_allclose(out, s, rtol=1e-5, atol=1e-6)


def test_predicate_row_layout_uses_four_byte_vec() -> None:
    """A class is laid out from its first value, which for verified IR is never an i1 (operands come
    first); should one be, its `row` vec is that of a 4-byte dtype, not 16 one-byte lanes."""
    from tkir.passes.infer_layouts import _KernelLayouts
    from tkir.types import rt

    module = compile_source("kernel k(A: gl<f32>[M, K]) grid(M / 64) {\n}\n", "t.tk")
    layouts = _KernelLayouts(module.kernel, sm80=False)
    layouts.compute_warps = 4
    assert layouts._row_layout(rt("i1", 64, 64)) == layouts._row_layout(rt("f32", 64, 64))
    assert layouts._row_layout(rt("i1", 64, 64)).vec == 4
