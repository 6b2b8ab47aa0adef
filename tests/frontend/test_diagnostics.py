"""Diagnostics of the .tk front end: every bad input in tests/frontend/bad/ fails with its expected message.

Each tests/frontend/bad/NAME.tk starts with `// ERROR: LINE:COL: words`; the formatted error must start
with `path:LINE:COL: error:`, contain the words, and show the source line and a caret.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from tkir.diagnostics import CompileError
from tkir.frontend import compile_file, compile_source
from tkir.tools.examples import load_companion

TESTS = Path(__file__).resolve().parents[1]  # tests/

BAD = TESTS / "frontend" / "bad"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROW_KERNELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "rows"  # the row kernels with every knob
GEMM_CONSTS = load_companion(str(EXAMPLES / "gemm.tk")).DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values
EXPECT = re.compile(r"^// ERROR: (\d+):(\d+): (.+)$")
BAD_FILES = sorted(BAD.glob("*.tk"))


def test_enough_bad_inputs() -> None:
    assert len(BAD_FILES) >= 20


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_bad_input(path: Path) -> None:
    text = path.read_text()
    m = EXPECT.match(text.splitlines()[0])
    assert m, f"{path.name}: first line must be '// ERROR: LINE:COL: words'"
    line, col, words = int(m[1]), int(m[2]), m[3]
    with pytest.raises(CompileError) as info:
        compile_file(str(path))
    out = info.value.format()
    first, src, caret, *_ = out.splitlines()
    assert first.startswith(f"{path}:{line}:{col}: error: "), out
    assert words in first, out
    assert src == text.splitlines()[line - 1].expandtabs(1)
    assert caret == " " * (col - 1) + "^"


def test_unknown_const_override_is_located_at_the_kernel_name() -> None:
    with pytest.raises(CompileError) as info:
        compile_file(str(EXAMPLES / "gemm.tk"), consts={"BX": 64})
    out = info.value.format()
    assert out.startswith(f"{EXAMPLES / 'gemm.tk'}:6:8: error: unknown const 'BX'"), out
    assert "BM, BN, BK" in out


def test_auto_const_without_a_value_is_located_in_the_header() -> None:
    """gemm.tk leaves BM, BN, STAGES, SK and SKI to tkir.compile; the front end alone needs them given, and
    names the first one it lacks at its place in the header."""
    with pytest.raises(CompileError) as info:
        compile_file(str(EXAMPLES / "gemm.tk"), consts={"BM": 128, "BN": 256})
    out = info.value.format()
    header = (EXAMPLES / "gemm.tk").read_text().splitlines()[5]
    col = header.index("STAGES=auto") + 1
    assert out.startswith(f"{EXAMPLES / 'gemm.tk'}:6:{col}: error: const 'STAGES' is auto: the compiler chooses it"), out
    assert compile_file(str(EXAMPLES / "gemm.tk"), consts=GEMM_CONSTS).kernel.attrs["consts"] == GEMM_CONSTS


def test_override_that_breaks_a_rule_is_reported() -> None:
    with pytest.raises(CompileError) as info:
        compile_file(str(EXAMPLES / "gemm.tk"), consts={**GEMM_CONSTS, "BK": 24})
    assert "multiples of 16" in info.value.message


@pytest.mark.parametrize("name", ["layernorm", "softmax", "rmsnorm"])
def test_row_kernels_refuse_a_row_that_is_not_whole_chunks(name: str, capsys: pytest.CaptureFixture) -> None:
    """Issue 14: -D D=1000 -D DC=512 compiled a chunked path that never processed the tail columns;
    the kernels' static_assert makes it a located error (exit 1). Whole chunks and D <= DC compile."""
    from tkir.cli import main

    path = ROW_KERNELS / f"{name}.tk"
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.lstrip().startswith("static_assert("))
    assert main(["compile", str(path), "-D", "D=1000", "-D", "DC=512"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:{line}:9: error: static_assert failed: "), err
    assert "D must be a multiple of DC (D = 1000, DC = 512)" in err.splitlines()[0] and "Traceback" not in err
    for consts in ({"D": 2048, "DC": 1024}, {"D": 768, "DC": 1024}):
        compile_file(str(path), consts=consts)


def test_syntax_errors_name_tokens_not_terminals() -> None:
    with pytest.raises(CompileError) as info:
        compile_source("kernel k(A: gl<bf16>[M]) grid(M) {\n  reg x rt<f32, 16, 16>\n}\n", "s.tk")
    msg = info.value.message
    assert msg == "expected ':', found 'rt'"
    assert info.value.loc.line == 2 and info.value.loc.col == 9


def test_hint_is_printed_as_a_note() -> None:
    with pytest.raises(CompileError) as info:
        compile_file(str(BAD / "ambiguous_bcast.tk"))
    assert "\nnote: say which with row(v)" in info.value.format()


def test_no_tma_only_on_loads() -> None:
    src = ("kernel k(A: gl<bf16>[M, K]) grid(M / 64) {\n  reg x: rt<f32, 64, 64> = 0\n"
           "  @no_tma\n  x = x + 1.0\n}\n")
    with pytest.raises(CompileError) as info:
        compile_source(src, "n.tk")
    assert info.value.message.startswith("'@no_tma' applies to a load statement")
    assert (info.value.loc.line, info.value.loc.col) == (3, 3)


def test_mutated_examples_fail_only_with_compile_errors() -> None:
    """Corrupted sources (tokens dropped, swapped, inserted) give located errors, never tracebacks."""
    rng = random.Random(0)
    sources = [p.read_text() for p in sorted(EXAMPLES.glob("*.tk"))]
    pieces = ["@", ".T", "[0]", "row_max(", ")", "1.5", "block.x", "inf", "-", "@stages(2)", "{", "}",
              "=", "+=", "reg", "let", "shared", "if", "for", "..", ",", "X[0, 0]", "rv<f32, 16>", "a", "s"]
    for _ in range(300):
        words = re.split(r"(\s+)", rng.choice(sources))
        for _ in range(rng.randint(1, 2)):
            j = rng.randrange(len(words))
            words[j] = "" if rng.random() < 0.3 else rng.choice(pieces)
        text = "".join(words)
        try:
            compile_source(text, "m.tk")
        except CompileError as e:
            assert e.loc is not None and e.loc.file == "m.tk", e.format()


def test_a_file_that_is_not_utf8_is_a_located_error(tmp_path) -> None:
    """A stray 0xff byte: the line and column of the byte, not a UnicodeDecodeError (issue 14)."""
    import subprocess
    import sys

    path = tmp_path / "latin1.tk"
    path.write_bytes(b"kernel k(A: gl<bf16>[N]) grid(1) {\n  // caf\xe9\n}\n")
    with pytest.raises(CompileError) as info:
        compile_file(str(path))
    assert info.value.format().startswith(f"{path}:2:9: error: the file is not UTF-8 text: byte 0xe9")
    ir = tmp_path / "bad.tkir"
    ir.write_bytes(b"\xff")
    r = subprocess.run([sys.executable, "-m", "tkir.cli", "opt", str(ir)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith(f"{ir}:1:1: error: the file is not UTF-8 text")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("kind", ["minus", "if", "paren"])
def test_deep_nesting_is_refused_where_the_limit_is_passed(kind: str) -> None:
    """5,000 nested minus signs or 3,000 nested ifs: a located 'nested too deeply', not a RecursionError."""
    from tkir.source_text import MAX_NESTING

    head = "kernel k<C=1>(A: gl<f32>[N]) grid(1) {\n"
    if kind == "minus":
        text = head + "  let x = " + "-" * 5000 + "C\n}\n"
        where = (2, 10 + MAX_NESTING)
    elif kind == "if":
        text = head + "if C > 0 {\n" * 3000 + "let y = 1\n" + "}\n" * 3001
        where = (MAX_NESTING + 1, 10)
    else:
        text = head + "  let x = " + "(" * 3000 + "C" + ")" * 3000 + "\n}\n"
        where = (2, 10 + MAX_NESTING)
    with pytest.raises(CompileError) as info:
        compile_source(text, "deep.tk")
    assert (info.value.loc.line, info.value.loc.col) == where
    assert "nested too deeply" in info.value.message
    shallow = head + "  let x = " + "-" * 20 + "C\n" + "if C > 0 {\n" * 20 + "let y = (((C)))\n" + "}\n" * 21
    compile_source(shallow, "ok.tk")  # real programs are far below the limit


def test_strings_do_not_count_as_nesting() -> None:
    """A static_assert message is text: its brackets and minus signs are not nesting, and a `//` in it
    does not start a comment that would hide the `)` after it."""
    head = "kernel k<C=1>(A: gl<f32>[N]) grid(1) {\n"
    text = head + 'static_assert(C > 0, "' + "(-" * 200 + '")\n' + 'static_assert(C > 0, "//")\n' * 200 + "}\n"
    compile_source(text, "s.tk")


def test_deeply_nested_ir_text_is_refused() -> None:
    from tkir.parser import parse_module

    with pytest.raises(CompileError, match="nested too deeply"):
        parse_module("tk.kernel @k {" * 2000 + "}" * 2000, "deep.tkir")


def _sum_kernel(terms: int, grid: str = "cdiv(N, 16)") -> str:
    return (f"kernel k<C=1>(X: gl<f32>[N, 64], Y: gl<f32>[N, 64]) grid({grid}) {{\n"
            "    reg x: rt<f32, 16, 64> = X[block.x, 0]\n"
            "    let xf = x\n"
            f"    let c = {' + '.join(['C'] * terms)}\n"
            f"    static_assert({' + '.join(['1'] * terms)} == {terms}, \"the sum\")\n"
            f"    Y[block.x, 0] = {' + '.join(['xf'] * terms)} + c\n"
            "}\n")


@pytest.mark.parametrize("terms", [500, 1001, 3000])
def test_long_sums_compile_and_compute_the_sum(terms: int) -> None:
    """A flat sum of `terms` tiles, consts and literals (a RecursionError at 500 before): the chain is walked
    in a loop, and the interpreter gives terms * x + terms."""
    import numpy as np

    from tkir.interp import interpret

    module = compile_source(_sum_kernel(terms), "sum.tk")
    x = np.random.default_rng(0).random((32, 64), np.float32)
    y = np.zeros_like(x)
    interpret(module, x, y)
    np.testing.assert_allclose(y, terms * x.astype(np.float64) + terms, rtol=1e-4)


def test_long_tune_lists_and_where_are_walked_in_a_loop() -> None:
    from tkir.frontend.tune import read_space

    total = " + ".join(["1"] * 3000)
    text = _sum_kernel(2).replace("kernel k<C=1>", f"@tune(C=[{total}], where=C + {total} > 0)\nkernel k<C=1>")
    space = read_space(text, "t.tk")
    assert space.values == {"C": [3000]} and space.points()[0].dropped is None


def test_a_grid_past_its_operator_limit_is_located_at_its_start() -> None:
    """A grid expression is read by Python's parser (tkir/symexpr.py): past MAX_GRID_OPERATORS it is refused
    where it starts; at the limit it compiles."""
    from tkir.frontend.lower import MAX_GRID_OPERATORS

    ok = "cdiv(N, 16)" + " + N * 0" * ((MAX_GRID_OPERATORS - 1) // 2)
    module = compile_source(_sum_kernel(2, ok), "g.tk")
    assert module.kernel.attrs["grid"][0].startswith("cdiv(N, 16) + N * 0 + ")
    text = _sum_kernel(2, "cdiv(N, 16)" + " + 0" * MAX_GRID_OPERATORS)
    with pytest.raises(CompileError) as info:
        compile_source(text, "g.tk")
    assert (info.value.loc.line, info.value.loc.col) == (1, text.index("cdiv") + 1)
    assert f"more than {MAX_GRID_OPERATORS} operators" in info.value.message
