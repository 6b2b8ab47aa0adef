"""The examples in the reference interpreter against their companions' numpy references.

Two sources of IR: kernels compiled from examples/*.tk by the front end (these fail while the front
end is missing: the integrator runs them once it lands), and tk-level IR written here by hand for
the same signatures, which pins the companions' references and the interpreter independently of
the front end. A deliberately wrong kernel must fail the check.
"""

from __future__ import annotations

import math
from pathlib import Path
from string import Template

import numpy as np
import pytest

from tkir.ir import Module
from tkir.parser import parse_module
from tkir.printer import print_module
from tkir.tools.examples import check_interpreted, load_companion, relative_error
from tkir.verifier import verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ["gemm", "attention_fwd", "layernorm", "softmax", "rotary"]


def _cases() -> list:
    out = []
    for name in NAMES:
        comp = load_companion(str(EXAMPLES / f"{name}.tk"))
        assert len(comp.CHECK_SIZES) == len(comp.CHECK_CONSTS) >= 2
        for i, (sizes, consts) in enumerate(zip(comp.CHECK_SIZES, comp.CHECK_CONSTS, strict=True)):
            out.append(pytest.param(name, sizes, consts, id=f"{name}-{i}"))
    return out


CASES = _cases()


def _assert_ok(results: list) -> None:
    assert results, "no outputs were checked"
    for r in results:
        assert r.ok, str(r)


@pytest.mark.parametrize("name, sizes, consts", CASES)
def test_frontend_example_matches_reference(name: str, sizes: dict, consts: dict) -> None:
    from tkir.frontend import compile_file  # fails (does not skip) while the front end is missing
    from tkir.tools.auto_consts import auto_names

    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    path = str(EXAMPLES / comp.KERNEL)
    if auto_names(path, consts):  # the front end alone cannot choose auto consts: the compiler's choice at the sizes
        import tkir

        consts = {**consts, **tkir.compile(path, sizes=sizes, **consts).module.kernel.attrs["auto"]}
    module = compile_file(path, consts)
    _assert_ok(check_interpreted(module, comp, sizes, consts, seed=0))


def test_frontend_wrong_kernel_fails_check() -> None:
    from tkir.frontend import compile_file

    comp = load_companion(str(EXAMPLES / "layernorm.tk"))
    text = print_module(compile_file(str(EXAMPLES / "layernorm.tk"), {"ROWS": 4}))  # ROWS is auto: one value
    assert "tk.add" in text
    wrong = parse_module(text.replace("tk.add", "tk.sub"))
    results = check_interpreted(wrong, comp, comp.CHECK_SIZES[0], comp.CHECK_CONSTS[0], seed=0)
    assert not all(r.ok for r in results)


# ---------------------------------------------------------------------------------------------
# Hand-written tk-level IR with the examples' signatures ($-placeholders filled per check size).

GEMM = """
tk.kernel @gemm {consts = {BM = 128, BN = 256, BK = 64}, grid = ["M / 128", "N / 256"]} {
  ^(%A: gl<bf16>[M, K], %B: gl<bf16>[K, N], %C: gl<bf16>[M, N])
  %a = tk.alloc : st<bf16, 128, 64>
  %b = tk.alloc : st<bf16, 64, 256>
  %acc = tk.fill {value = 0.0} : rt<f32, 128, 256>
  %K = tk.size {name = "K"} : i32
  %c64 = arith.const {value = 64} : i32
  %kt = arith.div %K, %c64 : i32
  %c0 = arith.const {value = 0} : i32
  %c1 = arith.const {value = 1} : i32
  %bx = tk.block_id {dim = 0} : i32
  %by = tk.block_id {dim = 1} : i32
  %acc.1 = scf.for %c0, %kt, %c1, %acc {stages = 4} : rt<f32, 128, 256> {
    ^(%k: i32, %acc.2: rt<f32, 128, 256>)
    tk.load %a, %A, %bx, %k
    tk.load %b, %B, %k, %by
    %acc.3 = tk.mma %a, %b, %acc.2 : rt<f32, 128, 256>
    scf.yield %acc.3
  }
  %out = tk.cast %acc.1 : rt<bf16, 128, 256>
  tk.store %C, %out, %bx, %by
}
"""

