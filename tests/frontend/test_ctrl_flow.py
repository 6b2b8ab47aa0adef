"""Run-time `if`/`else` and loop steps: the front end's IR, the round trip and the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from tkir.diagnostics import CompileError
from tkir.frontend import compile_source
from tkir.interp import interpret
from tkir.parser import parse_module
from tkir.printer import print_module
from tkir.verifier import VerifyError, verify

IF_ELSE = """
kernel k<BN=64>(X: gl<f32>[M, N], Y: gl<f32>[M, N], Z: gl<f32>[M, N]) grid(M / 16, N / BN) {
    reg x: rt<f32, 16, BN> = X[block.x, block.y]
    reg y: rt<f32, 16, BN> = 0
    if block.x == 0 {
        x = x * 2.0
    } else if block.y * BN < N - BN {
        x = x + 1.0
        y = x
    } else {
        y = x
    }
    Y[block.x, block.y] = x
    Z[block.x, block.y] = y
}
"""


def _compile(src: str, **consts: int):
    return compile_source(src, "t.tk", consts or None)


def _round_trip(text: str) -> None:
    again = parse_module(text)
    verify(again)
    assert print_module(again) == text


def test_runtime_if_else_chain_ir() -> None:
    text = print_module(_compile(IF_ELSE))
    assert "%0 = arith.cmp %bx, %c0 {pred = eq} : i1" in text
    assert "%x.1, %y.1 = scf.if %0 : rt<f32, 16, 64>, rt<f32, 16, 64> {" in text
    assert "%3 = arith.cmp %1, %2 {pred = lt} : i1" in text  # the `else if`, nested in the else region
    assert "scf.yield %x.2, %y\n  } {" in text  # then region yields the unchanged y
    assert "tk.store %Y, %x.1, %bx, %by" in text
    _round_trip(text)


def test_runtime_if_else_interpreted() -> None:
    m, n = 48, 192
    X = np.random.default_rng(0).standard_normal((m, n), np.float32)
    Y, Z = np.full_like(X, np.nan), np.full_like(X, np.nan)
    interpret(_compile(IF_ELSE), X, Y, Z)
    want_y, want_z = X + 1.0, X + 1.0
    want_y[:16], want_z[:16] = 2 * X[:16], 0.0  # block.x == 0
    last = slice(n - 64, n)  # block.y * 64 < N - 64 fails for the last column block
    want_y[16:, last], want_z[16:, last] = X[16:, last], X[16:, last]
    np.testing.assert_array_equal(Y, want_y)
    np.testing.assert_array_equal(Z, want_z)


def test_if_without_else_has_a_yielding_else_region() -> None:
    src = """
kernel k(X: gl<f32>[M, 64]) grid(M / 16) {
    reg x: rt<f32, 16, 64> = X[block.x, 0]
    if block.x != 1 {
        reg t: rt<f32, 16, 64> = 0
        t = x + 1.0
        x = t * 3.0
    }
    X[block.x, 0] = x
}
"""
    text = print_module(_compile(src))
    assert "%x.1 = scf.if %0 : rt<f32, 16, 64> {" in text
    assert "  } {\n    scf.yield %x\n  }" in text
    _round_trip(text)
    X = np.arange(48 * 64, dtype=np.float32).reshape(48, 64)
    want = (X + 1.0) * 3.0
    want[16:32] = X[16:32]
    interpret(_compile(src), X)
    np.testing.assert_array_equal(X, want)


def test_variable_first_assigned_in_a_branch_has_no_value_after_it() -> None:
    src = """
kernel k(X: gl<f32>[M, 64]) grid(M / 16) {
    reg t: rt<f32, 16, 64>
    if block.x == 0 {
        t = X[block.x, 0]
    }
    X[block.x, 0] = t
}
"""
    with pytest.raises(CompileError, match="'t' is used before it is initialized"):
        _compile(src)


def test_shared_store_in_branch_and_shared_decl_refused() -> None:
    ok = """
