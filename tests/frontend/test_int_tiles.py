"""Integer tiles and vectors (i32, u32), row_argmax / row_argmin and gathers `A[idx, c]`.

Each construct is compiled through the whole default pipeline on both targets, assembled by ptxas, and run in
the reference interpreter on the compiled IR against numpy; bad uses are located errors. The semantics checked
here are docs/language.md's "Integer tiles": 32-bit wrapping + - *, `/` and `%` truncating toward zero (u32
unsigned), float -> int toward zero and saturating with NaN -> 0 (PTX cvt.rzi, as torch's .to(torch.int32) on
the GPU), argmax's first-occurrence and NaN rules (torch.argmax's), and gathers' out-of-range rows (an error in
the interpreter).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.diagnostics import CompileError
from tkir.frontend import compile_source
from tkir.interp import InterpError
from tkir.interp.ops import IntegerDivisionWarning, IntegerOverflowWarning

BF16 = ml_dtypes.bfloat16
TARGETS = ("sm_90a", "sm_80")
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def build(tmp_path, source: str, target: str, **consts: int) -> tkir.CompiledKernel:
    """The kernel compiled through the default pipeline, its PTX assembled by ptxas without spills."""
    path = tmp_path / "k.tk"
    path.write_text(source)
    k = tkir.compile(str(path), target=target, **consts)
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    return k


# ---------------------------------------------------------------------------------------------
# Declarations, loads and stores, arithmetic

ARITH = """
kernel k<ROWS=4, D=64>(X: gl<i32>[N, D], Y: gl<i32>[N, D], U: gl<u32>[N, D], V: gl<u32>[N, D],
                       C: gl<i32>[D], S: gl<i32>[N, D])
    grid(cdiv(N, ROWS))
{
    reg x: rt<i32, ROWS, D> = X[block.x, 0]
    reg y: rt<i32, ROWS, D> = Y[block.x, 0]
    reg c: rv<i32, D> = C[0]
    reg acc: rt<i32, ROWS, D> = 7
    acc += x * y - col(c)
    acc = acc + x / y + x % y + min(x, y) * 2 - max(x, 3)
    S[block.x, 0] = where(x < y, acc, -acc)
    reg u: rt<u32, ROWS, D> = U[block.x, 0]
    V[block.x, 0] = where(u > u32(x), u / 3 + u % 10, max(u, u32(y)))
}
"""


def _wrap(a: np.ndarray, dtype: type) -> np.ndarray:
    return (np.asarray(a, np.int64) % 2**32).astype(np.uint32).astype(dtype)


def _trunc_div(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q = np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)
    return q, a - b * q


@pytest.mark.parametrize("target", TARGETS)
def test_integer_tile_arithmetic_matches_32_bit_numpy(tmp_path, target: str) -> None:
    k = build(tmp_path, ARITH, target)
    rng = np.random.default_rng(0)
    n, d = 12, 64
    x = rng.integers(-1000, 1000, (n, d)).astype(np.int32)
    y = rng.integers(-50, 50, (n, d)).astype(np.int32)
    y[y == 0] = 3
    x[0, :4] = [I32_MAX, I32_MIN, -7, 7]
    y[0, :4] = [2, -1, 2, -2]
    u = rng.integers(0, 2**32, (n, d), dtype=np.uint64).astype(np.uint32)
    c = rng.integers(-5, 5, d).astype(np.int32)
    s = np.full((n, d), -99, np.int32)
    v = np.zeros((n, d), np.uint32)
    with pytest.warns(IntegerOverflowWarning):  # I32_MAX * 2 wraps, as on the GPU
        tkir.interpret(k, x, y, u, v, c, s)
    x64, y64, u64 = (a.astype(np.int64) for a in (x, y, u))
    acc = _wrap(7 + x64 * y64 - c, np.int64)
    q, r = _trunc_div(x64, y64)
    acc = _wrap(acc + q + r + np.minimum(x64, y64) * 2 - np.maximum(x64, 3), np.int64)
    np.testing.assert_array_equal(s, _wrap(np.where(x64 < y64, acc, -acc), np.int32))
    xu, yu = x64 % 2**32, y64 % 2**32  # u32(x): the same bits read unsigned
    np.testing.assert_array_equal(v, np.where(u64 > xu, u64 // 3 + u64 % 10, np.maximum(u64, yu)).astype(np.uint32))


def test_division_by_zero_warns_and_gives_zero(tmp_path) -> None:
    """Undefined on the GPU; 0 in the interpreter with a located warning (rows past the edge load as zeros, so
    a ragged tile divides by zero where nothing is stored: not an error)."""
    k = build(tmp_path, ARITH, "sm_90a")
    x = np.full((4, 64), 9, np.int32)
    y = np.ones((4, 64), np.int32)
    y[2, 5] = 0
    s = np.zeros((4, 64), np.int32)
    with pytest.warns(IntegerDivisionWarning, match=r"k.tk:11:19: 'tk.div' divides by zero"):
        tkir.interpret(k, x, y, np.zeros((4, 64), np.uint32), np.zeros((4, 64), np.uint32), np.zeros(64, np.int32), s)
    assert s[2, 5] == -(7 + 9 * 0 + 0 + 0 + 0 - 9)  # x / 0 and x % 0 are 0; then where(x < y, acc, -acc)


# ---------------------------------------------------------------------------------------------
# Casts

CASTS = """
kernel k<ROWS=2, D=64>(X: gl<f32>[N, D], I: gl<i32>[N, D], U: gl<u32>[N, D], B: gl<bf16>[N, D],
                       F: gl<f32>[N, D], H: gl<bf16>[N, D])
    grid(cdiv(N, ROWS))
{
    reg x: rt<f32, ROWS, D> = X[block.x, 0]
    let i = i32(x)
    I[block.x, 0] = i
    reg u: rt<u32, ROWS, D> = u32(x)
    U[block.x, 0] = u
    B[block.x, 0] = bf16(i)
    F[block.x, 0] = f32(u) + f32(i32(bf16(x)))
    H[block.x, 0] = bf16(u)
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_casts_truncate_saturate_and_send_nan_to_zero(tmp_path, target: str) -> None:
    k = build(tmp_path, CASTS, target)
    special = [np.nan, np.inf, -np.inf, 3e9, -3e9, 5e9, 2.5, -2.5, -0.7, 0.7, 2**31, -(2**31) - 512.0,
               16777217.0, 123456789.0, -1.0, 4294967040.0]
    x = (np.random.default_rng(1).standard_normal((3, 64)) * 1e4).astype(np.float32)
    x.flat[: len(special)] = special
    outs = [np.zeros((3, 64), t) for t in (np.int32, np.uint32)] + [np.zeros((3, 64), BF16), np.zeros((3, 64), np.float32),
                                                                    np.zeros((3, 64), BF16)]
    tkir.interpret(k, x, *outs)
    i, u, b, f, h = outs
    f64 = x.astype(np.float64)

    def cvt(a: np.ndarray, lo: int, hi: int) -> np.ndarray:  # PTX cvt.rzi: toward zero, saturating, NaN -> 0
        return np.where(np.isnan(a), 0, np.trunc(np.clip(np.nan_to_num(a), lo, hi))).astype(np.int64)

    want_i, want_u = cvt(f64, I32_MIN, I32_MAX), cvt(f64, 0, 2**32 - 1)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(u, want_u)
    # int -> bf16 rounds through f32 (each step to nearest even)
    np.testing.assert_array_equal(b.astype(np.float32), want_i.astype(np.float32).astype(BF16).astype(np.float32))
    again = cvt(x.astype(BF16).astype(np.float64), I32_MIN, I32_MAX)
    np.testing.assert_array_equal(f, (want_u.astype(np.float32) + again.astype(np.float32)))
    np.testing.assert_array_equal(h.astype(np.float32), want_u.astype(np.float32).astype(BF16).astype(np.float32))


# ---------------------------------------------------------------------------------------------
# Shared tiles and vectors of integers

SHARED = """
kernel k<BR=64, BC=64>(X: gl<i32>[M, K], C: gl<i32>[K], Y: gl<u32>[M, K])
    grid(cdiv(M, BR), cdiv(K, BC))
{
    shared s: st<i32, BR, BC>
    shared v: sv<i32, BC>
    s = X[block.x, block.y]
    v = C[block.y]
    reg x: rt<i32, BR, BC> = s
    reg c: rv<i32, BC> = v
    s = x * 2                       // registers -> shared and back
    reg y: rt<i32, BR, BC> = s
    Y[block.x, block.y] = u32(y + col(c))
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_shared_integer_tiles_and_vectors(tmp_path, target: str) -> None:
    k = build(tmp_path, SHARED, target)
    rng = np.random.default_rng(2)
    m, n = 100, 96  # ragged in both dims: TMA (sm_90a) and cp.async (sm_80) fill zeros past the edge
    x = rng.integers(-1000, 1000, (m, n)).astype(np.int32)
    c = rng.integers(-1000, 1000, n).astype(np.int32)
    y = np.zeros((m, n), np.uint32)
    tkir.interpret(k, x, c, y)
    np.testing.assert_array_equal(y, ((x.astype(np.int64) * 2 + c) % 2**32).astype(np.uint32))


# ---------------------------------------------------------------------------------------------
# row_argmax / row_argmin

ARGMAX = """
@warpgroups(consumers=WG)
kernel k<ROWS=4, D=256, WG=1>(X: gl<bf16>[N, D], A: gl<i32>[N], B: gl<i32>[N])
    grid(cdiv(N, ROWS))
{
    reg x: rt<bf16, ROWS, D> = X[block.x, 0]
    A[block.x] = row_argmax(x)
    B[block.x] = row_argmin(f32(x))
}
"""


def _argmax_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.integers(-8, 8, (n, d)).astype(np.float32)  # few levels: ties in every row
    x[0, [5, 200]] = np.nan                              # the first NaN wins, for argmax and argmin
    x[1, :] = -np.inf                                    # all equal: index 0
    x[2, [3, 250]] = [np.inf, np.inf]                    # a tie of infinities
    x[3, [0, 7]] = [-0.0, 0.0]
    x[3, 1:] = np.minimum(x[3, 1:], -1)
    return x.astype(BF16)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("consts", [dict(ROWS=4, WG=1), dict(ROWS=1, WG=2), dict(ROWS=16, WG=1)],
                         ids=["rows4", "split-row", "rows16"])
def test_row_argmax_and_argmin_follow_torch(tmp_path, target: str, consts: dict) -> None:
    k = build(tmp_path, ARGMAX, target, **consts)
    n = 19
    x = _argmax_rows(np.random.default_rng(3), n, 256)
    a, b = np.full(n, -1, np.int32), np.full(n, -1, np.int32)
    tkir.interpret(k, x, a, b)
    xf = x.astype(np.float32)
    np.testing.assert_array_equal(a, np.argmax(xf, axis=1))  # numpy's rules are torch's: first tie, first NaN
    np.testing.assert_array_equal(b, np.argmin(xf, axis=1))
    assert a[0] == 5 and b[0] == 5 and a[1] == 0 and a[2] == 3


def test_argmax_of_an_accumulator_layout(tmp_path) -> None:
    """row_argmax of a wgmma accumulator (sm_90a) / mma.sync fragment (sm_80): rows spread over quads."""
    src = """
kernel k(A: gl<bf16>[M, 64], B: gl<bf16>[64, 64], I: gl<i32>[M])
    grid(cdiv(M, 64))
{
    shared a: st<bf16, 64, 64>
    shared b: st<bf16, 64, 64>
    a = A[block.x, 0]
    b = B[0, 0]
    I[block.x] = row_argmax(a @ b)
}
"""
    rng = np.random.default_rng(4)
    a = rng.integers(-3, 3, (64, 64)).astype(BF16)
    b = rng.integers(-3, 3, (64, 64)).astype(BF16)
    want = np.argmax(a.astype(np.float32) @ b.astype(np.float32), axis=1)
    for target in TARGETS:
        out = np.full(64, -1, np.int32)
        tkir.interpret(build(tmp_path, src, target), a, b, out)
        np.testing.assert_array_equal(out, want)


# ---------------------------------------------------------------------------------------------
# Gathers

GATHER = """
kernel k<ROWS=4, D=128, DC=64>(T: gl<bf16>[V, D], Ids: gl<i32>[N], P: gl<f32>[B, V, D], Y: gl<bf16>[N, D],
                               Z: gl<f32>[N, D])
    grid(cdiv(N, ROWS), D / DC)
{
    reg ids: rv<i32, ROWS> = Ids[block.x]
    reg e: rt<bf16, ROWS, DC> = T[ids, block.y]
    Y[block.x, block.y] = e
    reg p: rt<f32, ROWS, DC> = P[1, ids, block.y]     // a leading coordinate, then the rows
    Z[block.x, block.y] = p + f32(e)
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_gather_picks_rows_by_index(tmp_path, target: str) -> None:
    k = build(tmp_path, GATHER, target)
    rng = np.random.default_rng(5)
    v, n = 9, 11
    t = rng.standard_normal((v, 128)).astype(BF16)
    p = rng.standard_normal((2, v, 128)).astype(np.float32)
    ids = rng.integers(0, v, n).astype(np.int32)
    ids[:3] = [v - 1, 0, v - 1]
    y, z = np.full((n, 128), np.nan, BF16), np.full((n, 128), np.nan, np.float32)
    tkir.interpret(k, t, ids, p, y, z)
    np.testing.assert_array_equal(y.astype(np.float32), t[ids].astype(np.float32))
    np.testing.assert_array_equal(z, p[1][ids] + t[ids].astype(np.float32))
    launch = k.launch.to_json()
    assert "T" in launch["readonly"] and "P" in launch["readonly"]  # ld.global.nc for the tables


@pytest.mark.parametrize("bad", [-1, 9, 2**31 - 1])
def test_gather_out_of_range_index_is_an_interpreter_error(tmp_path, bad: int) -> None:
    k = build(tmp_path, GATHER, "sm_90a")
    ids = np.zeros(6, np.int32)
    ids[4] = bad
    args = [np.zeros((9, 128), BF16), ids, np.zeros((2, 9, 128), np.float32), np.zeros((6, 128), BF16),
            np.zeros((6, 128), np.float32)]
    with pytest.raises(InterpError, match=f"row index {bad} .*element 0 of %ids.*outside the 9 rows of %T"):
        tkir.interpret(k, *args)


# ---------------------------------------------------------------------------------------------
# Located errors

HEAD = ("kernel k<R=16>(A: gl<bf16>[V, 64], Ids: gl<i32>[N], F: gl<f32>[N], O: gl<bf16>[N, 64], I: gl<i32>[N, 64]) "
        "grid(cdiv(N, R)) {{\n    reg ids: rv<i32, R> = Ids[block.x]\n    reg f: rv<f32, R> = F[block.x]\n"
        "    reg i: rt<i32, R, 64> = I[block.x, 0]\n{}\n}}\n")


@pytest.mark.parametrize(("body", "line", "col", "words"), [
    ("    shared s: st<bf16, 16, 64>\n    s = A[ids, 0]", 6, 9, "a gather (rows of 'A' picked by a vector of indices) "
     "loads into a register tile, not the shared 's'"),
    ("    reg e: rt<bf16, 16, 64> = A[ids, 0]\n    O[ids, 0] = e", 6, 5, "a store to rows of 'O' picked by a vector "
     "of indices (a scatter) is not supported"),
    ("    reg e: rt<bf16, 16, 64> = A[0, ids]", 5, 36, "a vector of row indices (rv<i32, 16>) goes in the row "
     "coordinate of 'A' (dim 0 of gl<bf16>[V, 64]), not dim 1"),
    ("    reg e: rt<bf16, 16, 64> = A[f, 0]", 5, 33, "a coordinate is an integer scalar, or (a gather) a register "
     "vector of row indices; got rv<f32, 16>"),
    ("    reg e: rt<bf16, 32, 64> = A[ids, 0]", 5, 31, "a gather of rv<i32, 16> picks 16 rows of 'A', but 'e' "
     "(rt<bf16, 32, 64>) has 32"),
    ("    reg e: rv<bf16, 64> = A[ids, 0]", 5, 27, "a gather picks rows: 'e' must be a register tile"),
    ("    reg j: rt<i32, R, 64> = 1.5", 5, 29, "an i32 tile is filled with an integer, not 1.5"),
    ("    reg j: rt<u32, R, 64> = -1", 5, 29, "the integer -1 does not fit u32"),
    ("    let m = row_max(i)", 5, 13, "'row_max' reduces float tiles, not rt<i32, 16, 64>"),
    ("    let m = row_argmax(i)", 5, 13, "'row_argmax' reduces float tiles, not rt<i32, 16, 64>"),
    ("    let m = f32(i) % 2.0", 5, 20, "'%' on a float tile (rt<f32, 16, 64>) is not supported"),
    ("    reg j: rt<u32, R, 64> = I[block.x, 0]", 5, 29, "loading into 'j': dtype mismatch, rt<u32, 16, 64> and "
     "gl<i32>[N, 64]"),
    ("    let j = i + block.x\n    let k = u32(i) + block.x", 6, 28, "scalar type mismatch: i32 where u32 is needed"),
])
def test_located_errors(body: str, line: int, col: int, words: str) -> None:
    with pytest.raises(CompileError) as info:
        compile_source(HEAD.format(body), "t.tk")
    e = info.value
    assert words in e.message, e.format()
    assert (e.loc.line, e.loc.col) == (line, col), e.format()


def test_report_lists_the_gather(tmp_path) -> None:
    """`tkc report` lists a gather among the register copies: 16-byte accesses, rows tested by index."""
    from tkir.tools.report import build_report

    k = build(tmp_path, GATHER, "sm_90a")
    copies = {(c["op"], c["tile"]): c for c in build_report(k.module)["register_copies"]}
    e, p = copies[("gather", "e")], copies[("gather", "p")]
    assert (e["tensor"], e["access"], e["rows"]) == ("T", "16-byte vectors", "tested (indices)")
    assert p["tensor"] == "P"  # its class shares bf16 e's 8-element chunks (f32(e)): element by element