# Online softmax in base 2: s = Q K^T * log2(e)/sqrt(D); m, l running max and sum per query row. K and V have
# H / G heads (a dim expression in the IR text); query head h reads K/V head h / G.
ATTENTION = """
tk.kernel @attention_fwd {consts = {BQ = 64, BKV = 64, D = $D, CAUSAL = $CAUSAL},
                          grid = ["cdiv(N, 64)", "H", "B"]} {
  ^(%Q: gl<bf16>[B, H, N, $D], %K: gl<bf16>[B, "H / $G", N, $D], %V: gl<bf16>[B, "H / $G", N, $D],
    %O: gl<bf16>[B, H, N, $D], %L: gl<f32>[B, H, N])
  %qb = tk.block_id {dim = 0} : i32
  %h = tk.block_id {dim = 1} : i32
  %b = tk.block_id {dim = 2} : i32
  %c0 = arith.const {value = 0} : i32
  %c1 = arith.const {value = 1} : i32
  %c64 = arith.const {value = 64} : i32
  %cG = arith.const {value = $G} : i32
  %kvh = arith.div %h, %cG : i32
  %q = tk.alloc : st<bf16, 64, $D>
  %k = tk.alloc : st<bf16, 64, $D>
  %v = tk.alloc : st<bf16, 64, $D>
  tk.load %q, %Q, %b, %h, %qb, %c0
  %o0 = tk.fill {value = 0.0} : rt<f32, 64, $D>
  %m0 = tk.fill {value = -inf} : rv<f32, 64>
  %l0 = tk.fill {value = 0.0} : rv<f32, 64>
  %N = tk.size {name = "N"} : i32
  %nkv = arith.cdiv %N, %c64 : i32
  %scale = arith.const {value = $SCALE} : f32
  %one = arith.const {value = 1.0} : f32
  %row0 = arith.mul %qb, %c64 : i32
  %o, %m, %l = scf.for %c0, %nkv, %c1, %o0, %m0, %l0 : rt<f32, 64, $D>, rv<f32, 64>, rv<f32, 64> {
    ^(%j: i32, %o1: rt<f32, 64, $D>, %m1: rv<f32, 64>, %l1: rv<f32, 64>)
    tk.load %k, %K, %b, %kvh, %j, %c0
    tk.load %v, %V, %b, %kvh, %j, %c0
    %z = tk.fill {value = 0.0} : rt<f32, 64, 64>
    %s0 = tk.mma %q, %k, %z {trans_b = true} : rt<f32, 64, 64>
    %s1 = tk.mul %s0, %scale : rt<f32, 64, 64>
    %col0 = arith.mul %j, %c64 : i32
    %ci = tk.index %s1 {axis = col} : rt<i32, 64, 64>
    %key = tk.add %ci, %col0 : rt<i32, 64, 64>
    %inside = tk.cmp %key, %N {pred = lt} : rt<i1, 64, 64>
    %ninf = arith.const {value = -inf} : f32
    %s2 = tk.select %inside, %s1, %ninf : rt<f32, 64, 64>
    $MASK
    %mx = tk.reduce %s {kind = max, axis = row} : rv<f32, 64>
    %m2 = tk.max %m1, %mx : rv<f32, 64>
    %d = tk.sub %s, %m2 {bcast = row} : rt<f32, 64, 64>
    %p = tk.exp2 %d : rt<f32, 64, 64>
    %dm = tk.sub %m1, %m2 : rv<f32, 64>
    %alpha = tk.exp2 %dm : rv<f32, 64>
    %ps = tk.reduce %p {kind = sum, axis = row} : rv<f32, 64>
    %la = tk.mul %l1, %alpha : rv<f32, 64>
    %l2 = tk.add %la, %ps : rv<f32, 64>
    %o2 = tk.mul %o1, %alpha {bcast = row} : rt<f32, 64, $D>
    %pb = tk.cast %p : rt<bf16, 64, 64>
    %o3 = tk.mma %pb, %v, %o2 : rt<f32, 64, $D>
    scf.yield %o3, %m2, %l2
  }
  %on = tk.div %o, %l {bcast = row} : rt<f32, 64, $D>
  %ob = tk.cast %on : rt<bf16, 64, $D>
  tk.store %O, %ob, %b, %h, %qb, %c0
  %lg = tk.log2 %l : rv<f32, 64>
  %lm = tk.add %m, %lg : rv<f32, 64>
  %ln2 = arith.const {value = 0.6931471805599453} : f32
  %lse = tk.mul %lm, %ln2 : rv<f32, 64>
  tk.store %L, %lse, %b, %h, %qb
}
"""
MASK = {1: "%s = tk.mask_causal %s2, %row0, %col0 {fill = -inf} : rt<f32, 64, 64>",
        0: "%s = tk.mul %s2, %one : rt<f32, 64, 64>"}

