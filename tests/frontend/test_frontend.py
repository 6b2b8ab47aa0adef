"""The .tk front end: the examples compile, verify and round-trip; the IR has the intended shape."""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir
from tkir.diagnostics import CompileError
from tkir.frontend import compile_file, compile_source
from tkir.ir import Module
from tkir.parser import parse_module
from tkir.printer import print_module
from tkir.tools.auto_consts import auto_names
from tkir.tools.examples import load_companion
from tkir.verifier import verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROW_KERNELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "rows"  # the row kernels with every knob
GEMM_CONSTS = load_companion(str(EXAMPLES / "gemm.tk")).DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values
# attention_fwd.tk's BQ and BKV are auto; the front end alone needs values: the 64 x 64 tile its header gave before
ATTENTION_TILE = {"BQ": 64, "BKV": 64}
# (example, a -D override that must also compile)
CASES = [
    ("gemm", {**GEMM_CONSTS, "BM": 64, "BN": 128}),
    ("attention_fwd", {"D": 64}),
    ("attention_fwd", {"CAUSAL": 1}),
    ("attention_fwd", {"D": 64, "CAUSAL": 1}),
    ("layernorm", {"D": 512}),
    ("softmax", {"ROWS": 32}),
    ("rotary", {"D": 64}),
]


def compile_example(name: str, consts: dict[str, int | float] | None = None,
                    root: Path = EXAMPLES) -> tuple[Module, str]:
    if name == "attention_fwd":
        consts = {**ATTENTION_TILE, **(consts or {})}
    module = compile_file(str(root / f"{name}.tk"), consts)
    return module, print_module(module)


def check_round_trip(module: Module) -> None:
    verify(module)
    text = print_module(module)
    again = parse_module(text)
    verify(again)
    assert print_module(again) == text


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.tk")))
def test_example_default_consts(name: str) -> None:
    path = str(EXAMPLES / f"{name}.tk")
    # the front end cannot choose `auto` consts: give it the values tkir.compile chooses without sizes
    chosen = tkir.compile(path).module.kernel.attrs["auto"] if auto_names(path, {}) else {}
    module, _ = compile_example(name, chosen)
    check_round_trip(module)


def test_gemm_companion_consts_are_the_size_free_choice() -> None:
    """examples/gemm.py's DEFAULT_CONSTS, which the front-end-only callers pass for gemm.tk's auto consts (the
    header's values before they were auto), are what tkir.compile chooses without sizes on both targets, but
    for SKI, which stream-K alone reads: at SK = 0 the two compile to the same PTX."""
    for target in ("sm_90a", "sm_80"):
        chosen = tkir.compile(str(EXAMPLES / "gemm.tk"), target=target)
        assert chosen.module.kernel.attrs["consts"] == {**GEMM_CONSTS, "SKI": 32}
        assert GEMM_CONSTS["SK"] == 0
        given = tkir.compile(str(EXAMPLES / "gemm.tk"), target=target, **GEMM_CONSTS)
        assert given.asm["ptx"] == chosen.asm["ptx"]


@pytest.mark.parametrize(("name", "consts"), CASES, ids=lambda c: str(c))
def test_example_with_override(name: str, consts: dict[str, int]) -> None:
    module, _ = compile_example(name, consts, ROW_KERNELS if name in ("layernorm", "softmax") else EXAMPLES)
    check_round_trip(module)
    assert {k: module.kernel.attrs["consts"][k] for k in consts} == consts


def test_every_op_has_a_location() -> None:
    module, _ = compile_example("attention_fwd", {"CAUSAL": 1})
    for op in module.walk():
        assert op.loc is not None and op.loc.file.endswith("attention_fwd.tk"), op


