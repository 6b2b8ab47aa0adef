"""Op-level semantics of the reference interpreter, on hand-written tk-level IR."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tkir.interp import HANDLERS, InterpError, interpret, register_handler
from tkir.parser import parse_module
from tkir.verifier import VerifyError, verify

BF16 = ml_dtypes.bfloat16


def run(text: str, *arrays: np.ndarray, verified: bool = True, **kw: object) -> None:
    m = parse_module(text)
    if verified:
        verify(m)  # the IR under test is valid IR, so the interpreter is tested on what passes see
    interpret(m, *arrays, **kw)


def rand(shape: tuple[int, ...], dtype: object = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, np.float32).astype(dtype)


# ---------------------------------------------------------------------------------------------
# tk.mma


MMA = """
tk.kernel @k {grid = ["1"]} {
  ^(%A: gl<bf16>[$AR, $AC], %B: gl<bf16>[$BR, $BC], %C: gl<f32>[32, 48], %D: gl<f32>[32, 48])
  %c0 = arith.const {value = 0} : i32
  %a = tk.alloc : st<bf16, $AR, $AC, swizzle=128>
  tk.load %a, %A, %c0, %c0
  %b = tk.load %B, %c0, %c0 : rt<bf16, $BR, $BC, layout=row>
  %c = tk.load %C, %c0, %c0 : rt<f32, 32, 48>
  %d = tk.mma %a, %b, %c {trans_a = $TA, trans_b = $TB} : rt<f32, 32, 48, layout=wgmma_acc>
  tk.store %D, %d, %c0, %c0
}
"""


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_mma_transposes_and_accumulates_in_f32(ta: bool, tb: bool) -> None:
    m, n, k = 32, 48, 64
    a_shape = (k, m) if ta else (m, k)
    b_shape = (n, k) if tb else (k, n)
    text = (MMA.replace("$AR", str(a_shape[0])).replace("$AC", str(a_shape[1]))
            .replace("$BR", str(b_shape[0])).replace("$BC", str(b_shape[1]))
            .replace("$TA", str(ta).lower()).replace("$TB", str(tb).lower()))
    A, B, C = rand(a_shape, BF16, 1), rand(b_shape, BF16, 2), rand((m, n), np.float32, 3)
    D = np.full((m, n), np.nan, np.float32)
    run(text, A, B, C, D)
    a64, b64 = A.astype(np.float64), B.astype(np.float64)
    want = (a64.T if ta else a64) @ (b64.T if tb else b64) + C
    np.testing.assert_allclose(D, want, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# Reductions, broadcasts, masks, elementwise math.

REDUCE = """
tk.kernel @k {grid = ["1"]} {
  ^(%X: gl<f32>[16, 32], %Y: gl<f32>[$N])
  %c0 = arith.const {value = 0} : i32
  %x = tk.load %X, %c0, %c0 : rt<f32, 16, 32>
  %r = tk.reduce %x {kind = $KIND, axis = $AXIS} : rv<f32, $N>
  tk.store %Y, %r, %c0
}
"""


@pytest.mark.parametrize("kind", ["max", "min", "sum"])
@pytest.mark.parametrize("axis", ["row", "col"])
def test_reduce(kind: str, axis: str) -> None:
    n = 16 if axis == "row" else 32
    X = rand((16, 32))
    Y = np.full(n, np.nan, np.float32)
    run(REDUCE.replace("$KIND", kind).replace("$AXIS", axis).replace("$N", str(n)), X, Y)
    want = getattr(np, kind)(X.astype(np.float64), axis=1 if axis == "row" else 0)
    np.testing.assert_allclose(Y, want, rtol=1e-6, atol=1e-5)


BCAST = """
tk.kernel @k {grid = ["1"]} {
  ^(%X: gl<f32>[16, 32], %V: gl<f32>[$N], %Y: gl<f32>[16, 32])
  %c0 = arith.const {value = 0} : i32
  %x = tk.load %X, %c0, %c0 : rt<f32, 16, 32>
  %v = tk.load %V, %c0 : rv<f32, $N>
  %y = tk.$OP $ARGS {bcast = $BCAST} : rt<f32, 16, 32>
  tk.store %Y, %y, %c0, %c0
}
"""


@pytest.mark.parametrize("bcast", ["row", "col"])
@pytest.mark.parametrize("op, vector_first", [("sub", False), ("sub", True), ("div", False), ("max", True)])
def test_broadcast_binary(bcast: str, op: str, vector_first: bool) -> None:
    n = 16 if bcast == "row" else 32
    X, V = rand((16, 32), seed=1), rand((n,), seed=2)
    Y = np.full((16, 32), np.nan, np.float32)
    args = "%v, %x" if vector_first else "%x, %v"
    run(BCAST.replace("$N", str(n)).replace("$OP", op).replace("$ARGS", args).replace("$BCAST", bcast),
        X, V, Y)
    v = V[:, None] if bcast == "row" else V[None, :]
    fn = {"sub": np.subtract, "div": np.divide, "max": np.maximum}[op]
    want = fn(v, X) if vector_first else fn(X, v)
    np.testing.assert_allclose(Y, want, rtol=1e-6)


MASK = """
tk.kernel @k {grid = ["1"]} {
  ^(%X: gl<f32>[16, 32], %Y: gl<f32>[16, 32])
  %c0 = arith.const {value = 0} : i32
  %r0 = arith.const {value = $ROW0} : i32
  %col0 = arith.const {value = $COL0} : i32
  %x = tk.load %X, %c0, %c0 : rt<f32, 16, 32>
  %y = tk.mask_causal %x, %r0, %col0 {fill = -inf} : rt<f32, 16, 32>
  tk.store %Y, %y, %c0, %c0
}
"""


@pytest.mark.parametrize("row0, col0", [(0, 0), (32, 16), (16, 40)])
def test_mask_causal_fills_keys_after_the_query(row0: int, col0: int) -> None:
    X = rand((16, 32))
    Y = np.zeros((16, 32), np.float32)
    run(MASK.replace("$ROW0", str(row0)).replace("$COL0", str(col0)), X, Y)
    r, c = np.meshgrid(np.arange(16), np.arange(32), indexing="ij")
    want = np.where(col0 + c > row0 + r, -np.inf, X)
    np.testing.assert_array_equal(Y, want)
    assert np.isinf(Y).any() or col0 + 31 <= row0  # the cases above do mask something


UNARY = """
tk.kernel @k {grid = ["1"]} {
  ^(%X: gl<f32>[16, 16], %Y: gl<f32>[16, 16], %T: gl<f32>[16, 16])
  %c0 = arith.const {value = 0} : i32
  %x = tk.load %X, %c0, %c0 : rt<f32, 16, 16>
  %y = tk.$OP %x : rt<f32, 16, 16>
  tk.store %Y, %y, %c0, %c0
  %t = tk.transpose %x : rt<f32, 16, 16>
  tk.store %T, %t, %c0, %c0
}
"""

UNARY_REF = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
             "rsqrt": lambda x: 1 / np.sqrt(x), "abs": np.abs, "neg": np.negative}


@pytest.mark.parametrize("op", sorted(UNARY_REF))
def test_unary_and_transpose(op: str) -> None:
    X = np.abs(rand((16, 16))) + np.float32(0.1)
    X[0, 0] = -X[0, 0]  # negative input: abs/neg see it, log/sqrt give NaN (IEEE, no exception)
    Y, T = np.zeros((16, 16), np.float32), np.zeros((16, 16), np.float32)
    run(UNARY.replace("$OP", op), X, Y, T)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(Y, UNARY_REF[op](X.astype(np.float64)), rtol=1e-6)
    np.testing.assert_array_equal(T, X.T)


def test_layout_attributes_and_conversions_do_not_change_values() -> None:
    text = UNARY.replace("%y = tk.$OP %x : rt<f32, 16, 16>",
                         '%y = tk.convert_layout %x {via = "smem"} : rt<f32, 16, 16, layout=wgmma_acc>')
    X, Y, T = rand((16, 16)), np.zeros((16, 16), np.float32), np.zeros((16, 16), np.float32)
    run(text, X, Y, T, verified=False)  # verified=False: the op is newer than this test's IR core
    np.testing.assert_array_equal(Y, X)


# ---------------------------------------------------------------------------------------------
# Global memory: tile coordinates, out-of-bounds edges.

COPY = """
tk.kernel @k {grid = ["cdiv(M, 16)", "cdiv(N, 16)"]} {
  ^(%X: gl<f32>[M, N], %Y: gl<f32>[P, Q])
  %bx = tk.block_id {dim = 0} : i32
  %by = tk.block_id {dim = 1} : i32
  %s = tk.alloc : st<f32, 16, 16>
  tk.load %s, %X, %bx, %by
  %t = tk.load %s : rt<f32, 16, 16>
  tk.store %Y, %t, %bx, %by
}
"""


def test_out_of_bounds_load_reads_zero() -> None:
    X = rand((20, 40)) + np.float32(10)  # no zeros in X
    Y = np.full((32, 48), np.nan, np.float32)
    run(COPY, X, Y)
    np.testing.assert_array_equal(Y[:20, :40], X)
    assert (Y[20:, :] == 0).all() and (Y[:, 40:] == 0).all()


def test_out_of_bounds_store_writes_only_inside() -> None:
    X = rand((20, 40))
    Y = np.full((18, 35), np.nan, np.float32)
    run(COPY, X, Y, check_requires=False)
    np.testing.assert_array_equal(Y, X[:18, :35])


def test_requires_are_checked_as_the_launch_checks_them() -> None:
    """Y's columns are copied without TMA and not masked: the launch refuses Q = 35, and so does the
    interpreter, with the same message (tkir.requires.requirement_failure)."""
    from tkir.requires import module_requires, requirement_failure

    m = parse_module(COPY)
    X, Y = rand((20, 40)), np.full((18, 35), np.nan, np.float32)
    failures = [f for r in module_requires(m) if (f := requirement_failure("k", r, {"M": 20, "N": 40, "P": 18, "Q": 35}))]
    assert failures
    with pytest.raises(InterpError) as e:
        interpret(m, X, Y)
    assert str(e.value) == failures[0]
    assert np.isnan(Y).all()  # nothing ran


REUSED_BUFFER = """
tk.kernel @k {grid = ["2"]} {
  ^(%X: gl<f32>[24, 16], %Y: gl<f32>[32, 16])
  %bx = tk.block_id {dim = 0} : i32
  %c0 = arith.const {value = 0} : i32
  %c1 = arith.const {value = 1} : i32
  %s = tk.alloc : st<f32, 16, 16>
  tk.load %s, %X, %c0, %c0
  %first = tk.load %s : rt<f32, 16, 16>
  tk.load %s, %X, %c1, %c0
  tk.store %Y, %first, %c0, %c0
  tk.store %Y, %s, %c1, %c0
}
"""


def test_shared_buffer_is_rewritten_and_register_copies_are_snapshots() -> None:
    X = rand((24, 16)) + np.float32(10)
    Y = np.full((32, 16), np.nan, np.float32)
    run(REUSED_BUFFER, X, Y)
    np.testing.assert_array_equal(Y[:16], X[:16])  # read before the buffer was reloaded
    np.testing.assert_array_equal(Y[16:24], X[16:])
    assert (Y[24:] == 0).all()  # the partial second tile zeroed the rows past X's end


LEADING = """
tk.kernel @k {grid = ["B", "H", "2"]} {
  ^(%X: gl<f32>[B, H, 32], %Y: gl<f32>[B, H, 32])
  %b = tk.block_id {dim = 0} : i32
  %h = tk.block_id {dim = 1} : i32
  %j = tk.block_id {dim = 2} : i32
  %v = tk.load %X, %b, %h, %j : rv<f32, 16>
  %bf = arith.cast %b : f32
  %w = tk.add %v, %bf : rv<f32, 16>
  tk.store %Y, %w, %b, %h, %j
}
"""


def test_leading_coordinates_index_plainly_and_the_last_counts_vectors() -> None:
    X = rand((3, 2, 32))
    Y = np.full((3, 2, 32), np.nan, np.float32)
    run(LEADING, X, Y)
    np.testing.assert_array_equal(Y, X + np.arange(3, dtype=np.float32)[:, None, None])


def test_poison_fills_unwritten_shared_memory_with_nan() -> None:
    text = COPY.replace("  tk.load %s, %X, %bx, %by\n", "")
    X, Y = rand((16, 16)), np.ones((16, 16), np.float32)
    run(text, X, Y)
    assert (Y == 0).all()
    run(text, X, Y, poison=True)
    assert np.isnan(Y).all()


# ---------------------------------------------------------------------------------------------
# Loops, scalars, rounding.

LOOP = """
tk.kernel @k {grid = ["1"]} {
  ^(%X: gl<f32>[16, 64], %Y: gl<f32>[16, 16], %I: gl<f32>[16])
  %c0 = arith.const {value = 0} : i32
  %c1 = arith.const {value = 1} : i32
  %c2 = arith.const {value = 2} : i32
  %n = arith.const {value = 4} : i32
  %acc0 = tk.fill {value = 0.0} : rt<f32, 16, 16>
  %cnt0 = tk.fill {value = 0.0} : rv<f32, 16>
  %acc, %cnt = scf.for %c1, %n, %c2, %acc0, %cnt0 : rt<f32, 16, 16>, rv<f32, 16> {
    ^(%k: i32, %acc1: rt<f32, 16, 16>, %cnt1: rv<f32, 16>)
    %x = tk.load %X, %c0, %k : rt<f32, 16, 16>
    %acc2 = tk.add %acc1, %x : rt<f32, 16, 16>
    %kf = arith.cast %k : f32
    %cnt2 = tk.add %cnt1, %kf : rv<f32, 16>
    scf.yield %acc2, %cnt2
  }
  tk.store %Y, %acc, %c0, %c0
  tk.store %I, %cnt, %c0
}
"""


def test_loop_carries_values_with_lower_bound_and_step() -> None:
    X = rand((16, 64))
    Y, I = np.zeros((16, 16), np.float32), np.zeros(16, np.float32)
    run(LOOP, X, Y, I)
    np.testing.assert_allclose(Y, X[:, 16:32] + X[:, 48:64], rtol=1e-6)  # k = 1, 3
    assert (I == 4).all()


ARITH = """
tk.kernel @k {grid = ["1"]} {
  ^(%Y: gl<f32>[$N])
  %ones = tk.fill {value = 1.0} : rv<f32, 16>
  %a = arith.const {value = -7} : i32
  %b = arith.const {value = 2} : i32
  %fa = arith.const {value = -7.0} : f32
  %fb = arith.const {value = 2.0} : f32
  $BODY
}
"""
# -7 and 2 at run time: sdiv/srem truncate (docs/ir.md, "Scalar arithmetic"; the front end's compile-time
# folding floors, tests/ir/test_scalar_semantics.py)
ARITH_CASES = [("div", "%a, %b", "i32", -3), ("rem", "%a, %b", "i32", -1), ("cdiv", "%a, %b", "i32", -3),
               ("min", "%a, %b", "i32", -7), ("max", "%a, %b", "i32", 2), ("mul", "%a, %b", "i32", -14),
               ("sub", "%a, %b", "i32", -9), ("add", "%a, %b", "i32", -5),
               ("div", "%fa, %fb", "f32", -3.5)]


def test_scalar_arithmetic_truncates_integer_division_as_the_gpu() -> None:
    lines = []
    for i, (op, args, ty, _) in enumerate(ARITH_CASES):
        lines += [f"%r{i} = arith.{op} {args} : {ty}",
                  f"%f{i} = arith.cast %r{i} : f32" if ty == "i32" else f"%f{i} = arith.add %r{i}, %fb : f32",
                  f"%v{i} = tk.mul %ones, %f{i} : rv<f32, 16>",
                  f"%i{i} = arith.const {{value = {i}}} : i32",
                  f"tk.store %Y, %v{i}, %i{i}"]
    n = len(ARITH_CASES)
    text = ARITH.replace("$N", str(16 * n)).replace("$BODY", "\n  ".join(lines))
    Y = np.full(16 * n, np.nan, np.float32)
    run(text, Y)
    got = Y.reshape(n, 16)[:, 0]
    want = [v if ty == "i32" else v + 2.0 for _, _, ty, v in ARITH_CASES]
    np.testing.assert_array_equal(got, want)


ROUND = """
tk.kernel @k {grid = ["1"]} {
  ^(%X: gl<bf16>[16, 16], %E: gl<bf16>[16, 16], %Y: gl<f32>[16, 16], %Z: gl<f32>[16, 16])
  %c0 = arith.const {value = 0} : i32
  %x = tk.load %X, %c0, %c0 : rt<bf16, 16, 16>
  %e = tk.load %E, %c0, %c0 : rt<bf16, 16, 16>
  %s = tk.add %x, %e : rt<bf16, 16, 16>
  %d = tk.sub %s, %x : rt<bf16, 16, 16>
  %df = tk.cast %d : rt<f32, 16, 16>
  tk.store %Y, %df, %c0, %c0
  %xf = tk.cast %x : rt<f32, 16, 16>
  %ef = tk.cast %e : rt<f32, 16, 16>
  %sf = tk.add %xf, %ef : rt<f32, 16, 16>
  %sb = tk.cast %sf : rt<bf16, 16, 16>
  %sbf = tk.cast %sb : rt<f32, 16, 16>
  tk.store %Z, %sbf, %c0, %c0
}
"""


def test_every_result_is_rounded_to_its_dtype_nearest_even() -> None:
    # bf16 keeps 8 significant bits: the spacing at 1.0 is 2^-7, so 1 + 2^-8 is a tie.
    X = np.ones((16, 16), BF16)
    E = np.full((16, 16), 2.0**-8, BF16)
    E[1] = 3 * 2.0**-8  # 1 + 3*2^-8: tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even)
    Y, Z = np.zeros((16, 16), np.float32), np.zeros((16, 16), np.float32)
    run(ROUND, X, E, Y, Z)
    assert (Y[0] == 0).all()  # (1 + 2^-8) rounded to 1 before the subtraction
    assert (Y[1] == 2.0**-6).all()
    assert (Z[0] == 1.0).all() and (Z[1] == 1 + 2.0**-6).all()


# ---------------------------------------------------------------------------------------------
# Binding arrays and sizes.

GEMM_SIG = """
tk.kernel @k {grid = ["M / 16"]} {
  ^(%A: gl<bf16>[M, K], %B: gl<bf16>[K, 16], %C: gl<bf16>[M, 16])
  %c0 = arith.const {value = 0} : i32
}
"""


@pytest.mark.parametrize("shapes, dtypes, sizes, message", [
    (((32, 8), (8, 16)), (BF16, BF16), None, "takes 3 arrays"),
    (((32, 8), (8, 16), (32, 16)), (BF16, np.float32, BF16), None, "needs dtype bfloat16"),
    (((32, 8), (8, 16), (32, 16, 1)), (BF16,) * 3, None, "rank 2"),
    (((32, 8), (8, 17), (32, 16)), (BF16,) * 3, None, "dim 1 is 16, array has 17"),
    (((32, 8), (9, 16), (32, 16)), (BF16,) * 3, None, "size K: parameter B"),
    (((32, 8), (8, 16), (48, 16)), (BF16,) * 3, None, "M = 32 from parameter A"),
    (((32, 8), (8, 16), (32, 16)), (BF16,) * 3, {"M": 64}, "M = 64 from sizes="),
])
def test_binding_errors(shapes: tuple, dtypes: tuple, sizes: dict | None, message: str) -> None:
    arrays = [np.zeros(s, d) for s, d in zip(shapes, dtypes, strict=True)]
    with pytest.raises(InterpError, match=message):
        run(GEMM_SIG, *arrays, verified=False, sizes=sizes)


def test_unknown_size_and_unknown_op_are_interp_errors() -> None:
    text = GEMM_SIG.replace("%c0 = arith.const {value = 0} : i32", '%n = tk.size {name = "Q"} : i32')
    arrays = [np.zeros((32, 8), BF16), np.zeros((8, 16), BF16), np.zeros((32, 16), BF16)]
    with pytest.raises(VerifyError, match="'tk.size' reads 'Q', which is not a size of @k"):
        run(text, *arrays)  # the verifier refuses a size no tensor has (issue 14)
    with pytest.raises(InterpError, match="size 'Q' is unknown"):
        run(text, *arrays, verified=False)
    run(text, *arrays, sizes={"Q": 3}, verified=False)
    with pytest.raises(InterpError, match="no meaning for op 'test.nothing'"):
        run(GEMM_SIG.replace("arith.const {value = 0}", "test.nothing"), *arrays, verified=False)
    with pytest.raises(InterpError, match="size 'M' is unknown"):
        run('tk.kernel @k {grid = ["M"]} {\n ^()\n}', verified=False)
    assert issubclass(InterpError, ValueError)


SCALAR = """
tk.kernel @k {grid = ["1"]} {
  ^(%X: gl<f32>[16], %alpha: f32, %Y: gl<f32>[16])
  %c0 = arith.const {value = 0} : i32
  %x = tk.load %X, %c0 : rv<f32, 16>
  %y = tk.mul %x, %alpha : rv<f32, 16>
  tk.store %Y, %y, %c0
}
"""


def test_scalar_parameters_bind_by_name() -> None:
    X, Y = rand((16,)), np.zeros(16, np.float32)
    run(SCALAR, X, Y, scalars={"alpha": 3.0})
    np.testing.assert_allclose(Y, 3 * X, rtol=1e-6)
    with pytest.raises(InterpError, match="alpha"):
        run(SCALAR, X, Y)


def test_registered_handler_runs_and_blocks_go_in_row_major_order(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setitem(HANDLERS, "test.record", None)
    register_handler("test.record", lambda op, args, frame: seen.append(frame.block_id))
    run('tk.kernel @k {grid = ["2", "N", "2"]} {\n ^(%X: gl<f32>[N])\n test.record\n}',
        np.zeros(3, np.float32), verified=False)
    assert seen == [(x, y, z) for x in range(2) for y in range(3) for z in range(2)]


# ---------------------------------------------------------------------------------------------
# tk.index, tk.cmp, tk.select, tk.tanh/sigmoid/erf (hand-written IR; the front end is tested in
# tests/frontend/test_lang_elementwise.py)


SELECT_IR = """
tk.kernel @k {grid = ["1"]} {
  ^(%X: gl<f32>[32, 48], %V: gl<f32>[32], %Y: gl<f32>[32, 48], %I: gl<i32>[32, 48])
  %c0 = arith.const {value = 0} : i32
  %c5 = arith.const {value = 5} : i32
  %lo = arith.const {value = -1.0} : f32
  %x = tk.load %X, %c0, %c0 : rt<f32, 32, 48>
  %v = tk.load %V, %c0 : rv<f32, 32>
  %col = tk.index %x {axis = col} : rt<i32, 32, 48>
  %row = tk.index %x {axis = row} : rt<i32, 32, 48>
  %k = tk.add %col, %c5 : rt<i32, 32, 48>
  %tri = tk.cmp %row, %k {pred = ge} : rt<i1, 32, 48>
  %big = tk.cmp %x, %v {pred = gt, bcast = row} : rt<i1, 32, 48>
  %t = tk.$F %x : rt<f32, 32, 48>
  %a = tk.select %tri, %t, %lo : rt<f32, 32, 48>
  %y = tk.select %big, %lo, %a : rt<f32, 32, 48>
  %i = tk.select %big, %row, %k : rt<i32, 32, 48>
  tk.store %Y, %y, %c0, %c0
  tk.store %I, %i, %c0, %c0
}
"""


@pytest.mark.parametrize(("f", "ref"), [("tanh", np.tanh), ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
                                        ("erf", np.vectorize(math.erf))])
def test_index_cmp_select_and_new_unary_ops(f: str, ref: object) -> None:
    X, V = rand((32, 48), np.float32, 1), rand((32,), np.float32, 2)
    Y, I = np.zeros((32, 48), np.float32), np.zeros((32, 48), np.int32)
    run(SELECT_IR.replace("$F", f), X, V, Y, I)
    row, col = np.indices((32, 48))
    big = X > V[:, None]
    a = np.where(row >= col + 5, ref(X.astype(np.float64)), -1.0)
    np.testing.assert_allclose(Y, np.where(big, -1.0, a), rtol=2e-6, atol=2e-7)
    np.testing.assert_array_equal(I, np.where(big, row, col + 5))


@pytest.mark.parametrize(("line", "words"), [
    ("%bad = tk.cmp %x, %v {pred = gt, bcast = row} : rt<f32, 32, 48>", "yields an i1"),
    ("%bad = tk.cmp %x, %lo {pred = less} : rt<i1, 32, 48>", "needs pred"),
    ("%bad = tk.cmp %col, %lo {pred = lt} : rt<i1, 32, 48>", "scalar with a rt<i32, 32, 48>"),
    ("%bad = tk.select %x, %x, %lo : rt<f32, 32, 48>", "condition must be an i1"),
    ("%bad = tk.select %tri, %col, %lo : rt<i32, 32, 48>", "a f32 scalar for a rt<i32"),
    ("%bad = tk.select %tri, %x, %col : rt<f32, 32, 48>", "must match the result"),
    ("%bad = tk.select %tri, %lo, %lo : rt<f32, 32, 48>", "needs a tile or vector"),
    ("%bad = tk.index %x {axis = row} : rt<f32, 32, 48>", "yields rt<i32, 32, 48>"),
    ("%bad = tk.index %v {axis = row} : rt<i32, 32, 48>", "shape of an rt"),
    ("%bad = tk.rem %x, %lo : rt<f32, 32, 48>", "'tk.rem' takes integer tiles"),
    ("%bad = tk.reduce %col {kind = argmax, axis = row} : rv<i32, 32>", "takes a float tile and yields rv<i32, 32>"),
    ("%bad = tk.reduce %x {kind = argmax, axis = row} : rv<f32, 32>", "takes a float tile and yields rv<i32, 32>"),
    ("%bad = tk.reduce %x {kind = argmin, axis = col} : rv<i32, 48>", "reduces rows only"),
    ("%bad = tk.add %tri, %tri : rt<i1, 32, 48>", "predicates"),
    ("%bad = tk.tanh %col : rt<i32, 32, 48>", "needs a float operand"),
])
def test_new_op_checkers_reject_bad_forms(line: str, words: str) -> None:
    text = SELECT_IR.replace("$F", "erf").replace("  tk.store %Y", f"  {line}\n  tk.store %Y")
    with pytest.raises(VerifyError, match=words):
        verify(parse_module(text))


# ---------------------------------------------------------------------------------------------
# run-time i32 arithmetic: 32 bits, as on the GPU (tkir/scalar.py)

WRAPPED_BOUND = """
kernel k(X: gl<f32>[N, 64], Y: gl<f32>[N, 64]) grid(1) {
    reg acc: rt<f32, 16, 64> = 0
    for i in $LO .. $HI $STEP {
        acc = acc + 1.0
    }
    Y[0, 0] = acc
}
"""


def _count_iterations(lo: str, hi: str, n: int, step: str = "") -> np.ndarray:
    from tkir.frontend import compile_source

    module = compile_source(WRAPPED_BOUND.replace("$LO", lo).replace("$HI", hi).replace("$STEP", step), "w.tk")
    y = np.full((n, 64), np.nan, np.float32)
    interpret(module, np.zeros((n, 64), np.float32), y)
    return y[0, 0]


def test_a_loop_bound_past_32_bits_wraps_as_on_the_gpu() -> None:
    """N * N + 16 at N = 65536 is 2**32 + 16 exactly, 16 on the GPU's i32: the loop runs 16 times in the
    interpreter too (before, it counted to 2**32 + 16 and never finished). The front end warns where the
    bound multiplies two run-time values, the interpreter names the op that wrapped."""
    from tkir.frontend.stmts import SourceWarning
    from tkir.interp.ops import IntegerOverflowWarning

    with pytest.warns(SourceWarning, match=r"w.tk:4:19: this loop bound multiplies two values known only at run"):
        with pytest.warns(IntegerOverflowWarning, match=r"w.tk:4:\d+: 'arith.mul' on i32 passes 32 bits and wraps"):
            assert _count_iterations("0", "N * N + 16", 65536) == 16
        assert _count_iterations("0", "N * N + 16", 16) == 16 * 16 + 16  # no wrap: the exact count


def test_a_loop_counter_that_would_wrap_is_refused() -> None:
    """`for i in N .. 2147483647 step 2`: the GPU's counter goes 2147483646 -> -2147483648 and the loop never
    ends; the interpreter says so instead of returning as if it had ended."""
    from tkir.frontend.stmts import SourceWarning

    with pytest.raises(InterpError, match=r"the loop counter passes 2147483647 \(from 16 to 2147483647 step 2"), \
            pytest.warns(SourceWarning, match=r"w.tk:4:\d+: the loop counter can pass 2147483647 \(up to 2147483646 \+ 2"):
        _count_iterations("N", "2147483647", 16, "step 2")


def test_an_out_of_range_scalar_argument_is_refused() -> None:
    text = """tk.kernel @k {grid = ["1"]} {
  ^(%O: gl<f32>[16], %s: i32)
  %c0 = arith.const {value = 0} : i32
  %t = tk.fill {value = 0.0} : rv<f32, 16>
  tk.store %O, %t, %c0
}
"""
    with pytest.raises(InterpError, match=r"scalar parameter s: 2147483648 does not fit i32"):
        run(text, np.zeros(16, np.float32), scalars={"s": 2**31})