LAYERNORM = """
tk.kernel @layernorm {consts = {ROWS = 1, D = $D}, grid = ["N"]} {
  ^(%X: gl<bf16>[N, $D], %W: gl<bf16>[$D], %Bias: gl<bf16>[$D], %Y: gl<bf16>[N, $D])
  %bx = tk.block_id {dim = 0} : i32
  %c0 = arith.const {value = 0} : i32
  %x = tk.load %X, %bx, %c0 : rt<bf16, 1, $D>
  %xf = tk.cast %x : rt<f32, 1, $D>
  %inv_d = arith.const {value = $INV_D} : f32
  %sum = tk.reduce %xf {kind = sum, axis = row} : rv<f32, 1>
  %mean = tk.mul %sum, %inv_d : rv<f32, 1>
  %xc = tk.sub %xf, %mean {bcast = row} : rt<f32, 1, $D>
  %sq = tk.mul %xc, %xc : rt<f32, 1, $D>
  %ss = tk.reduce %sq {kind = sum, axis = row} : rv<f32, 1>
  %var = tk.mul %ss, %inv_d : rv<f32, 1>
  %eps = arith.const {value = 1e-05} : f32
  %ve = tk.add %var, %eps : rv<f32, 1>
  %rstd = tk.rsqrt %ve : rv<f32, 1>
  %xn = tk.mul %xc, %rstd {bcast = row} : rt<f32, 1, $D>
  %w = tk.load %W, %c0 : rv<bf16, $D>
  %wf = tk.cast %w : rv<f32, $D>
  %bias = tk.load %Bias, %c0 : rv<bf16, $D>
  %bf = tk.cast %bias : rv<f32, $D>
  %y0 = tk.mul %xn, %wf {bcast = col} : rt<f32, 1, $D>
  %y1 = tk.add %y0, %bf {bcast = col} : rt<f32, 1, $D>
  %y = tk.cast %y1 : rt<bf16, 1, $D>
  tk.store %Y, %y, %bx, %c0
}
"""

SOFTMAX = """
tk.kernel @softmax {consts = {ROWS = 1, D = $D}, grid = ["N"]} {
  ^(%X: gl<bf16>[N, $D], %Y: gl<bf16>[N, $D])
  %bx = tk.block_id {dim = 0} : i32
  %c0 = arith.const {value = 0} : i32
  %x = tk.load %X, %bx, %c0 : rt<bf16, 1, $D>
  %xf = tk.cast %x : rt<f32, 1, $D>
  %mx = tk.reduce %xf {kind = max, axis = row} : rv<f32, 1>
  %xs = tk.sub %xf, %mx {bcast = row} : rt<f32, 1, $D>
  %e = tk.exp %xs : rt<f32, 1, $D>
  %s = tk.reduce %e {kind = sum, axis = row} : rv<f32, 1>
  %yf = tk.div %e, %s {bcast = row} : rt<f32, 1, $D>
  %y = tk.cast %yf : rt<bf16, 1, $D>
  tk.store %Y, %y, %bx, %c0
}
"""

ROTARY = """
tk.kernel @rotary {consts = {ROWS = 16, D = $D}, grid = ["T / 16"]} {
  ^(%X: gl<bf16>[T, $D], %Cos: gl<bf16>[T, $HALF], %Sin: gl<bf16>[T, $HALF], %Y: gl<bf16>[T, $D])
  %bx = tk.block_id {dim = 0} : i32
  %c0 = arith.const {value = 0} : i32
  %c1 = arith.const {value = 1} : i32
  %x1b = tk.load %X, %bx, %c0 : rt<bf16, 16, $HALF>
  %x2b = tk.load %X, %bx, %c1 : rt<bf16, 16, $HALF>
  %cb = tk.load %Cos, %bx, %c0 : rt<bf16, 16, $HALF>
  %sb = tk.load %Sin, %bx, %c0 : rt<bf16, 16, $HALF>
  %x1 = tk.cast %x1b : rt<f32, 16, $HALF>
  %x2 = tk.cast %x2b : rt<f32, 16, $HALF>
  %cos = tk.cast %cb : rt<f32, 16, $HALF>
  %sin = tk.cast %sb : rt<f32, 16, $HALF>
  %a = tk.mul %x1, %cos : rt<f32, 16, $HALF>
  %b = tk.mul %x2, %sin : rt<f32, 16, $HALF>
  %y1 = tk.sub %a, %b : rt<f32, 16, $HALF>
  %c = tk.mul %x2, %cos : rt<f32, 16, $HALF>
  %d = tk.mul %x1, %sin : rt<f32, 16, $HALF>
  %y2 = tk.add %c, %d : rt<f32, 16, $HALF>
  %y1b = tk.cast %y1 : rt<bf16, 16, $HALF>
  %y2b = tk.cast %y2 : rt<bf16, 16, $HALF>
  tk.store %Y, %y1b, %bx, %c0
  tk.store %Y, %y2b, %bx, %c1
}
"""