def test_gemm_shape() -> None:
    module, text = compile_example("gemm", GEMM_CONSTS)
    k = module.kernel
    assert k.attrs["grid"] == ["cdiv(M, 128)", "cdiv(N, 256)"]
    assert k.attrs["consts"] == {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "SK": 0, "SKI": 16}  # SK: @stream_k, off
    assert [str(a.type) for a in k.body.args] == ["gl<bf16>[M, K]", "gl<bf16>[K, N]", "gl<bf16>[M, N]"]
    assert "%a = tk.alloc : st<bf16, 128, 64>" in text
    assert "%acc = tk.fill {value = 0.0} : rt<f32, 128, 256>" in text
    assert '%K = tk.size {name = "K"} : i32' in text
    # the loop carries acc, has the stages annotation, and mma reads the carried value
    assert "%acc.1 = scf.for %c0, %0, %c1, %acc {stages = 4} : rt<f32, 128, 256> {" in text
    assert "^(%k: i32, %acc.2: rt<f32, 128, 256>)" in text
    assert "tk.load %a, %A, %bx, %k" in text
    assert "%acc.3 = tk.mma %a, %b, %acc.2 : rt<f32, 128, 256>" in text
    assert "scf.yield %acc.3" in text
    assert text.index("tk.cast %acc.1 : rt<bf16, 128, 256>") < text.index("tk.store %C")


def test_grid_substitutes_consts() -> None:
    module, _ = compile_example("attention_fwd", {"BQ": 128})
    assert module.kernel.attrs["grid"] == ["cdiv(N, 128)", "H", "B"]


def test_attention_online_softmax_shape() -> None:
    _, text = compile_example("attention_fwd")
    assert "scf.for %c0, %kv_blocks, %c1, %l, %o, %m {stages = 2}" in text
    assert "tk.mma %q, %k, %0 {trans_b = true} : rt<f32, 64, 64>" in text
    # keys past N are masked (any sequence length): the key's global column against N
    assert "tk.index %s.1 {axis = col} : rt<i32, 64, 64>" in text
    assert "tk.select" in text and "{pred = lt}" in text
    assert "tk.reduce %s.2 {kind = max, axis = row} : rv<f32, 64>" in text
    assert "{bcast = row}" in text
    assert "mask_causal" not in text
    assert "%kv_blocks = arith.cdiv %N, %BKV : i32" in text
    assert "tk.store %L" in text  # the row log-sum-exp


def test_attention_causal_masks_and_bounds_the_loop() -> None:
    _, text = compile_example("attention_fwd", {"CAUSAL": 1})
    assert "tk.mask_causal" in text and "{fill = -inf}" in text
    assert "%kv_blocks = arith.min" in text  # the diagonal block, or the last block of N


def test_attention_head_dim_64_keeps_row_broadcast_on_square_tiles() -> None:
    # o is 64x64 and alpha has 64 entries: the broadcast must come from alpha's row_* origin.
    _, text = compile_example("attention_fwd", {"D": 64})
    assert "%o.3 = tk.mul %o.2, %alpha {bcast = row} : rt<f32, 64, 64>" in text
    assert "{bcast = col}" not in text


def test_layernorm_broadcasts() -> None:
    _, text = compile_example("layernorm", root=ROW_KERNELS)
    assert "%w = tk.load %W, %c0 : rv<bf16, 1024>" in text
    assert "%xc = tk.sub %xf, %mean {bcast = row} : rt<f32, 16, 1024>" in text
    assert text.count("{bcast = col}") == 2


def test_rotary_halves_are_tile_columns() -> None:
    _, text = compile_example("rotary")
    assert "%x1 = tk.load %X, %bx, %c0 : rt<bf16, 16, 64>" in text
    assert "%x2 = tk.load %X, %bx, %c1 : rt<bf16, 16, 64>" in text
    assert "gl<bf16>[T, 64]" in text  # D / 2 folded


KERNEL = ("kernel k<BM=64, CAUSAL=0>(A: gl<bf16>[M, K], C: gl<bf16>[M, K], eps: f32) grid(cdiv(M, BM))"
          " {{\n{}\n}}\n")


def lower(body: str, consts: dict[str, int | float] | None = None) -> str:
    module = compile_source(KERNEL.format(body), "t.tk", consts)
    check_round_trip(module)
    return print_module(module)


def test_scalar_params_sizes_and_cdiv_grid() -> None:
    text = lower("let n = K / BM + 1")
    assert 'grid = ["cdiv(M, 64)"]' in text
    assert "%eps: f32" in text
    assert "%n = arith.add" in text


