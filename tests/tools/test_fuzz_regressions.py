"""One test per class of failure the fuzzer found (docs/fuzzing.md): each input once gave a traceback,
a hang or an unlocated error; now it compiles or fails with a located `file:line:col: error:`.

Each runs `tkc` in-process through tkir.cli.main (the fuzzer's oracle checks the same thing in a child).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tkir.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ROW_KERNELS = ROOT / "tests" / "data" / "rows"  # the row kernels with every schedule knob
LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*)$", re.MULTILINE)
REST = "--passes=plan-occupancy,pipeline,persistent,canonicalize"  # the default pipeline after create-tma


@pytest.fixture(autouse=True)
def no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TKIR_CACHE", "0")


def tkc(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def located(err: str, path: Path) -> tuple[int, int, str]:
    m = LOCATED.search(err)
    assert m and m["file"] == str(path), err
    return int(m["line"]), int(m["col"]), m["msg"]


def position(path: Path, text: str) -> tuple[int, int]:
    """(line, column), from 1, of the first occurrence of `text` in the file: examples move when edited."""
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text in line:
            return i, line.index(text) + 1
    raise AssertionError(f"{text!r} is not in {path}")


def kernel(example: str) -> Path:
    """examples/EXAMPLE, or for the row kernels (whose IR here has their default warps and rows) their copy
    with every schedule knob in tests/data/rows."""
    return (ROW_KERNELS if example in ("layernorm.tk", "rmsnorm.tk", "softmax.tk") else EXAMPLES) / example


def dump(capsys: pytest.CaptureFixture, example: str, after: str, *flags: str) -> str:
    rc, out, _ = tkc(capsys, "compile", str(kernel(example)), f"--stop-after={after}", *flags)
    assert rc == 0
    return out


def test_ir_text_with_numbered_values_compiles_to_ptx(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Printed IR names temporaries %0, %1, ...; the backend named LLVM values after them (`%0.8`), which
    LLVM reads as a numbered value: every IR dump with temporaries failed `--emit ptx`."""
    ir = tmp_path / "linear.tkir"
    ir.write_text(dump(capsys, "linear.tk", "canonicalize"))
    assert "%0 = " in ir.read_text()
    rest = "legalize-mma,infer-layouts,select-swizzle,bank-conflicts,create-tma,plan-occupancy,pipeline,persistent"
    rc, out, err = tkc(capsys, "compile", str(ir), f"--passes={rest},canonicalize", "--emit", "ptx")
    assert rc == 0, err
    assert ".entry linear" in out


def test_row_tile_with_idle_lanes_is_a_located_backend_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A 4x16 bf16 register tile has 8 chunks for 32 lanes: the backend raised ValueError."""
    src = tmp_path / "small.tk"
    src.write_text("kernel small<ROWS=4, D=16>(X: gl<bf16>[N, D], Y: gl<bf16>[N, D])\n    grid(cdiv(N, ROWS))\n{\n"
                   "    reg x: rt<bf16, ROWS, D> = X[block.x, 0]\n    Y[block.x, 0] = x\n}\n")
    rc, _, err = tkc(capsys, "compile", str(src), "--emit", "ptx")
    assert rc == 1 and "Traceback" not in err
    assert located(err, src)[:2] == (4, 32)
    assert "fewer than its 32 lanes" in err


def test_layout_that_does_not_fit_its_tile_is_located(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`warps = 32` on a 16-row tile in IR text: the backend's slot formulas held no element (IndexError)."""
    text = dump(capsys, "softmax.tk", "create-tma", "--no-tma")
    bad = text.replace("rt<bf16, 16, 1024, layout={kind = row, warps = 16, vec = 8}>",
                       "rt<bf16, 16, 1024, layout={kind = row, warps = 32, vec = 8}>", 1)
    assert bad != text
    ir = tmp_path / "softmax.tkir"
    ir.write_text(bad)
    rc, _, err = tkc(capsys, "compile", str(ir), "--no-tma", REST, "--emit", "ptx")
    assert rc == 1 and "Traceback" not in err
    line, _, msg = located(err, ir)
    assert "warps = 32" in bad.splitlines()[line - 1]
    assert "does not fit rt<bf16, 16, 1024>" in msg


