"""Compile time grows linearly with program size (issue 14; docs/experiments.md, "Compile time").

The programs are scripts/compile_time.py's N sequential short loops (a register tile loaded and added
into an accumulator in each). A step that is quadratic in program size makes the work per IR op about
10x larger at N = 400 than at N = 40; linear steps keep it the same. The front end and the passes are
checked by the Python lines run per IR op (tests/work_count.py: load does not move it, as it moves time).

LLVM's code generator is not linear at optimisation level 3 (GVN, see tkir.backend.ptx): kernels above
O3_MAX_LLVM_LINES lines of LLVM IR are generated at level 2 (checked below), which kept its CPU time per line
within 2.5x from 40 to 400 loops. That growth is C++'s, which no Python count sees, and is measured by
scripts/compile_time.py, a benchmark, as every speed is.

The fixed cost of a small compile (`tkc compile examples/gemm.tk --emit ptx`, about 0.4 s) is mostly
imports; the checks at the top keep out of it what the command does not use.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from limits import HANG_S  # tests/ is on sys.path under pytest
from work_count import python_lines

import tkir
from tkir.ir import Module

ROOT = Path(__file__).resolve().parents[2]
SMALL, LARGE = 40, 400
SLACK = 1.25  # allowed growth of the Python lines run per op from SMALL to LARGE


@cache
def _script():  # noqa: ANN202 - the module object of scripts/compile_time.py
    spec = importlib.util.spec_from_file_location("compile_time", ROOT / "scripts" / "compile_time.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@cache
def _program(n: int, folder: Path) -> str:
    path = folder / f"loops{n}.tk"
    path.write_text(_script().loops_source(n), encoding="utf-8")
    return str(path)


def _ops(module: Module) -> int:
    return sum(1 for _ in module.walk())


def _front_to_llvm(path: str, target: str = "sm_90a", **consts: int) -> tuple[Module, str]:
    """The front end, the default pipeline (verifier and IR snapshots after every pass) and the LLVM IR."""
    from tkir.backend.launch import kernel_params
    from tkir.backend.lower_llvm import lower_kernel

    k = tkir.compile(path, target=target, **consts)
    ir, _ = lower_kernel(k.module, kernel_params(k.module), k.options.target)
    return k.module, ir


@cache
def _llvm_ir(path: str, target: str = "sm_90a", **consts: int) -> str:
    return _front_to_llvm(path, target, **consts)[1]


def _fresh_process(code: str, env: dict[str, str] | None = None) -> object:
    """Run `code` in a new interpreter (this one has long since imported everything); its last line of
    output is JSON, returned."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=HANG_S,
                          env={**os.environ, "TKIR_CACHE": "0", **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


# modules `tkc compile --emit ptx` does not use, with what does: ml_dtypes (the interpreter's and the
# runtime's dtype table, tkir.types.NUMPY_DTYPES, built on first use), difflib (frontend "did you mean"
# hints), the interpreter, the GPU runtime, the tuner, torch
NOT_ON_COMPILE_PATH = ("ml_dtypes", "difflib", "fractions", "tkir.interp", "tkir.backend.runtime",
                       "tkir.backend.cuda", "tkir.tools.tune", "tkir.tools.bench", "torch")


def test_compile_command_imports_only_what_it_uses(tmp_path: Path) -> None:
    """`tkc compile --emit ptx` loads only what it uses (docs/experiments.md, "Compile time")."""
    code = ("import json, sys\nfrom tkir.cli import main\n"
            f"rc = main(['compile', 'examples/gemm.tk', '--emit', 'ptx', '-o', {str(tmp_path / 'g.ptx')!r}])\n"
            f"loaded = [m for m in {NOT_ON_COMPILE_PATH!r} if m in sys.modules]\n"
            "from tkir.types import NUMPY_DTYPES\n"
            "print(json.dumps([rc, loaded, str(NUMPY_DTYPES['bf16']), 'ml_dtypes' in sys.modules]))")
    assert _fresh_process(code) == [0, [], "bfloat16", True]
    assert ".entry gemm" in (tmp_path / "g.ptx").read_text()


def test_import_tkir_loads_no_numpy() -> None:
    """numpy loads when the passes first need it, after tkc has chosen how OpenBLAS starts (below)."""
    code = "import json, sys\nimport tkir, tkir.cli\nprint(json.dumps('numpy' in sys.modules))"
    assert _fresh_process(code) is False


def test_tkc_compile_starts_lean(tmp_path: Path) -> None:
    """tkc compile as the program (tkir.cli.main() without arguments; tkir.cli ONE_SHOT_COMMANDS) imports
    numpy with OPENBLAS_NUM_THREADS=1, so no OpenBLAS thread starts and spins while the compile runs
    (a value set in the environment is kept), and runs without the cyclic garbage collector. Called from
    Python with arguments, main() changes neither."""
    argv = ["tkc", "compile", "examples/gemm.tk", "--emit", "ptx", "-o", str(tmp_path / "g.ptx")]
    code = ("import gc, json, os, sys\nfrom tkir.cli import main\n"
            f"sys.argv = {argv!r}\nrc = main()\n"
            "tasks = len(os.listdir('/proc/self/task')) if os.path.isdir('/proc/self/task') else 1\n"
            "print(json.dumps([rc, 'numpy' in sys.modules, os.environ.get('OPENBLAS_NUM_THREADS'), tasks, "
            "gc.isenabled()]))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=HANG_S,
                          env={**env, "TKIR_CACHE": "0"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == [0, True, "1", 1, False]  # one thread: the interpreter's
    assert _fresh_process(code, env={"OPENBLAS_NUM_THREADS": "2"})[2] == "2"
    in_python = code.replace("rc = main()", f"rc = main({argv[1:]!r})")
    proc = subprocess.run([sys.executable, "-c", in_python], capture_output=True, text=True, cwd=ROOT, timeout=HANG_S,
                          env={**env, "TKIR_CACHE": "0"})
    assert proc.returncode == 0, proc.stderr
    rc, _, blas, _, gc_on = json.loads(proc.stdout.splitlines()[-1])
    assert (rc, blas, gc_on) == (0, None, True)


def test_verifier_parses_each_size_expression_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verifier runs after every pass and re-reads the grid and the TMA dims and strides: their
    text is parsed once per process (tkir.symexpr), which was a sixth of the verifier's time on gemm."""
    import ast

    from tkir.symexpr import SymExprError, evaluate
    from tkir.verifier import verify

    k = tkir.compile(str(ROOT / "examples" / "gemm.tk"))
    parse = ast.parse
    calls: list[str] = []
    monkeypatch.setattr(ast, "parse", lambda src, *a, **kw: (calls.append(src), parse(src, *a, **kw))[1])
    verify(k.module)
    assert calls == []
    for _ in range(2):  # an expression that does not parse is not remembered: it fails every time
        with pytest.raises(SymExprError, match="bad size expression"):
            evaluate("M +", {"M": 1})
    assert calls == ["M +", "M +"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("compile_time")


def test_front_end_passes_and_llvm_ir_are_linear(folder: Path) -> None:
    _front_to_llvm(_program(4, folder))  # warm up: grammar tables, imports
    per_op = {}
    for n in (SMALL, LARGE):
        path = _program(n, folder)
        module, _ = _front_to_llvm(path)
        per_op[n] = python_lines(lambda p=path: _front_to_llvm(p)) / _ops(module)
    growth = per_op[LARGE] / per_op[SMALL]
    assert growth <= SLACK, (f"Python lines run per IR op grew {growth:.2f}x from {SMALL} to {LARGE} loops "
                             f"({per_op[SMALL]:.0f} -> {per_op[LARGE]:.0f}): a step is super-linear "
                             f"(profile with scripts/compile_time.py)")


def test_examples_are_generated_at_level_3_and_large_kernels_at_2(folder: Path) -> None:
    """The largest configuration of scripts/ptx_md5.py when this was written (causal attention, D = 128,
    on sm_80: 5,532 lines) is far below the threshold; 400 loops (126,700 lines) are above it."""
    from tkir.backend.ptx import O3_MAX_LLVM_LINES, codegen_level

    ir = _llvm_ir(str(ROOT / "examples" / "attention_fwd.tk"), "sm_80", D=128, CAUSAL=1)
    assert ir.count("\n") * 5 < O3_MAX_LLVM_LINES and codegen_level(ir) == 3
    assert codegen_level(_llvm_ir(_program(LARGE, folder))) == 2