def test_compile_time_lets_fold() -> None:
    text = lower("reg x: rt<f32, BM, BM> = 0\nlet s = 1.0 / sqrt(BM * 4.0)\nx *= s")
    assert "arith.const {value = 0.0625} : f32" in text
    assert "sqrt" not in text


def test_compile_time_calls_fold_in_conditions() -> None:
    """A math function or cast of compile-time numbers is compile-time wherever it is written: `let`
    folded it, but an `if` condition did not (`if sqrt(BM) > 4` was a KeyError of the run-time `if`),
    nor did `i32(inf)` (an OverflowError)."""
    assert "tk.exp" in lower("reg x: rt<f32, BM, BM> = 0\nif sqrt(BM) > 4 { x = exp(x) } else { x = log(x) }")
    assert "tk.log" in lower("reg x: rt<f32, BM, BM> = 0\nif i32(f32(BM) / 3.0) == 21 { x = log(x) }")
    assert 'grid = ["cdiv(M, 8)"]' in print_module(compile_source(
        "kernel k(A: gl<bf16>[M]) grid(cdiv(M, i32(sqrt(64)))) {\n}\n", "g.tk"))
    for bad, words in [("let z = i32(inf)", "'i32(inf)' is not an integer"),
                       ("let z = i32(-inf * 0)", "'i32(nan)' is not an integer"),
                       ("if log(0.0) > 1 { }", "'log(0.0)' is undefined")]:
        with pytest.raises(CompileError) as info:
            lower(bad)
        assert info.value.message == words and info.value.loc.line == 2, info.value.format()


def test_compile_time_if_folds_and_else_if_chains() -> None:
    body = ("reg x: rt<f32, BM, BM> = 0\n"
            "if CAUSAL == 1 { x = exp(x) } else if BM > 32 { x = log(x) } else { x = abs(x) }")
    assert "tk.log" in lower(body) and "tk.exp" not in lower(body)
    assert "tk.exp" in lower(body, {"CAUSAL": 1})
    assert "tk.abs" in lower(body, {"BM": 32})


def test_untaken_branch_names_are_checked_but_not_its_types() -> None:
    """Issue 14: the branch a compile-time `if` does not take is name-checked (tests/frontend/bad/untaken_*.tk),
    but what depends on the consts is not: shapes, a `let` in both branches, names declared only
    under other consts, a nested `if` whose declarations either branch makes."""
    body = ("reg x: rt<f32, BM, BM> = 0\n"
            "if BM == 64 { let n = 1 } else { let n = 2 }\n"          # one name, each branch
            "if CAUSAL { reg y: rt<f32, BM, 24> = x\n let w = 3 }\n"  # bad shape, untaken: fine
            "if CAUSAL { x = x * f32(w)\n"                             # w: only in an untaken branch
            "  if BM > 32 { let z = 1 } else { let z = 2 }\n  let u = z }\n"
            "x = x + f32(n)")
    assert "tk.add" in lower(body)
    with pytest.raises(CompileError, match="multiples of 16"):
        lower(body, {"CAUSAL": 1})
    with pytest.raises(CompileError) as info:  # taken code using a name of an untaken branch
        lower("if CAUSAL { let w = 3 }\nlet v = w")
    assert info.value.message == "unknown name 'w'" and "line 2, in a compile-time branch" in info.value.hint
    for bad, words in [("if CAUSAL { let v = block }", "'block' needs"),
                       ("if CAUSAL { let v = block.w }", "unknown block index"),
                       ("if CAUSAL { reg v: rt<bf17, 16, 16> }", "unknown dtype 'bf17'"),
                       ("if CAUSAL { reg v: tile<bf16, 16, 16> }", "unknown type 'tile'"),
                       ("if CAUSAL { @unroll for i in 0 .. 2 { } }", "unknown annotation"),
                       ("if CAUSAL { for i in 0 .. 2 { } \n let v = i }", "unknown name 'i'"),
                       ("if CAUSAL { acc += 1.0 }", "'+=' on undeclared variable 'acc'"),
                       ("if CAUSAL { let v = A.T.q }", "unknown attribute '.q'")]:
        with pytest.raises(CompileError) as info:
            lower(bad)
        assert words in info.value.message, (bad, info.value.format())
        assert "does not take this branch" in info.value.hint


