"""The bit operators `& | ^ << >> ~` on integer tiles and vectors and on run-time i32 / u32 scalars (docs/language.md,
"Integer tiles").

Each kernel is compiled through the default pipeline on both targets, assembled by ptxas, and run in the reference
interpreter on the compiled IR against a reference written element by element in Python integers: and, or, xor on
the 32 bits; shl and shr by a count read unsigned, 0 from a count of 32 on (shr of an i32: its sign in every bit),
as PTX's shl/shr clamp it. The precedence is Python's (the reference is written with Python's operators, in the
same order as the kernel). Bad uses are located errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import tkir
from tkir.diagnostics import CompileError
from tkir.frontend import compile_source
from tkir.parser import parse_module
from tkir.verifier import verify

TARGETS = ("sm_90a", "sm_80")
WORD = 2**32

BITS = """
kernel k<ROWS=4, D=64>(X: gl<i32>[N, D], Y: gl<i32>[N, D], C: gl<i32>[D], U: gl<u32>[N, D],
                       S: gl<i32>[N, D], V: gl<u32>[N, D])
    grid(cdiv(N, ROWS))
{
    reg x: rt<i32, ROWS, D> = X[block.x, 0]
    reg y: rt<i32, ROWS, D> = Y[block.x, 0]
    reg c: rv<i32, D> = C[0]
    let m = (1 << 4) - 1
    S[block.x, 0] = (x & y | x ^ col(c)) + (x << y) - (x >> y) + (x >> 3) ^ 255 & x | m
    reg u: rt<u32, ROWS, D> = U[block.x, 0]
    V[block.x, 0] = u >> u32(y) | (u << 4) & u32(x) ^ u >> 31
}
"""


def _i32(v: int) -> int:
    v %= WORD
    return v - WORD if v >= 2**31 else v


def _shl(a: int, n: int) -> int:
    """a << n on 32 bits, the count read unsigned: 0 from 32 on (the result's bits, as an unsigned int)."""
    n %= WORD
    return 0 if n >= 32 else (a << n) % WORD


def _shr_i32(a: int, n: int) -> int:
    n %= WORD
    return a >> min(n, 31)  # arithmetic: from 31 on, the sign in every bit


def _shr_u32(a: int, n: int) -> int:
    n %= WORD
    return 0 if n >= 32 else a >> n


def _want(x: np.ndarray, y: np.ndarray, c: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.zeros(x.shape, np.int64)
    v = np.zeros(x.shape, np.int64)
    for i, j in np.ndindex(x.shape):
        a, b, cc, w = int(x[i, j]), int(y[i, j]), int(c[j]), int(u[i, j])
        m = (1 << 4) - 1
        total = _i32(_i32((a & b) | (a ^ cc)) + _i32(_shl(a, b)) - _shr_i32(a, b) + _shr_i32(a, 3))
        s[i, j] = _i32(total ^ (255 & a) | m)  # Python's precedence: `^` binds looser than `&`, tighter than `|`
        v[i, j] = _shr_u32(w, b) | (_shl(w, 4) & (a % WORD)) ^ _shr_u32(w, 31)
    return s.astype(np.int32), v.astype(np.uint32)


@pytest.mark.filterwarnings("ignore::tkir.interp.ops.IntegerOverflowWarning")  # the sums wrap, as meant
@pytest.mark.parametrize("target", TARGETS)
def test_bit_operators_match_python_integers(tmp_path, target: str) -> None:
    path = tmp_path / "k.tk"
    path.write_text(BITS)
    k = tkir.compile(str(path), target=target)
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    assert "tk.shl" in k.ir and "tk.shr" in k.ir and "tk.xor" in k.ir
    rng = np.random.default_rng(3)
    n, d = 10, 64
    x = rng.integers(-(2**31), 2**31, (n, d), dtype=np.int64).astype(np.int32)
    y = rng.integers(-3, 40, (n, d)).astype(np.int32)  # counts past 31, and negative ones (2**32 - 3 unsigned)
    y[0, :6] = [0, 31, 32, 33, -1, 1]
    x[0, :6] = [-1, -(2**31), -5, 7, 2**31 - 1, -2]
    c = rng.integers(-(2**31), 2**31, d, dtype=np.int64).astype(np.int32)
    u = rng.integers(0, 2**32, (n, d), dtype=np.uint64).astype(np.uint32)
    s = np.zeros((n, d), np.int32)
    v = np.zeros((n, d), np.uint32)
    tkir.interpret(k, x, y, c, u, s, v)
    want_s, want_v = _want(x, y, c, u)
    np.testing.assert_array_equal(s, want_s)
    np.testing.assert_array_equal(v, want_v)


def test_shifts_clamp_in_the_llvm_ir(tmp_path) -> None:
    """LLVM's shl/lshr/ashr are poison from a count of 32 on: the backend clamps the count first (umin 31), and
    shl and a u32's shr select 0 past it."""
    path = tmp_path / "k.tk"
    path.write_text(BITS)
    llvm = tkir.compile(str(path)).asm["llvm"]
    assert "call i32 @llvm.umin.i32" in llvm
    assert " ashr i32 " in llvm and " lshr i32 " in llvm and " shl i32 " in llvm
    assert "icmp ugt i32" in llvm


ERRORS = [  # (body, its line in the kernel, the message)
    ("reg f: rt<f32, ROWS, D> = F[block.x, 0]\n    F[block.x, 0] = f & f", 5, "'&' on a f32 tile"),
    ("let f = f32(block.x)\n    let b = f & 1", 5, "'&' on a f32 scalar"),
    ("let b = 2.5 << 1", 4, "'<<' takes integers, got 2.5"),
    ("let b = 1 << 100", 4, "shift count 100 out of range"),
    ("let b = 1 >> -1", 4, "shift count -1 out of range"),
    ("reg f: rt<f32, ROWS, D> = F[block.x, 0]\n    F[block.x, 0] = ~f", 5, "'~' on a f32 tile"),
    ("let f = f32(block.x)\n    let b = ~f", 5, "'~' on a f32 scalar"),
    ("let b = u32(block.x) >> block.x", 4, "scalar type mismatch: u32 and i32"),
    ("let b = ~2.5", 4, "'~' takes integers, got 2.5"),
]


@pytest.mark.parametrize("body, line, message", ERRORS, ids=[m for _, _, m in ERRORS])
def test_bad_bit_operations_are_located_errors(body: str, line: int, message: str) -> None:
    src = "kernel k<ROWS=4, D=64>(F: gl<f32>[N, D])\n    grid(cdiv(N, ROWS))\n{\n    " + body + "\n}\n"
    with pytest.raises(CompileError) as e:
        compile_source(src, "bad.tk")
    text = e.value.format()
    assert text.startswith(f"bad.tk:{line}:") and message in text, text


def test_a_size_expression_refuses_a_bit_operator() -> None:
    src = "kernel k(X: gl<i32>[N, 64])\n    grid(N >> 6)\n{\n    reg x: rt<i32, 4, 64> = X[block.x, 0]\n}\n"
    with pytest.raises(CompileError) as e:
        compile_source(src, "grid.tk")
    assert e.value.format().startswith("grid.tk:2:") and "unsupported grid expression" in e.value.format()


NOT = """
kernel k<ROWS=4, D=64>(X: gl<i32>[N, D], U: gl<u32>[N, D], R: gl<i32>[D], S: gl<i32>[N, D], V: gl<u32>[N, D])
    grid(cdiv(N, ROWS))
{
    reg x: rt<i32, ROWS, D> = X[block.x, 0]
    reg r: rv<i32, D> = R[0]
    let m = ~5 * 2
    S[block.x, 0] = where(x & 255 == 0, ~x, x >> col(r)) + m
    reg u: rt<u32, ROWS, D> = U[block.x, 0]
    V[block.x, 0] = ~u >> 3 | u ^ 4294967295 & 7
}
"""


@pytest.mark.filterwarnings("ignore::tkir.interp.ops.IntegerOverflowWarning")  # the - 12 may wrap, as meant
@pytest.mark.parametrize("target", TARGETS)
def test_not_and_a_vector_count(tmp_path, target: str) -> None:
    """`~x`: x ^ all ones, on an i32 tile (^ -1), a u32 tile (^ 4294967295) and a compile-time integer (Python's
    ~, binding as unary minus: `~5 * 2` is -12); `&` under a comparison (`x & 255 == 0` compares `x & 255`); a
    shift count from a vector broadcast over the columns."""
    path = tmp_path / "k.tk"
    path.write_text(NOT)
    k = tkir.compile(str(path), target=target)
    assert "{value = -12} : i32" in k.ir and "{value = 4294967295} : u32" in k.ir
    res = k.asm["ptxas"]  # assembled
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    rng = np.random.default_rng(5)
    n, d = 8, 64
    x = rng.integers(-(2**31), 2**31, (n, d), dtype=np.int64).astype(np.int32)
    x[:, ::3] &= ~np.int32(255)  # some with a zero low byte
    r = rng.integers(0, 40, d).astype(np.int32)
    u = rng.integers(0, 2**32, (n, d), dtype=np.uint64).astype(np.uint32)
    s = np.zeros((n, d), np.int32)
    v = np.zeros((n, d), np.uint32)
    tkir.interpret(k, x, u, r, s, v)
    want = np.array([[_i32((~int(x[i, j]) if int(x[i, j]) & 255 == 0 else _shr_i32(int(x[i, j]), int(r[j]))) - 12)
                      for j in range(d)] for i in range(n)], np.int64).astype(np.int32)
    np.testing.assert_array_equal(s, want)
    np.testing.assert_array_equal(v, (~u >> np.uint32(3)) | (u ^ (np.uint32(4294967295) & np.uint32(7))))


SCALARS = """
kernel k<ROWS=4, D=64>(X: gl<i32>[N, D], S: gl<i32>[N, D], U: gl<u32>[N, D], V: gl<u32>[N, D])
    grid(cdiv(N, ROWS))
{
    reg x: rt<i32, ROWS, D> = X[block.x, 0]
    let b = block.x
    let c = b % 40 - 3
    let s = (b & 5 | b << 3) ^ ~b >> 1 + (N >> 2) + (b << c) - (-b >> c)
    S[block.x, 0] = x + s
    reg u: rt<u32, ROWS, D> = U[block.x, 0]
    let w = ~u32(b * 65599)
    V[block.x, 0] = u + (w >> u32(c) | w << 3 ^ w & 4042322160)
}
"""


def _scalar_want(b: int, n: int) -> tuple[int, int]:
    """The kernel's s and w-term for block b, in Python integers on 32 bits (Python's precedence, as the kernel)."""
    c = b % 40 - 3  # -3 .. 36: negative counts (read unsigned: past 31) and counts of 32 on
    p = _i32((b & 5) | _i32(_shl(b, 3)))
    q = _i32(_i32(_i32(1 + _shr_i32(n, 2)) + _i32(_shl(b, c))) - _shr_i32(-b, c))
    s = _i32(p ^ _shr_i32(~b, q))
    w = ~(b * 65599) % WORD
    return s, _shr_u32(w, c) | (_shl(w, 3) ^ (w & 4042322160))


@pytest.mark.filterwarnings("ignore::tkir.interp.ops.IntegerOverflowWarning")  # x + s wraps, as meant
@pytest.mark.parametrize("target", TARGETS)
def test_bit_operators_on_run_time_scalars(tmp_path, target: str) -> None:
    """arith.and/or/xor/shl/shr on i32 and u32 scalars from the block index and a size: the counts read unsigned,
    0 from 32 on (an i32's shr: its sign in every bit; a u32's: logical), through each target's pipeline, ptxas and
    the interpreter, against Python integers; N ragged."""
    path = tmp_path / "k.tk"
    path.write_text(SCALARS)
    k = tkir.compile(str(path), target=target)
    for name in ("and", "or", "xor", "shl", "shr"):
        assert f"arith.{name} " in k.ir, name
    assert " : u32" in next(line for line in k.ir.splitlines() if "arith.shr" in line and "%w" in line)
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    n, d = 178, 64
    rng = np.random.default_rng(7)
    x = rng.integers(-(2**31), 2**31, (n, d), dtype=np.int64).astype(np.int32)
    u = rng.integers(0, 2**32, (n, d), dtype=np.uint64).astype(np.uint32)
    s = np.zeros((n, d), np.int32)
    v = np.zeros((n, d), np.uint32)
    tkir.interpret(k, x, s, u, v)
    want = [_scalar_want(r // 4, n) for r in range(n)]
    np.testing.assert_array_equal(s, (x.astype(np.int64) + np.array([[w[0]] for w in want])).astype(np.int32))
    np.testing.assert_array_equal(v, ((u.astype(np.int64) + np.array([[w[1]] for w in want])) % WORD).astype(np.uint32))


def test_scalar_shifts_clamp_in_the_llvm_ir(tmp_path) -> None:
    """A scalar shift lowers as a tile's does (backend/int_ops.py): the count clamped (umin 31), a u32's shr logical."""
    path = tmp_path / "k.tk"
    path.write_text(SCALARS)
    llvm = tkir.compile(str(path)).asm["llvm"]
    assert "call i32 @llvm.umin.i32" in llvm and " lshr i32 " in llvm and " ashr i32 " in llvm
    assert " xor i32 " in llvm and " or i32 " in llvm and " and i32 " in llvm


def test_the_verifier_refuses_a_bit_operator_on_float_scalars() -> None:
    text = "tk.kernel @k {grid = [\"1\"]} {\n  %a = arith.const {value = 1.0} : f32\n  %b = arith.and %a, %a : f32\n}\n"
    with pytest.raises(Exception, match="'arith.and' takes i32 or u32 scalars, got f32"):
        verify(parse_module(text))
    verify(parse_module(text.replace("1.0} : f32", "1} : i32").replace("%a : f32", "%a : i32")))