def test_misfit_register_layout_of_a_shared_tile_read_is_located(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    """Fuzzer find (seed 20261210, input 775): transpose's register copy of its shared tile
    with `vec = 2**64` in IR text, given to bank-conflicts: the access model of the copy raised a bare
    ValueError. Now the op that reads the tile is named, with the layout's problem."""
    text = dump(capsys, "transpose.tk", "select-swizzle", "-D", "SHARED_T=0")
    old = "layout={kind = row, warps = 4, vec = 8}>\n  %t = tk.transpose"
    assert old in text, text
    ir = tmp_path / "transpose.tkir"
    ir.write_text(text.replace(old, old.replace("vec = 8", "vec = 18446744073709551616"), 1))
    rc, _, err = tkc(capsys, "opt", str(ir), "--passes=bank-conflicts,create-tma")
    assert rc == 1 and "Traceback" not in err
    line, _, msg = located(err, ir)
    assert "vec = 18446744073709551616" in ir.read_text().splitlines()[line - 1]
    assert msg.startswith("shared tile 'a': layout of r does not fit rt<bf16, 32, 128>")


@pytest.mark.parametrize("consumers", ["9", "2147483648"])
def test_too_many_warpgroups_is_refused_before_layouts(consumers: str, capsys: pytest.CaptureFixture) -> None:
    """-D WG=2147483648 made infer-layouts try every warp count down from 2**33 (a hang)."""
    path = ROW_KERNELS / "layernorm.tk"
    rc, _, err = tkc(capsys, "compile", str(path), "-D", f"WG={consumers}")
    assert rc == 1
    assert located(err, path)[:2] == position(path, "layernorm<")   # the kernel's name
    assert "threads per block: more than the 1024 a block may have" in err


def test_register_tile_larger_than_the_register_file(capsys: pytest.CaptureFixture) -> None:
    """-D ROWS=2**31 (numpy MemoryError in infer-layouts) and -D D=2**63 (512 PiB): refused at the type.
    tests/frontend/bad/register_tile_too_large.tk has the same check written in the source. D=2**63 is
    refused sooner, at the global dim it sizes (past i32); D=2**30 fits a dim and still not the registers."""
    register_file = "bytes of registers, more than the 262144 of an SM's register file"
    for example, define, where, message in (
            ("layernorm.tk", "ROWS=2147483648", "rt<bf16, ROWS, D>", register_file),
            ("rotary.tk", "D=1073741824", (8, 13), register_file),
            ("rotary.tk", "D=9223372036854775808", (4, 46), "a global dim of 9223372036854775808 elements: "
                                                                     "at most 2147483647")):
        path = kernel(example)
        rc, _, err = tkc(capsys, "compile", str(path), "-D", define, "--emit", "ptx")
        if isinstance(where, str):
            where = position(path, where)
        assert rc == 1 and located(err, path)[:2] == where, err
        assert message in err, err


@pytest.mark.parametrize("old,new,words", [
    ("sv<i64, 2>", "sv<i64, 2147483647>", "within 16 times a block's shared memory"),  # a 2**31 loop
    ("rt<bf16, 64, 64, layout", "rt<st, 64, 64, layout", "unknown dtype 'st'"),  # KeyError: 'st'
    ("swizzle=128, align=1024>", "swizzle=128, align=inf>", "align=inf is not a power of two"),  # OverflowError
])
def test_ir_types_are_checked_when_parsed(old: str, new: str, words: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    text = dump(capsys, "attention_fwd.tk", "pipeline", "-D", "D=64", "-D", "CAUSAL=1", "-D", "BQ=64", "-D", "BKV=64")
    assert old in text
    ir = tmp_path / "attn.tkir"
    ir.write_text(text.replace(old, new, 1))
    rc, _, err = tkc(capsys, "opt", str(ir), "--passes=persistent,canonicalize")
    assert rc == 1
    line, col, msg = located(err, ir)
    assert words in msg and new.split(",")[0] in ir.read_text().splitlines()[line - 1][col - 1:]


def test_malformed_layout_of_a_plain_copy_is_located(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A layout read by the launch's requirements (tkir/requires.py) raised an unlocated error."""
    text = dump(capsys, "softmax.tk", "create-tma", "--no-tma")
    bad = text.replace("layout={kind = row, warps = 16, vec = 8}>", "layout={kind = row, warps = nan, vec = 8}>", 1)
    ir = tmp_path / "softmax.tkir"
    ir.write_text(bad)
    rc, _, err = tkc(capsys, "compile", str(ir), "--no-tma", REST, "--emit", "ptx")
    assert rc == 1
    line, _, msg = located(err, ir)
    assert "warps = nan" in bad.splitlines()[line - 1] and "malformed layout" in msg


def test_bad_size_expression_in_the_grid_is_located(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`grid = ["cdiv(M, 12 8)", ...]` in IR text: persistent's builder raised SyntaxError."""
    text = dump(capsys, "gemm.tk", "pipeline")
    ir = tmp_path / "gemm.tkir"
    ir.write_text(text.replace('"cdiv(M, 128)"', '"cdiv(M, 12 8)"', 1))
    rc, _, err = tkc(capsys, "opt", str(ir), "--passes=persistent")
    assert rc == 1
    line, _, msg = located(err, ir)
    assert ir.read_text().splitlines()[line - 1].startswith("tk.kernel @gemm")
    assert "bad size expression 'cdiv(M, 12 8)'" in msg  # the verifier's check, or persistent's builder


def test_compile_verifies_ir_text_before_the_first_pass(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`tkc compile X.tkir` ran canonicalize on unverified IR: an unknown op in a loop was a KeyError there."""
    text = dump(capsys, "linear.tk", "persistent")
    ir = tmp_path / "linear.tkir"
    ir.write_text(text.replace("tk.mma", "tk.bogus", 1))
    rc, _, err = tkc(capsys, "compile", str(ir), "--passes=canonicalize", "--emit", "ptx")
    assert rc == 1
    line, _, msg = located(err, ir)
    assert msg == "unknown op 'tk.bogus'" and "tk.bogus" in ir.read_text().splitlines()[line - 1]


@pytest.mark.parametrize("old,new,words", [
    ('tk.size {name = "K"}', 'tk.size {name = "Q"}', "'Q'"),  # KeyError; now the verifier's "not a size of"
    ("%3 = tk.add %var, %EPS : rv<f32, 16, layout={kind = row_vec, warps = 16}>",
     "%3 = tk.add %var, %EPS : rv<f32, 16, layout={kind = row_vec, warps = 8}>",
     "an element-wise op's operands and result have one layout"),  # zip() ValueError
])
def test_backend_locates_inconsistent_ir(old: str, new: str, words: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture) -> None:
    example = "linear.tk" if "size" in old else "layernorm.tk"
    text = dump(capsys, example, "persistent", "--target=sm_80")
    assert old in text
    ir = tmp_path / "k.tkir"
    ir.write_text(text.replace(old, new, 1))
    rc, _, err = tkc(capsys, "compile", str(ir), "--target=sm_80", "--passes=canonicalize", "--emit", "ptx")
    assert rc == 1
    line, _, msg = located(err, ir)
    assert words in msg and new.split(" ")[0] in ir.read_text().splitlines()[line - 1]


def test_long_size_name_is_not_truncated_by_llvm(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """LLVM cuts local names at 1024 characters: a 5000-character size name next to its 1-letter prefix
    became two parameters of one name ("backend produced invalid LLVM IR", unlocated)."""
    src = tmp_path / "long.tk"
    long = "N" + "v" * 5000
    src.write_text(f"kernel k<ROWS=16, D=1024>(X: gl<bf16>[N, D], Y: gl<bf16>[{long}, D])\n    grid(cdiv(N, ROWS))\n"
                   "{\n    reg x: rt<bf16, ROWS, D> = X[block.x, 0]\n    Y[block.x, 0] = x\n}\n")
    rc, out, err = tkc(capsys, "compile", str(src), "--emit", "ptx")
    assert rc == 0, err[:500]
    assert ".entry k(" in out


@pytest.mark.parametrize("old,new,words", [
    ("layout={kind = col_vec, of = row, warps = 16, vec = 8}>", "layout={kind = col_vec, of = row, warps = 4294967296, "
     "vec = 8}>", "137438953472 threads: more than the 1024"),  # numpy: 1 TiB for the thread indices
    ("%x = tk.load %X, %bx, %c0 : rt<bf16, 16, 1024, layout={kind = row, warps = 16, vec = 8}>",
     "%x = tk.load %X, %bx, %c0 : rt<bf16, 16, 1024, layout={kind = row, warps = 8, vec = 8}>",
     "an element-wise op's operands and result have one layout"),  # tk.cast: zip() ValueError
])
def test_layouts_of_hand_written_ir_are_checked(old: str, new: str, words: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    text = dump(capsys, "layernorm.tk", "infer-layouts", "--no-tma")
    assert old in text
    ir = tmp_path / "ln.tkir"
    ir.write_text(text.replace(old, new, 1))
    rest = "select-swizzle,bank-conflicts,create-tma,plan-occupancy,pipeline,persistent,canonicalize"
    rc, _, err = tkc(capsys, "compile", str(ir), "--no-tma", f"--passes={rest}", "--emit", "ptx")
    assert rc == 1
    _, _, msg = located(err, ir)
    assert words in msg


def test_shared_swizzle_must_be_a_span(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`st<bf16, 128, 64, swizzle=1, ...>`: a KeyError in the bank-conflict model."""
    text = dump(capsys, "linear.tk", "select-swizzle", "--target=sm_80")
    old = "st<bf16, 128, 64, swizzle=128"
    assert old in text
    ir = tmp_path / "linear.tkir"
    ir.write_text(text.replace(old, "st<bf16, 128, 64, swizzle=1", 1))
    rc, _, err = tkc(capsys, "opt", str(ir), "--target=sm_80", "--passes=bank-conflicts")
    assert rc == 1
    line, col, msg = located(err, ir)
    assert "swizzle=1 is not a swizzle span" in msg


def test_shared_memory_overflow_is_refused_before_lowering(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """2**18 mbarriers (2 MiB: under the parser's bound for absurd types) in IR text after plan-occupancy:
    the backend refuses the shared-memory plan before it lowers 262144 barrier inits. (The one-shot `once`
    array: made the ring `full`, whose stage is the iteration mod 2, the verifier refuses it first.)"""
    text = dump(capsys, "attention_fwd.tk", "pipeline", "-D", "D=64", "-D", "CAUSAL=1")
    ir = tmp_path / "attn.tkir"
    assert "%once = pipe.barriers {count = 1} : sv<i64, 1>" in text
    ir.write_text(text.replace("%once = pipe.barriers {count = 1} : sv<i64, 1>",
                               "%once = pipe.barriers {count = 1} : sv<i64, 262144>", 1))
    rc, _, err = tkc(capsys, "compile", str(ir), "--passes=persistent,canonicalize", "--emit", "ptx")
    assert rc == 1
    assert located(err, ir)[2].startswith("shared memory: the kernel's tiles need")
    ir.write_text(text.replace("sv<i64, 2>", "sv<i64, 262144>", 1))
    rc, _, err = tkc(capsys, "compile", str(ir), "--passes=persistent,canonicalize", "--emit", "ptx")
    assert rc == 1
    assert "in iteration 2 uses stage 0 of %full, but a 262144-stage ring holds iteration 2 in stage 2" in \
        located(err, ir)[2]


def test_non_integral_i32_constant_and_zero_warps(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`arith.const {value = nan} : i32` (ValueError converting NaN in the backend) and a kernel with
    `warps = 0` (ZeroDivisionError in plan-occupancy), both in IR text: located errors."""
    text = dump(capsys, "gemm.tk", "legalize-mma", "--target=sm_80")
    old = "%c0 = arith.const {value = 0} : i32"
    assert old in text
    ir = tmp_path / "gemm.tkir"
    ir.write_text(text.replace(old, "%c0 = arith.const {value = nan} : i32", 1))
    rest = "infer-layouts,select-swizzle,bank-conflicts,create-tma,plan-occupancy,pipeline,persistent,canonicalize"
    rc, _, err = tkc(capsys, "compile", str(ir), "--target=sm_80", f"--passes={rest}", "--emit", "ptx")
    assert rc == 1
    line, _, msg = located(err, ir)
    assert "'arith.const' of i32 holds an integer, not nan" in msg  # the verifier, before the backend
    assert "value = nan" in ir.read_text().splitlines()[line - 1]

    text = dump(capsys, "transpose.tk", "create-tma", "--target=sm_80")
    assert ", warps = " in text.splitlines()[0]
    ir.write_text(text.replace(text.splitlines()[0], re.sub(r"warps = \d+", "warps = 0", text.splitlines()[0]), 1))
    rc, _, err = tkc(capsys, "opt", str(ir), "--target=sm_80", "--passes=plan-occupancy")
    assert rc == 1
    assert located(err, ir)[0] == 1 and "0 threads per block" in err


@pytest.mark.parametrize("dim", ["-0.0", "1.0", "true"])
def test_block_id_dim_must_be_an_int(dim: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A long fuzz run: IR text with `tk.block_id {dim = -0.0}` passed the verifier (-0.0 == 0) and
    the backend indexed "xyz" with a float (TypeError). A float or bool dim is now a located error."""
    ir = tmp_path / "gemm.tkir"
    ir.write_text(dump(capsys, "gemm.tk", "canonicalize"))
    text = ir.read_text()
    assert "tk.block_id {dim = 1}" in text
    ir.write_text(text.replace("tk.block_id {dim = 1}", f"tk.block_id {{dim = {dim}}}", 1))
    rc, _, err = tkc(capsys, "compile", str(ir), "--emit", "ptx")
    line, _, msg = located(err, ir)
    assert rc == 1 and "needs dim = 0, 1 or 2" in msg
    assert "tk.block_id" in ir.read_text().splitlines()[line - 1]


@pytest.mark.parametrize("field, value, message", [
    ("threads", "9223372036854775808", "'threads' must be whole warps, at most 1024"),
    ("threads", "100", "'threads' must be whole warps"),
    ("blocks_per_sm", "33", "'blocks_per_sm' must be at most 32"),
    ("smem_bytes", "300000", "'smem_bytes' must be at most 232448"),
])
def test_occupancy_plan_limits(field: str, value: str, message: str, tmp_path: Path,
                               capsys: pytest.CaptureFixture) -> None:
    """A long fuzz run: an IR mutant of transpose (--no-tma, after plan-occupancy) wrote
    `threads = 9223372036854775808` into the occupancy plan; the cp.async rule's numpy address model took
    it as the block's thread count (TypeError in bitwise_xor). A plan whose threads, blocks per SM or
    shared memory no block can have is now a located error where the attribute is read."""
    ir = tmp_path / "transpose.tkir"
    text = dump(capsys, "transpose.tk", "plan-occupancy", "--target=sm_90a", "--no-tma")
    head = text.splitlines()[0]
    assert f"{field} = " in head
    ir.write_text(text.replace(head, re.sub(rf"{field} = \d+", f"{field} = {value}", head), 1))
    rc, _, err = tkc(capsys, "compile", str(ir), "--target=sm_90a", "--no-tma", "--emit", "ptx",
                     "--passes=pipeline,pipeline-cp-async,canonicalize")
    line, _, msg = located(err, ir)
    assert rc == 1 and line == 1 and message in msg, err


def test_module_without_a_kernel_is_a_located_error_at_the_backend(tmp_path: Path, capsys) -> None:
    """A fuzz run (seed 20261301, input 1376): attention's IR after create-tma, truncated to its
    tma.desc lines, went through the passes (nothing to rewrite) and raised a ValueError in the backend's
    launch description."""
    f = tmp_path / "descs_only.tkir"
    f.write_text('tma.desc @Q_tma {tensor = "Q", param = 0, dtype = "bf16", rank = 2, dims = [128, "N"], '
                 'strides = [256], box = [64, 64], elem_strides = [1, 1], swizzle = 128, l2_promotion = 128, '
                 'oob_fill = "zero"}\n')
    rc, out, err = tkc(capsys, "compile", str(f), REST, "--emit", "ptx")
    assert rc != 0 and "Traceback" not in err
    assert located(err, f) == (1, 1, "the backend compiles a module with exactly one tk.kernel; this one has 0")
    rc, out, err = tkc(capsys, "compile", str(f), REST, "--emit", "tkir")  # the passes alone are fine
    assert rc == 0, err


def test_col_vec_chunks_wider_than_the_vector(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A fuzz run (seed 20261901, input 2067): layernorm's IR after readonly-loads with Bias's
    layout `col_vec of row, vec = 9223372036854775808`: 0 chunks per part, and a ZeroDivisionError in the
    layout's fragment (plan-occupancy). A col_vec of row whose columns do not split into its chunks is now
    a located error at the value, as the row tile's own check was."""
    ir = tmp_path / "layernorm.tkir"
    text = dump(capsys, "layernorm.tk", "readonly-loads")
    old = "rv<bf16, 1024, layout={kind = col_vec, of = row, warps = 16, vec = 8}>"
    assert old in text
    ir.write_text(text.replace(old, old.replace("vec = 8", "vec = 9223372036854775808"), 1))
    rc, _, err = tkc(capsys, "compile", str(ir), "--emit", "ptx", "--passes=cluster-rows,plan-occupancy,canonicalize")
    line, _, msg = located(err, ir)
    assert rc == 1 and "does not fit rv<bf16, 1024>" in msg and "vec = 9223372036854775808" in msg, err
    assert "9223372036854775808" in ir.read_text().splitlines()[line - 1]


@pytest.mark.parametrize("value", ["0", "-1", "-2147483648", "2147483648", "9223372036854775808"])
def test_bad_size_of_run_is_reported_before_the_companion(value: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    """`tkc run K.tk --interpret --size N=V` with a size that is not a positive i32: the error names the
    option, even where K.tk has no companion .py (the fuzzer's param-limits inputs used to get "no
    companion" first)."""
    src = tmp_path / "k.tk"
    src.write_text((EXAMPLES / "softmax.tk").read_text())
    rc, _, err = tkc(capsys, "run", str(src), "--interpret", "--size", f"N={value}")
    assert rc == 1 and f"--size N={value}: a size is" in err and "companion" not in err, err