def test_static_assert_emits_nothing_and_is_checked_where_compiled() -> None:
    """`static_assert(cond, "msg")` folds its condition like a compile-time `if`: a true one leaves the IR
    as it was; a false one is an error wherever the statement is compiled (a loop body, a run-time `if`),
    but not in an untaken compile-time branch, whose names only are checked."""
    body = "reg x: rt<f32, BM, BM> = 0\nx = exp(x)\n"
    assert lower(body + 'static_assert(BM % 16 == 0 - CAUSAL, "tiles")') == lower(body)
    assert lower('let H = BM / 2\nstatic_assert(max(H, sqrt(BM)) >= 32, "h")\nfor i in 0 .. 4 '
                 '{ static_assert(H, "nonzero") }') == lower("for i in 0 .. 4 { }")
    assert lower('if CAUSAL { static_assert(0, "untaken") } else { static_assert(1, "taken") }') == lower("")
    for bad, where, words in [
            ('for i in 0 .. 4 {\n static_assert(BM < 64, "small") }', (3, 2),
             "static_assert failed: small (BM = 64)"),
            ('if block.x == 0 {\n static_assert(CAUSAL, "causal") }', (3, 2),
             "static_assert failed: causal (CAUSAL = 0)"),
            ('let H = BM * 0.5\nstatic_assert(H > BM, "")', (3, 1), "static_assert failed (H = 32.0, BM = 64)"),
            ('static_assert(1.0 / 2 < inf, "x")\nstatic_assert(K > 0, "x")', (3, 15),
             "static_assert needs a compile-time condition"),
            ('for i in 0 .. 4 { static_assert(i * BM < M, "x") }', (2, 33),
             "static_assert needs a compile-time condition"),
            ('static_assert(BN > 0, "x")', (2, 15), "unknown name 'BN'"),
            ('if CAUSAL { static_assert(0, "x")\n static_assert(cdv(BM, 2), "x") }', (3, 16),
             "unknown function 'cdv'")]:
        with pytest.raises(CompileError) as info:
            lower(bad)
        e = info.value
        assert e.message == words and (e.loc.line, e.loc.col) == where, (bad, e.format())
    with pytest.raises(CompileError) as info:
        lower('static_assert(eps > 0, "x")')
    assert info.value.hint.startswith("'eps' is a run-time value; a static_assert tests")


def test_swizzle_and_no_tma_and_warpgroups_attrs() -> None:
    src = ("@warpgroups(consumers=2, producers=1)\n"
           "kernel k(A: gl<bf16>[M, K]) grid(M / 64) {\n"
           "  @swizzle(64) shared a: st<bf16, 64, 64>\n"
           "  @swizzle(none) shared b: st<bf16, 64, 64>\n"
           "  @no_tma a = A[block.x, 0]\n}\n")
    module = compile_source(src, "a.tk")
    check_round_trip(module)
    text = print_module(module)
    assert "warpgroups = {consumers = 2, producers = 1}" in text
    assert "%a = tk.alloc {swizzle = 64} : st<bf16, 64, 64>" in text
    assert "%b = tk.alloc {swizzle = 0} : st<bf16, 64, 64>" in text
    assert "tk.load %a, %A, %bx, %c0 {no_tma = true}" in text


def test_transpose_outside_mma_and_mma_trans_a() -> None:
    body = ("shared a: st<bf16, BM, 32>\nreg r: rt<bf16, BM, 32> = a\n"
            "reg t: rt<bf16, 32, BM> = r.T\nreg p: rt<f32, 32, 32> = a.T @ a")
    text = lower(body)
    assert "%t = tk.transpose %r : rt<bf16, 32, 64>" in text
    assert "{trans_a = true} : rt<f32, 32, 32>" in text
    assert "%r = tk.load %a : rt<bf16, 64, 32>" in text


def test_explicit_row_col_markers() -> None:
    body = "reg x: rt<f32, BM, BM> = 0\nreg v: rv<f32, BM> = 1.0\nx = x * col(v)\nx = x + row(v)"
    text = lower(body)
    assert "{bcast = col}" in text and "{bcast = row}" in text