kernel k(X: gl<bf16>[M, 64], Y: gl<bf16>[M, 64]) grid(M / 64) {
    shared s: st<bf16, 64, 64>
    s = X[block.x, 0]
    if block.x > 0 {
        reg r: rt<bf16, 64, 64> = s
        s = r
    }
    Y[block.x, 0] = s
}
"""
    assert "tk.store %s, %r" in print_module(_compile(ok))
    bad = ok.replace("reg r: rt<bf16, 64, 64> = s", "shared u: st<bf16, 64, 64>")
    with pytest.raises(CompileError, match="declared inside a run-time 'if'"):
        _compile(bad)


def test_compile_time_if_still_folds() -> None:
    src = """
kernel k<F=1>(X: gl<f32>[M, 64]) grid(M / 16) {
    reg x: rt<f32, 16, 64> = X[block.x, 0]
    if F == 1 { x = x + 1.0 } else { x = x + 2.0 }
    X[block.x, 0] = x
}
"""
    text = print_module(_compile(src))
    assert "scf.if" not in text and "arith.cmp" not in text


def test_runtime_condition_must_compare_scalars() -> None:
    src = """
kernel k(X: gl<f32>[M, 64]) grid(M / 16) {
    reg x: rt<f32, 16, 64> = X[block.x, 0]
    if x < 1.0 { x = x + 1.0 }
    X[block.x, 0] = x
}
"""
    with pytest.raises(CompileError, match=r"'<' compares scalars, not rt<f32, 16, 64>"):
        _compile(src)


# --- the scf.if checker ------------------------------------------------------------------------

IF_IR = """tk.kernel @k {grid = ["1"]} {
  ^(%X: gl<f32>[16, 16])
  %c0 = arith.const {value = 0} : i32
  %a = tk.fill {value = 1.0} : rt<f32, 16, 16>
  %b = tk.fill {value = 2.0} : rt<f32, 16, 16>
  %p = arith.cmp %c0, %c0 {pred = $PRED} : i1
  %r = scf.if %p : rt<f32, 16, 16> {
    scf.yield %a
  } $ELSE
  tk.store %X, %r, %c0, %c0
}
"""


@pytest.mark.parametrize("pred, want", [("eq", 1.0), ("ne", 2.0)])
def test_scf_if_ir_interpreted(pred: str, want: float) -> None:
    m = parse_module(IF_IR.replace("$PRED", pred).replace("$ELSE", "{\n    scf.yield %b\n  }"))
    verify(m)
    X = np.zeros((16, 16), np.float32)
    interpret(m, X)
    assert (X == want).all()


@pytest.mark.parametrize("else_region, msg", [
    ("", "'scf.if' with results needs an else region"),
    ("{\n    scf.yield\n  }", "'scf.if' regions must yield rt<f32, 16, 16>, got nothing"),
    ("{\n    %z = tk.fill {value = 0.0} : rt<f32, 16, 16>\n  }", "got no scf.yield"),
])
def test_scf_if_checker_rejects(else_region: str, msg: str) -> None:
    m = parse_module(IF_IR.replace("$PRED", "eq").replace("$ELSE", else_region))
    with pytest.raises(VerifyError, match=msg):
        verify(m)


# --- loop steps --------------------------------------------------------------------------------

STEP = """
kernel k<S=2>(X: gl<f32>[M, 64], Y: gl<f32>[M, 64], n: i32) grid(M / 16) {
    reg acc: rt<f32, 16, 64> = 0
    for i in block.x .. M / 16 step S {
        reg x: rt<f32, 16, 64> = X[i, 0]
        acc += x
    }
    for j in 0 .. 4 step n {
        acc += 1.0
    }
    Y[block.x, 0] = acc
}
"""


def test_loop_step_ir_and_interpreter() -> None:
    text = print_module(_compile(STEP))
    assert "%acc.1 = scf.for %bx, %0, %S, %acc : rt<f32, 16, 64> {" in text
    assert "= scf.for %c0, %c4, %n, %acc.1 : rt<f32, 16, 64> {" in text
    _round_trip(text)
    X = np.random.default_rng(2).standard_normal((16 * 7, 64), np.float32)
    Y = np.zeros_like(X)
    interpret(_compile(STEP), X, Y, scalars={"n": 3})  # j = 0, 3: two iterations
    for b in range(7):
        want = sum(X[16 * i:16 * i + 16] for i in range(b, 7, 2)) + 2.0
        np.testing.assert_allclose(Y[16 * b:16 * b + 16], want, rtol=1e-6)


@pytest.mark.parametrize("step", ["0", "-1", "S - 2"])
def test_nonpositive_compile_time_step_is_located(step: str) -> None:
    src = STEP.replace("step S", f"step {step}")
    with pytest.raises(CompileError, match="a loop step must be a positive integer") as e:
        _compile(src)
    assert e.value.loc.line == 4


# --- a stepped loop through pipeline and persistent ----------------------------------------------

GEMM_STEP = """
kernel gemm<BM=64, BN=64, BK=64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N])
    grid(cdiv(M, BM), cdiv(N, BN))
{
    shared a: st<bf16, BM, BK>
    shared b: st<bf16, BK, BN>
    reg acc: rt<f32, BM, BN> = 0
    @stages(2)
    for k in 1 .. cdiv(K, BK) step 2 {
        a = A[block.x, k]
        b = B[k, block.y]
        acc += a @ b
    }
    C[block.x, block.y] = acc
}
"""


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_stepped_gemm_pipelined_and_persistent_interpreted(tmp_path, target: str) -> None:
    import ml_dtypes

    import tkir
    from tkir.interp import interpret as run

    f = tmp_path / "g.tk"
    f.write_text(GEMM_STEP)
    k = tkir.compile(str(f), target=target)
    if target == "sm_90a":
        assert "%k_iter = arith.div %k_off, %c2 : i32" in k.ir_after("pipeline")
    m, kk, n = 128, 64 * 5, 128
    rng = np.random.default_rng(3)
    A = rng.standard_normal((m, kk), np.float32).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((kk, n), np.float32).astype(ml_dtypes.bfloat16)
    C = np.full((m, n), np.nan, np.float32)
    run(k.module, A, B, C, num_sms=1)  # one block walks all four tiles: iteration counts carry over
    odd = np.concatenate([np.arange(64 * t, 64 * t + 64) for t in (1, 3)])
    want = A.astype(np.float64)[:, odd] @ B.astype(np.float64)[odd]
    np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-4)


# --- ring buffers: uses outside the loop, uses in nested loops ----------------------------------

NESTED = GEMM_STEP.replace("1 .. cdiv(K, BK) step 2", "0 .. cdiv(K, BK)").replace(
    "acc += a @ b", "for r in 0 .. 2 {\n            acc += a @ b\n        }")


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_tile_loaded_in_outer_loop_used_in_inner_loop(tmp_path, target: str) -> None:
    """Used to fail with `max() arg is an empty sequence` in pipeline."""
    import ml_dtypes

    import tkir
    from tkir.interp import interpret as run

    f = tmp_path / "n.tk"
    f.write_text(NESTED)
    k = tkir.compile(str(f), target=target)
    m, kk, n = 128, 64 * 3, 128
    rng = np.random.default_rng(4)
    A = rng.standard_normal((m, kk), np.float32).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((kk, n), np.float32).astype(ml_dtypes.bfloat16)
    C = np.full((m, n), np.nan, np.float32)
    run(k.module, A, B, C, num_sms=1)
    np.testing.assert_allclose(C, 2 * A.astype(np.float64) @ B.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_ring_buffered_tile_used_after_the_loop_is_refused_at_the_use(tmp_path) -> None:
    import tkir

    src = GEMM_STEP.replace("    C[block.x", "    acc += a @ b\n    C[block.x")
    f = tmp_path / "a.tk"
    f.write_text(src)
    with pytest.raises(CompileError, match=r"shared tile 'a' is loaded in the pipelined loop at line 9 "
                                           r"\(2 stages\) and also used outside it") as e:
        tkir.compile(str(f))
    assert (e.value.loc.line, e.value.loc.col) == (14, 14)


def test_verifier_rejects_direct_use_of_a_ring_buffer() -> None:
    text = """tk.kernel @k {grid = ["1"]} {
  ^(%A: gl<bf16>[64, 64])
  %a = tk.alloc : st<bf16, 64, 64, stages=2>
  %x = tk.load %a : rt<bf16, 64, 64>
}
"""
    with pytest.raises(VerifyError, match=r"'tk.load' uses ring buffer %a \(st<bf16, 64, 64, stages=2>\) directly"):
        verify(parse_module(text))
    verify(parse_module(text.replace("stages=2", "stages=1")))


# --- transposed reads ---------------------------------------------------------------------------

TRANS = """
kernel k(X: gl<f32>[M, 32], Y: gl<f32>[32, N], Z: gl<f32>[32, N]) grid(M / 64) {
    shared a: st<f32, 64, 32>
    a = X[block.x, 0]
    reg x: rt<f32, 32, 64> = a.T
    Y[0, block.x] = x
    reg r: rt<f32, 64, 32> = X[block.x, 0]
    Z[0, block.x] = r.T
}
"""


def test_transposed_shared_and_register_reads() -> None:
    text = print_module(_compile(TRANS))
    assert "%x = tk.load %a {trans = true} : rt<f32, 32, 64>" in text
    assert "%0 = tk.transpose %r : rt<f32, 32, 64>" in text
    _round_trip(text)
    X = np.random.default_rng(5).standard_normal((128, 32), np.float32)
    Y, Z = np.full((32, 128), np.nan, np.float32), np.full((32, 128), np.nan, np.float32)
    interpret(_compile(TRANS), X, Y, Z)
    np.testing.assert_array_equal(Y, X.T)
    np.testing.assert_array_equal(Z, X.T)


def test_transposed_load_checker() -> None:
    text = """tk.kernel @k {grid = ["1"]} {
  ^()
  %a = tk.alloc : st<f32, 64, 32>
  %x = tk.load %a {trans = true} : rt<f32, $SHAPE>
}
"""
    verify(parse_module(text.replace("$SHAPE", "32, 64")))
    with pytest.raises(VerifyError, match="yields the transposed shape, not rt<f32, 64, 32>"):
        verify(parse_module(text.replace("$SHAPE", "64, 32")))


def test_bank_conflicts_models_the_transposed_read() -> None:
    from tkir.layout import SharedLayout, conflict_degree, make_layout
    from tkir.passes.analysis import transposed_load_access

    row = make_layout("row", warps=4, vec=4)
    acc = transposed_load_access(row, "f32", (64, 32))
    # lane 0 holds x[0, 0..3] = a[0..3, 0]: the first instruction's lane 0 reads a[0, 0], slot 1 a[1, 0]
    assert (acc.rows[0, 0], acc.bytecols[0, 0], acc.rows[1, 0], acc.bytecols[1, 0]) == (0, 0, 1, 0)
    # the lanes of one instruction walk x's row, i.e. a's column: 128-byte rows put them in one bank
    assert conflict_degree(acc, SharedLayout("f32", 64, 32)) == 16
    assert transposed_load_access(make_layout("mma_a", warps=4), "bf16", (64, 32)).op == "ldmatrix.x4.trans"


# --- legalize-mma: register operands through the whole pipeline, interpreted ----------------------

MMA_REG = """
kernel k(A: gl<bf16>[M, 64], B: gl<bf16>[64, 64], C: gl<f32>[M, 64]) grid(M / 64) {
    shared b: st<bf16, 64, 64>
    b = B[0, 0]
    reg p: rt<bf16, 64, 64> = A[block.x, 0]
    reg q: rt<bf16, 64, 64> = B[0, 0]
    reg acc: rt<f32, 64, 64> = 0
    acc += p.T @ b
    acc += p @ q.T
    C[block.x, 0] = acc
}
"""


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_register_mma_operands_legalized_and_interpreted(tmp_path, target: str) -> None:
    import ml_dtypes

    import tkir

    f = tmp_path / "m.tk"
    f.write_text(MMA_REG)
    k = tkir.compile(str(f), target=target)
    legal = k.ir_after("legalize-mma")
    assert "tk.transpose %p" in legal and ("%mma_b = tk.alloc" in legal) == (target == "sm_90a")
    rng = np.random.default_rng(6)
    A = rng.standard_normal((64, 64), np.float32).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((64, 64), np.float32).astype(ml_dtypes.bfloat16)
    C = np.full((64, 64), np.nan, np.float32)
    interpret(k.module, A, B, C)
    a, b = A.astype(np.float64), B.astype(np.float64)
    np.testing.assert_allclose(C, a.T @ b + a @ b.T, rtol=1e-4, atol=1e-3)


# --- run-time ifs nested, on an mma accumulator (docs/language.md's `if ... else if` example) ------------

IF_CHAINS = {
    # the docs' example, in a K loop: its inner `if` is the outer one's else region
    "else_if": "if k * BK < N {\n            acc = acc * 2.0\n        } else if block.x == 0 {\n"
               "            acc = acc + 1.0\n        }",
    # an `if` in a then region
    "nested": "if k * BK < N {\n            if block.y == 1 {\n                acc = acc * 2.0\n            }\n"
              "        } else {\n            acc = acc + 1.0\n        }",
    # the accumulator only read in a branch (the backend waited for its wgmma there and the loop's back
    # edge then used registers defined in the branch: invalid LLVM IR on sm_90a)
    "row_max": "if k * BK < N {\n            if block.y == 0 {\n                m = max(m, row_max(acc))\n"
               "            }\n        }",
}
IF_GEMM = """
kernel gemm<BM=64, BN=64, BK=64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N], V: gl<f32>[M])
    grid(cdiv(M, BM), cdiv(N, BN))
{
    shared a: st<bf16, BM, BK>
    shared b: st<bf16, BK, BN>
    reg acc: rt<f32, BM, BN> = 0
    reg m: rv<f32, BM> = 0
    for k in 0 .. cdiv(K, BK) {
        a = A[block.x, k]
        b = B[k, block.y]
        acc += a @ b
        $IF
    }
    C[block.x, block.y] = acc
    if block.y == 0 {
        V[block.x] = m
    }
}
"""


def if_gemm_reference(chain: str, a: np.ndarray, b: np.ndarray, bm: int = 64, bn: int = 64,
                      bk: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """IF_GEMM[chain]'s C and V in float64, block by block."""
    m, kk = a.shape
    n = b.shape[1]
    c, v = np.zeros((m, n)), np.zeros(m)
    for bx in range(m // bm):
        for by in range(n // bn):
            acc, mx = np.zeros((bm, bn)), np.zeros(bm)
            for k in range(kk // bk):
                acc += a[bx * bm:(bx + 1) * bm, k * bk:(k + 1) * bk] @ b[k * bk:(k + 1) * bk, by * bn:(by + 1) * bn]
                if chain == "row_max":
                    if k * bk < n and by == 0:
                        mx = np.maximum(mx, acc.max(axis=1))
                elif k * bk < n:
                    if chain == "else_if" or by == 1:
                        acc = acc * 2.0
                elif chain == "nested" or bx == 0:
                    acc = acc + 1.0
            c[bx * bm:(bx + 1) * bm, by * bn:(by + 1) * bn] = acc
            if by == 0:
                v[bx * bm:(bx + 1) * bm] = mx
    return c, v


def if_gemm_inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    import ml_dtypes

    a = rng.standard_normal((128, 256), np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 128), np.float32).astype(ml_dtypes.bfloat16)
    return a, b


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("chain", list(IF_CHAINS))
def test_nested_runtime_ifs_on_an_accumulator_compile_and_compute(tmp_path, chain: str, target: str) -> None:
    """Two nested run-time ifs on an mma accumulator failed in every target's pipeline ("after pass
    'infer-layouts': 'scf.if' regions must yield rt<..., layout=wgmma_acc>, got ... row"): the inner if's
    result was a layout class of its own; one that only reads the accumulator was invalid LLVM IR on
    sm_90a. They compile to PTX that ptxas assembles, and the interpreter running the compiled IR gives
    numpy's numbers (k * 64 < N holds for k = 0, 1 of 4)."""
    import tkir

    f = tmp_path / "g.tk"
    f.write_text(IF_GEMM.replace("$IF", IF_CHAINS[chain]))
    k = tkir.compile(str(f), target=target)
    assert ".entry gemm" in k.asm["ptx"] and k.asm["cubin"]  # ptxas assembles it
    a, b = if_gemm_inputs(np.random.default_rng(5))
    c, v = np.full((128, 128), np.nan, np.float32), np.full(128, np.nan, np.float32)
    tkir.interpret(k, a, b, c, v)
    want_c, want_v = if_gemm_reference(chain, a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(c, want_c, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(v, want_v, rtol=1e-4, atol=1e-3)