def hand_written(name: str, consts: dict) -> str:
    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    c = {**comp.DEFAULT_CONSTS, **consts}
    if name == "gemm":
        return GEMM
    if name == "attention_fwd":
        return Template(ATTENTION).substitute(D=c["D"], CAUSAL=c["CAUSAL"], MASK=MASK[c["CAUSAL"]], G=c["G"],
                                              SCALE=repr(math.log2(math.e) / math.sqrt(c["D"])))
    if name == "layernorm":
        return Template(LAYERNORM).substitute(D=c["D"], INV_D=repr(1.0 / c["D"]))
    if name == "softmax":
        return Template(SOFTMAX).substitute(D=c["D"])
    return Template(ROTARY).substitute(D=c["D"], HALF=c["D"] // 2)


def _module(text: str) -> Module:
    m = parse_module(text)
    verify(m)
    return m


@pytest.mark.parametrize("name, sizes, consts", CASES)
def test_hand_written_example_matches_reference(name: str, sizes: dict, consts: dict) -> None:
    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    _assert_ok(check_interpreted(_module(hand_written(name, consts)), comp, sizes, consts, seed=1))


@pytest.mark.parametrize("name, wrong", [("rotary", ("tk.add", "tk.sub")),
                                         ("layernorm", ("tk.add %y0", "tk.sub %y0")),
                                         ("softmax", ("tk.exp ", "tk.exp2 "))])
def test_wrong_kernel_fails_check(name: str, wrong: tuple[str, str]) -> None:
    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    text = hand_written(name, comp.CHECK_CONSTS[0])
    assert wrong[0] in text
    results = check_interpreted(_module(text.replace(*wrong)), comp, comp.CHECK_SIZES[0],
                                comp.CHECK_CONSTS[0], seed=2)
    assert [r.ok for r in results] == [False]
    assert results[0].rel_err > 10 * results[0].bound


def test_causal_mask_matters() -> None:
    """The causal check size really is causal: the non-causal kernel fails it."""
    comp = load_companion(str(EXAMPLES / "attention_fwd.tk"))
    sizes, consts = comp.CHECK_SIZES[1], comp.CHECK_CONSTS[1]
    assert consts["CAUSAL"] == 1
    text = hand_written("attention_fwd", {**consts, "CAUSAL": 0})
    results = check_interpreted(_module(text), comp, sizes, consts, seed=3)
    assert not results[0].ok


def test_unwritten_output_fails_check() -> None:
    """Outputs start as NaN: a kernel that stores nothing fails instead of passing on stale data."""
    comp = load_companion(str(EXAMPLES / "rotary.tk"))
    text = hand_written("rotary", {}).replace("  tk.store %Y, %y2b, %bx, %c1\n", "")
    results = check_interpreted(_module(text), comp, comp.CHECK_SIZES[0], comp.CHECK_CONSTS[0], seed=4)
    assert not results[0].ok


def test_fresh_inputs_without_seed() -> None:
    comp = load_companion(str(EXAMPLES / "softmax.tk"))
    a = comp.make_inputs(np.random.default_rng(), comp.CHECK_SIZES[0], {})[0]
    b = comp.make_inputs(np.random.default_rng(), comp.CHECK_SIZES[0], {})[0]
    assert not np.array_equal(a, b)


def test_companions_are_consistent() -> None:
    for name in NAMES:
        comp = load_companion(str(EXAMPLES / f"{name}.tk"))
        assert comp.KERNEL == f"{name}.tk"
        assert set(comp.OUTPUTS) <= set(comp.PARAMS)
        assert len(comp.BENCH_SIZES) == len(comp.BENCH_CONSTS)
        sizes, consts = comp.CHECK_SIZES[0], comp.CHECK_CONSTS[0]
        inputs = comp.make_inputs(np.random.default_rng(0), sizes, consts)
        assert len(inputs) == len(comp.PARAMS)
        for p, x in zip(comp.PARAMS, inputs, strict=True):
            f = x.astype(np.float64)
            if p in comp.OUTPUTS:
                assert np.isnan(f).all(), f"{name}: output {p} is not poisoned"
            else:
                assert np.isfinite(f).all() and np.count_nonzero(f) > 0.99 * f.size, f"{name}: input {p}"
        ref = comp.reference(inputs, sizes, consts)
        for o in comp.OUTPUTS:
            assert ref[o].shape == inputs[comp.PARAMS.index(o)].shape
            assert np.isfinite(ref[o]).all()
            assert relative_error(ref[o], ref[o]) == 0.0
        assert comp.flops(sizes, consts) > 0
        assert comp.bytes_moved(sizes, consts) == sum(x.nbytes for x in inputs)
