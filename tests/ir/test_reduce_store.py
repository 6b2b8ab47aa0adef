"""Reducing stores, `G[i, j] += t` on an f32 global (`tk.store`/`tma.store` with `reduce = "add"`): the front end
and its errors, the verifier's rules, the interpreter's meaning (several blocks adding into one place, ragged
edges clipped), what create-tma makes of it on each target, and the printed IR's round trip."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.diagnostics import CompileError
from tkir.interp import interpret
from tkir.parser import parse_module
from tkir.printer import print_module
from tkir.verifier import VerifyError, verify

BF16 = ml_dtypes.bfloat16
SPLITK = "tests/data/splitk_add.tk"
ROWS = "tests/data/rows_add.tk"
# (target, compile options): TMA reduce-add on sm_90a, per-element red.global.add on sm_80 and without TMA
TARGETS = [("sm_90a", {}), ("sm_80", {}), ("sm_90a", {"no_tma": True})]
TARGET_IDS = ["sm_90a", "sm_80", "sm_90a-no-tma"]


def _compile(path: str, target: str, opts: dict, **consts: int) -> tkir.CompiledKernel:
    return tkir.compile(path, target=target, **opts, **consts)


def _stores(k: tkir.CompiledKernel) -> list:
    return [o for o in k.module.kernel.walk() if o.name in ("tk.store", "tma.store") and o.attrs.get("reduce")]


@pytest.mark.parametrize(("target", "opts"), TARGETS, ids=TARGET_IDS)
def test_split_k_blocks_add_their_partial_products(target: str, opts: dict) -> None:
    """Grid over K chunks: every chunk's block adds A[:, chunk] @ B[chunk, :] into the same tile of Y, onto
    what Y held. Ragged M, N and K (the last chunk is short; the edge tiles are clipped)."""
    k = _compile(SPLITK, target, opts, KC=128)
    rng = np.random.default_rng(1)
    M, K, N = 200, 328, 136
    A = rng.standard_normal((M, K)).astype(BF16)
    B = rng.standard_normal((K, N)).astype(BF16)
    Y0 = rng.standard_normal((M, N)).astype(np.float32)
    Y = Y0.copy()
    tkir.interpret(k, A, B, Y)
    ref = Y0 + A.astype(np.float32) @ B.astype(np.float32)
    np.testing.assert_allclose(Y, ref, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize(("target", "opts"), TARGETS, ids=TARGET_IDS)
def test_many_blocks_add_into_one_row_tile(target: str, opts: dict) -> None:
    k = _compile(ROWS, target, opts)
    X = np.random.default_rng(2).standard_normal((16 * 37 + 5, 200)).astype(np.float32)
    Y = np.ones((16, 200), np.float32)
    tkir.interpret(k, X, Y)
    Xp = np.concatenate([X, np.zeros((16 - X.shape[0] % 16, 200), np.float32)])  # the ragged last tile reads 0
    ref = 1 + Xp.reshape(-1, 16, 200).sum(axis=0)
    np.testing.assert_allclose(Y, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("target", "opts"), TARGETS, ids=TARGET_IDS)
def test_the_reduction_survives_the_pipeline(target: str, opts: dict) -> None:
    """sm_90a with TMA: the register tile goes through a shared staging tile into a `tma.store {reduce}` (the
    backend's cp.reduce.async.bulk.tensor); elsewhere it stays a `tk.store {reduce}` (red.global.add). No
    plain store of Y is left either way."""
    k = _compile(SPLITK, target, opts)
    red = _stores(k)
    assert len(red) == 1 and red[0].attrs["reduce"] == "add"
    want = "tma.store" if target == "sm_90a" and not opts else "tk.store"
    assert red[0].name == want
    y = k.module.kernel.body.args[2]
    plain = [o for o in k.module.kernel.walk() if o.name in ("tk.store", "tma.store", "tk.store_staged",
                                                             "tk.store_warp_staged")
             and o.operands and o.operands[0] is y and "reduce" not in o.attrs]
    assert not plain
    if want == "tma.store":
        stage = red[0].operands[1]
        assert stage.type.dtype == "f32" and stage.type.space == "st"
    else:
        assert "red.global.add" in red[0].attrs["no_tma_reason"] or target == "sm_80"


@pytest.mark.parametrize(("target", "opts"), TARGETS, ids=TARGET_IDS)
def test_printed_ir_round_trips(target: str, opts: dict) -> None:
    k = _compile(SPLITK, target, opts)
    text = k.ir
    m = parse_module(text)
    verify(m)
    assert print_module(m) == text
    assert 'reduce = "add"' in text


def _frontend_error(tmp_path, src: str) -> str:
    p = tmp_path / "k.tk"
    p.write_text(src)
    with pytest.raises(CompileError) as e:
        tkir.compile(str(p))
    return str(e.value)


KERNEL = """kernel k(X: gl<f32>[M, N], Y: gl<{dt}>[M, N]) grid(cdiv(M, 64)) {{
    reg x: rt<f32, 64, 64> = X[block.x, 0]
    {stmt}
}}
"""


@pytest.mark.parametrize(("dt", "stmt", "where", "words"), [
    ("bf16", "Y[block.x, 0] += bf16(x)", "3:19", "'+=' on a global tile of 'Y' (gl<bf16>[M, N]): adding into global memory "
                                               "takes f32 tensors"),
    ("f16", "Y[block.x, 0] += f16(x)", "3:19", "takes f32 tensors"),
    ("i32", "Y[block.x, 0] += x", "3:19", "takes f32 tensors"),
    ("f32", "Y[block.x, 0] -= x", "3:19", "'-=' on a global tile"),
    ("f32", "Y[block.x, 0] *= x", "3:19", "'*=' on a global tile"),
    ("f32", "Y[block.x, 0] += 1.0", "3:22", "cannot add"),
    ("f32", "Y[block.x, 0] += X[block.x, 0]", "3:22", "cannot add"),
])
def test_frontend_refuses_with_a_location(tmp_path, dt: str, stmt: str, where: str, words: str) -> None:
    msg = _frontend_error(tmp_path, KERNEL.format(dt=dt, stmt=stmt))
    assert f"k.tk:{where}: error:" in msg and words in msg, msg


def test_frontend_shared_tile_plus_equals_keeps_its_meaning(tmp_path) -> None:
    """`+=` on a shared tile is still refused, with the message it had."""
    src = """kernel k(X: gl<f32>[M, N]) grid(1) {
    shared s: st<f32, 64, 64>
    reg x: rt<f32, 64, 64> = X[0, 0]
    s += x
}
"""
    msg = _frontend_error(tmp_path, src)
    assert "k.tk:4:7: error: '+=' on shared tile 's'" in msg, msg


def test_frontend_register_plus_equals_is_arithmetic(tmp_path) -> None:
    p = tmp_path / "k.tk"
    p.write_text("""kernel k(X: gl<f32>[M, N], Y: gl<f32>[M, N]) grid(1) {
    reg x: rt<f32, 16, 64> = X[0, 0]
    x += x
    Y[0, 0] = x
}
""")
    k = tkir.compile(str(p), target="sm_80")
    assert not _stores(k)
    X = np.arange(16 * 64, dtype=np.float32).reshape(16, 64)
    Y = np.full_like(X, 7)
    tkir.interpret(k, X, Y)
    np.testing.assert_array_equal(Y, 2 * X)


def test_shared_tile_added_into_global(tmp_path) -> None:
    """`G[i, j] += s` of a shared tile: a TMA reduce-add on sm_90a, element-wise red on sm_80."""
    p = tmp_path / "k.tk"
    p.write_text("""kernel k(X: gl<f32>[M, N], Y: gl<f32>[64, N]) grid(cdiv(M, 64), cdiv(N, 32)) {
    shared s: st<f32, 64, 32>
    s = X[block.x, block.y]
    Y[0, block.y] += s
}
""")
    X = np.random.default_rng(3).standard_normal((64 * 5, 96)).astype(np.float32)
    for target in ("sm_90a", "sm_80"):
        k = tkir.compile(str(p), target=target)
        names = {o.name for o in _stores(k)}
        assert names == ({"tma.store"} if target == "sm_90a" else {"tk.store"})
        Y = np.zeros((64, 96), np.float32)
        tkir.interpret(k, X, Y)
        np.testing.assert_allclose(Y, X.reshape(5, 64, 96).sum(axis=0), rtol=1e-5, atol=1e-5)


COPY = """
tk.kernel @k {grid = ["1"]} {
  ^(%X: gl<f32>[M, N], %Y: gl<$DT>[P, Q])
  %c0 = arith.const {value = 0} : i32
  %x = tk.load %X, %c0, %c0 : rt<f32, 32, 64>
  $STORE
}
"""


def test_interpreter_adds_and_clips_ragged_edges() -> None:
    text = COPY.replace("$DT", "f32").replace("$STORE", 'tk.store %Y, %x, %c0, %c0 {reduce = "add"}')
    m = parse_module(text)
    verify(m)
    X = np.random.default_rng(4).standard_normal((20, 40)).astype(np.float32)
    Y = np.full((18, 35), 2, np.float32)
    interpret(m, X, Y, check_requires=False)
    np.testing.assert_allclose(Y, 2 + X[:18, :35])


@pytest.mark.parametrize(("dt", "store", "words"), [
    ("bf16", 'tk.store %Y, %xb, %c0, %c0 {reduce = "add"}', "{reduce = \"add\"} adds f32 values, not bf16"),
    ("f32", 'tk.store %Y, %x, %c0, %c0 {reduce = "max"}', 'reduce = "max": the kinds are "add"'),
    ("f32", '%s = tk.alloc : st<f32, 32, 64>\n  tk.store %s, %x {reduce = "add"}', "writes a gl, not st<f32, 32, 64>"),
    # vector-red's attribute (passes/vector_red.py): only on a reducing store, four elements, lane chunks of four
    ("f32", 'tk.store %Y, %x, %c0, %c0 {red_vec = 4}', 'red_vec = 4 needs reduce = "add"'),
    ("f32", 'tk.store %Y, %x, %c0, %c0 {reduce = "add", red_vec = 2}', "red_vec = 2: the vector red adds 4 elements"),
    ("f32", 'tk.store %Y, %x, %c0, %c0 {reduce = "add", red_vec = 4}', "needs lane chunks of a multiple of 4"),
])
def test_verifier_rules(dt: str, store: str, words: str) -> None:
    store = store.replace("%xb,", "%xb,") if dt == "f32" else '%xb = tk.cast %x : rt<bf16, 32, 64>\n  ' + store
    text = COPY.replace("$DT", dt).replace("$STORE", store)
    with pytest.raises(VerifyError) as e:
        verify(parse_module(text))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "reduce" in t or "red_vec" in t)
    assert str(e.value).startswith(f"<ir>:{line}:3: error:") and words in str(e.value), str(e.value)


def test_two_reduce_adds_to_one_place_are_valid_and_both_count() -> None:
    """Two reducing stores of the same tile to the same place are not a conflict: both add."""
    store = 'tk.store %Y, %x, %c0, %c0 {reduce = "add"}\n  tk.store %Y, %x, %c0, %c0 {reduce = "add"}'
    m = parse_module(COPY.replace("$DT", "f32").replace("$STORE", store))
    verify(m)
    X = np.random.default_rng(5).standard_normal((32, 64)).astype(np.float32)
    Y = np.zeros_like(X)
    interpret(m, X, Y)
    np.testing.assert_allclose(Y, 2 * X)


@pytest.mark.parametrize(("target", "opts"), TARGETS, ids=TARGET_IDS)
def test_blocks_add_column_sums_into_one_vector(target: str, opts: dict) -> None:
    """A register vector added into a 1-D tensor (red.global.add on every target: TMA adds tiles here)."""
    k = _compile("tests/data/colsum_add.tk", target, opts)
    assert [o.name for o in _stores(k)] == ["tk.store"]
    X = np.random.default_rng(6).standard_normal((64 * 9 + 3, 200)).astype(np.float32)
    S = np.ones(200, np.float32)
    tkir.interpret(k, X, S)
    np.testing.assert_allclose(S, 1 + X.sum(axis=0), rtol=1e-5, atol=1e-4)
