"""Long straight-line kernels compile in time linear in their length, and the verifier and the IR
snapshots cost nothing for what did not change (docs/experiments.md, "Compile time").

Nothing here reads a clock: the work is counted (checks run, IR printed, Python lines executed). Time
per op is a benchmark's business (scripts/compile_time.py): on a loaded or small-cache machine it grew
1.7-1.8x from 300 to 1200 statements with no change in the work done.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
from functools import cache
from pathlib import Path

import pytest
from work_count import python_lines  # tests/ is on sys.path under pytest

import tkir
from tkir.ops import OPS
from tkir.passmanager import PipelineConfig
from tkir.types import Ident
from tkir.verifier import VerifyError, verify

ROOT = Path(__file__).resolve().parents[2]
SMALL, LARGE = 300, 1200  # statements
SLACK = 1.25  # allowed growth of the Python lines run per IR op from SMALL to LARGE statements (quadratic: ~4x)


@cache
def _script():  # noqa: ANN202 - the module object of scripts/compile_time.py
    spec = importlib.util.spec_from_file_location("compile_time", ROOT / "scripts" / "compile_time.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write(folder: Path, n: int, mixed: bool = False) -> str:
    script = _script()
    path = folder / f"{'mixed' if mixed else 'line'}{n}.tk"
    path.write_text(script.straight_source(n, script.MIXED_KINDS if mixed else script.STRAIGHT_KINDS))
    return str(path)


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """Replace op `name`'s checker by one that records each call."""
    calls: list[str] = []
    d = OPS[name]

    def check(op: object) -> None:
        calls.append(name)
        d.check(op)

    monkeypatch.setitem(OPS, name, dataclasses.replace(d, check=check))
    return calls


def test_verifier_rechecks_only_what_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k = tkir.compile(_write(tmp_path, 40))
    adds = [op for op in k.module.walk() if op.name == "tk.add"]
    calls = _counting(monkeypatch, "tk.add")
    verify(k.module)
    assert calls == []  # checked after the last pass, unchanged since
    adds[5].attrs["bcast"] = Ident("diag")  # an attribute changed in place: checked again, and wrong
    with pytest.raises(VerifyError, match="bcast must be row or col"):
        verify(k.module)
    del adds[5].attrs["bcast"]
    calls.clear()
    verify(k.module)
    assert calls == []  # as it was when last checked
    adds[6].attrs["contract"] = not adds[6].attrs.get("contract")  # a valid change
    verify(k.module)
    assert calls == ["tk.add"]  # that op alone
    good = adds[7].result.type
    adds[7].result.type = good.with_dtype("bf16")  # a result type replaced
    with pytest.raises(VerifyError, match="must have the operands' dtype"):
        verify(k.module)
    adds[7].result.type = good
    adds[9].operands[0] = adds[9].operands[1] = k.module.kernel.body.args[0]  # an operand replaced (a gl)
    with pytest.raises(VerifyError, match="tk.add"):
        verify(k.module)


def test_mutable_attributes_are_checked_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An attribute value that can change in place (a list, a dict) gives no key: the check always runs."""
    k = tkir.compile(_write(tmp_path, 10))
    add = next(op for op in k.module.walk() if op.name == "tk.add")
    add.attrs["note"] = [1]
    calls = _counting(monkeypatch, "tk.add")
    verify(k.module)
    verify(k.module)
    assert calls == ["tk.add", "tk.add"]  # that op, in each run; the other adds are unchanged


def test_snapshots_only_when_kept_or_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tkc (keep_snapshots=False) prints the IR once, at the end; --print-after prints that pass's IR."""
    import tkir.api
    import tkir.passmanager

    printed: list[int] = []
    real = tkir.passmanager.print_module
    monkeypatch.setattr(tkir.passmanager, "print_module", lambda m: (printed.append(1), real(m))[1])
    path = _write(tmp_path, 20)
    k = tkir.compile(path)  # the API keeps them: ir_after answers for every pass
    assert len(printed) == len(k.pipeline) and "tk.add" in k.ir_after("fold-scale")
    printed.clear()
    out = io.StringIO()
    k = tkir.compile(path, config=PipelineConfig(keep_snapshots=False, print_after=("fold-scale",)), out=out)
    assert len(printed) == 1 and "IR Dump After fold-scale" in out.getvalue()
    with pytest.raises(KeyError, match="not kept"):
        k.ir_after("contract-fma")
    with pytest.raises(KeyError, match="did not run"):
        k.ir_after("no-such-pass")


def test_cli_compile_prints_no_snapshots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tkir.passmanager
    from tkir.cli import main

    printed: list[int] = []
    real = tkir.passmanager.print_module
    monkeypatch.setattr(tkir.passmanager, "print_module", lambda m: (printed.append(1), real(m))[1])
    assert main(["compile", _write(tmp_path, 20), "--emit", "tkir", "-o", str(tmp_path / "k.tkir")]) == 0
    assert printed == [] and "tk.add" in (tmp_path / "k.tkir").read_text()


def _front_to_llvm_ir(path: str) -> int:
    """Front end, the default pipeline as tkc runs it (verifier after every pass), LLVM IR text; the op count."""
    from tkir.backend.launch import kernel_params
    from tkir.backend.lower_llvm import lower_kernel

    k = tkir.compile(path, config=PipelineConfig(keep_snapshots=False))
    lower_kernel(k.module, kernel_params(k.module), k.options.target)
    return sum(1 for _ in k.module.walk())


def _growth(folder: Path, mixed: bool) -> tuple[float, dict[int, float]]:
    _front_to_llvm_ir(_write(folder, 8, mixed))  # warm up: imports, grammar tables, caches
    per_op = {}
    for n in (SMALL, LARGE):
        path = _write(folder, n, mixed)
        ops = _front_to_llvm_ir(path)
        per_op[n] = python_lines(lambda p=path: _front_to_llvm_ir(p)) / ops
    return per_op[LARGE] / per_op[SMALL], per_op


@pytest.mark.parametrize("mixed", [False, True], ids=["multiply-add", "mixed"])
def test_straight_line_compile_is_linear(tmp_path: Path, mixed: bool) -> None:
    """The Python work per IR op to reach LLVM IR does not grow with the kernel's length."""
    growth, per_op = _growth(tmp_path, mixed)
    assert growth <= SLACK, (f"Python lines run per IR op grew {growth:.2f}x from {SMALL} to {LARGE} statements "
                             f"({per_op[SMALL]:.0f} -> {per_op[LARGE]:.0f}): a step is super-linear "
                             f"(python3 scripts/compile_time.py --straight N,4N shows which)")


def test_a_quadratic_step_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The measure can fail: one step that compares every op with every other makes the work per op grow."""
    import tkir.backend.launch

    real = tkir.backend.launch.kernel_params

    def quadratic(module, *args, **kwargs):  # noqa: ANN001, ANN202
        ops = list(module.walk())
        for op in ops:
            for other in ops:
                op is other  # noqa: B015 - the work itself
        return real(module, *args, **kwargs)

    monkeypatch.setattr(tkir.backend.launch, "kernel_params", quadratic)
    growth, _ = _growth(tmp_path, mixed=False)
    assert growth > SLACK