def test_register_store_to_shared_and_shared_load() -> None:
    body = "shared a: st<f32, BM, BM>\nreg x: rt<f32, BM, BM> = -inf\na = x\nx = a"
    text = lower(body)
    assert "tk.store %a, %x" in text
    assert "%x.1 = tk.load %a : rt<f32, 64, 64>" in text
    assert "{value = -inf}" in text


def test_loop_local_variable_is_not_carried_and_nested_loops_carry() -> None:
    body = ("reg acc: rt<f32, BM, BM> = 0\nreg t: rt<f32, BM, BM>\n"
            "for i in 0 .. K / BM {\n  for j in 0 .. 2 {\n    t = exp(acc)\n    acc += t\n  }\n}")
    text = lower(body)
    # both loops carry acc only; t is local to the inner body
    assert text.count("scf.for") == 2
    assert text.count(": rt<f32, 64, 64> {") == 2
    assert "%acc.1 = scf.for" in text


def test_run_time_scalars_mix_with_tiles() -> None:
    text = lower("reg x: rt<f32, BM, BM> = 0\nx = x * eps + f32(block.x)")
    assert "arith.cast %bx : f32" in text
    assert "tk.mul %x, %eps" in text


@pytest.mark.parametrize(("body", "words"), [
    ("let x = 1 / 0", "division by zero"),
    ("let x = log(0.0 - 1.0)", "undefined"),
    ("let x = sqrt(K)", "needs a float operand"),
    ("reg x: rt<f32, BM, BM> = K", "run-time scalar"),
    ("let x = K + eps", "scalar type mismatch"),
    ("reg x: rt<f32, BM, BM> = 0\nx = mask_causal(x, 1.5, 0)", "must be an integer"),
    ("C = A", "as a whole"),
    ("A[block.x, 0] += A[block.x, 0]", "'+=' on a global tile"),
    ("let b = block", "'block' needs"),
    ("let b = block.w", "unknown block index"),
    ("shared a: st<bf16, BM, BM>\na += A[0, 0]", "'+=' on shared"),
])
def test_more_errors(body: str, words: str) -> None:
    with pytest.raises(CompileError) as info:
        lower(body)
    assert words in info.value.message, info.value.format()


def test_inf_literal_and_negation() -> None:
    text = lower("reg m: rv<f32, BM> = -inf\nm = -m")
    assert "{value = -inf}" in text and "tk.neg %m" in text


def test_syntax_tree_nodes_behave_as_dataclasses() -> None:
    """frontend/ast.py's nodes are plain classes (cheaper to define than dataclasses, docs/experiments.md
    "Compile time") with a dataclass's behaviour: fields in order, base fields first, defaults (a new
    list per node), ==, repr, unhashable, and a TypeError for a missing or unknown argument."""
    import dataclasses

    from tkir.frontend import ast
    from tkir.frontend.parse import parse_source
    from tkir.ir import Loc

    loc = Loc("k.tk", 1, 2)
    assert ast.SharedDecl._fields == ("loc", "annotations", "name", "type")
    a, b = ast.Annotation(loc, "tune"), ast.Annotation(loc, "tune")
    a.args.append(ast.Num(loc, 1))
    assert b.args == [] and a != b and b == ast.Annotation(loc, "tune", [], [])
    assert ast.For(loc, [], "k", ast.Num(loc, 0), ast.Num(loc, 4), []).step is None
    assert repr(ast.Num(loc, 1)) == "Num(loc=Loc(file='k.tk', line=1, col=2), value=1)"
    assert ast.Num(loc, 1) == ast.Num(loc=loc, value=1) and ast.Num(loc, 1) != ast.Name(loc, "x")
    with pytest.raises(TypeError, match="unhashable"):
        hash(ast.Num(loc, 1))
    for bad in (lambda: ast.Num(loc), lambda: ast.Num(loc, 1, 2), lambda: ast.Num(loc, 1, x=2)):
        with pytest.raises(TypeError):
            bad()
    text = (EXAMPLES / "gemm.tk").read_text()
    assert parse_source(text, "gemm.tk") == parse_source(text, "gemm.tk")
    assert not dataclasses.is_dataclass(ast.Kernel)
