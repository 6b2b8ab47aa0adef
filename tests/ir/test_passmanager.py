"""The pass manager through `tkc opt`: dumps, stop-after, unknown passes, --load-pass, timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # tests/

DATA = TESTS / "data"
GEMM = str(DATA / "gemm_tk.tkir")


def tkc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tkir.cli", *args], capture_output=True, text=True)


def test_print_after_all_one_dump_per_pass() -> None:
    r = tkc("opt", GEMM, "--passes=canonicalize,verify,canonicalize", "--print-after-all")
    assert r.returncode == 0, r.stderr
    heads = [ln for ln in r.stdout.splitlines() if ln.startswith("// -----// IR Dump After")]
    assert heads == ["// -----// IR Dump After canonicalize //----- //",
                     "// -----// IR Dump After verify //----- //",
                     "// -----// IR Dump After canonicalize //----- //"]


def test_print_after_and_stop_after() -> None:
    r = tkc("opt", GEMM, "--passes=verify,canonicalize,verify", "--print-after=canonicalize",
            "--stop-after=canonicalize")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("IR Dump After") == 1


def test_no_passes_prints_ir_unchanged() -> None:
    r = tkc("opt", GEMM)
    text = Path(GEMM).read_text()
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("//")) + "\n"
    assert r.stdout == body


def test_unknown_pass_and_flag_are_clear_errors() -> None:
    r = tkc("opt", GEMM, "--passes=canonicalize,frobnicate")
    assert r.returncode == 1 and "error: unknown pass 'frobnicate'" in r.stderr
    assert "Traceback" not in r.stderr
    r = tkc("opt", GEMM, "--frobnicate")
    assert r.returncode == 2 and "unrecognized arguments: --frobnicate" in r.stderr


def test_load_pass_registers_a_research_pass() -> None:
    r = tkc("opt", GEMM, f"--load-pass={DATA / 'my_pass.py'}", "--passes=rename-shared")
    assert r.returncode == 0, r.stderr
    assert "%smem_a = tk.alloc" in r.stdout and "tk.load %smem_a, %A" in r.stdout


def test_time_passes_reports_each_pass() -> None:
    r = tkc("opt", GEMM, "--passes=canonicalize,verify", "--time-passes")
    assert r.returncode == 0
    assert "canonicalize" in r.stderr and "Total" in r.stderr


def test_a_crashing_research_pass_is_an_error_naming_it() -> None:
    r = tkc("opt", GEMM, f"--load-pass={DATA / 'crashing_pass.py'}", "--passes=boom")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: pass 'boom' (tkir_user_pass_crashing_pass) raised ValueError: something broke")
