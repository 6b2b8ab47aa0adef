"""Run one conformance case: compile (front end + passes), lower to PTX, assemble, interpret, compare.

The outcome says WHO stopped a case, because that is what decides whether it is a bug:
* `works`: PTX came out, ptxas assembled it, and the interpreter (on the IR after every pass)
  matches the numpy reference;
* `refused`: the front end or a pass raised a located `file:line:col: error:` before the backend
  ran -- the compiler knows it cannot do this and says where;
* `backend-failure`: everything else -- the backend raised (LoweringError, "no lowering rule",
  a located error too: the passes let the kernel through), ptxas rejected the PTX, anything raised
  a non-CompileError, a refusal was not located, or the interpreter disagrees with numpy.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from conformance.cases import TOLERANCE, Case, expected, global_params, kernel_source, make_inputs

WORKS, REFUSED, BACKEND_FAILURE = "works", "refused", "backend-failure"
# An absolute error floor, as a fraction of the largest |reference|: a sum or a dot product rounds on
# the scale of its terms, not of its (possibly tiny) result.
SCALE_FLOOR = 0.1
LOCATED = re.compile(r"^\S+:\d+:\d+: error: ")


@dataclass
class Outcome:
    status: str
    message: str = ""      # the refusal or the failure, first line (location stripped for the table)
    detail: str = ""       # the full text: traceback, diagnostic, mismatch summary
    outputs: dict | None = None  # the interpreter's outputs (works only), for the GPU test
    kernel: object = None        # the CompiledKernel (works only), for the GPU test
    inputs: dict | None = None   # the arrays given to the interpreter, outputs NaN (works only)

    @property
    def first_line(self) -> str:
        return self.message.splitlines()[0] if self.message else ""


@contextlib.contextmanager
def _no_cache() -> Iterator[None]:
    """The backend's disk cache off: every case must really run LLVM and ptxas."""
    old = os.environ.get("TKIR_CACHE")
    os.environ["TKIR_CACHE"] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TKIR_CACHE", None)
        else:
            os.environ["TKIR_CACHE"] = old


def _strip_location(text: str) -> str:
    """'path:3:5: error: msg' -> '3:5: msg' (temp paths differ between runs)."""
    first = text.splitlines()[0] if text else ""
    m = re.match(r"^\S+?:(\d+):(\d+): error: (.*)$", first)
    return f"{m[1]}:{m[2]}: {m[3]}" if m else first


def compile_case(case: Case, tmp: str, header: str = "") -> tuple[object, str]:
    """(CompiledKernel, source): the front end and the passes, no backend yet. `header`: lines put before
    the kernel (kernel annotations, e.g. "@warps(2)\n")."""
    import tkir

    source = header + kernel_source(case)
    path = Path(tmp) / f"{case.construct.name}.tk"
    path.write_text(source, encoding="utf-8")
    return tkir.compile(str(path), target=case.target), source


def run_case(case: Case, target: str | None = None, header: str = "") -> Outcome:
    """The outcome of one case on its target (or on `target`, overriding the case's); `header` as in
    compile_case."""
    from tkir.diagnostics import CompileError

    if target is not None and target != case.target:
        case = Case(case.construct, case.context, case.dtype, target)
    with tempfile.TemporaryDirectory(prefix="tkir-conf-") as tmp, _no_cache():
        try:
            k, source = compile_case(case, tmp, header)
        except CompileError as e:
            text = e.format()
            if LOCATED.match(text):
                return Outcome(REFUSED, _strip_location(text), text)
            return Outcome(BACKEND_FAILURE, f"unlocated refusal: {e.message}", text)
        except Exception as e:  # a crash in the front end or a pass is a bug too
            return Outcome(BACKEND_FAILURE, f"{type(e).__name__} before the backend: {e} ({_where(e)})",
                           traceback.format_exc())
        try:
            _assemble(k, case.target)
        except Exception as e:
            text = e.format() if isinstance(e, CompileError) else f"{type(e).__name__}: {e} ({_where(e)})"
            return Outcome(BACKEND_FAILURE, _strip_location(text) if isinstance(e, CompileError) else text,
                           traceback.format_exc())
        return _check_interpreter(case, k, source)


def _where(e: BaseException) -> str:
    """'passes/pipeline.py:123' -- where a crash happened, so an empty message still says something."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return "?"
    f = frames[-1]
    return f"{'/'.join(f.filename.split('/')[-2:])}:{f.lineno}"


def _assemble(k: object, target: str) -> None:
    """ptxas on the kernel's PTX: the backend's spill check ran it already where it kept its report
    (`asm["ptxas"]`); else (no spill check, or a register cap ptxas refused) it runs here."""
    from tkir.backend.toolchain import Assembled, assemble

    if not isinstance(k.asm["ptxas"], Assembled):  # type: ignore[attr-defined]
        assemble(k.asm["ptx"], target)  # type: ignore[attr-defined]


def _check_interpreter(case: Case, k: object, source: str) -> Outcome:
    import tkir

    names, arrays = make_inputs(case, source)
    given = {n: a.copy() for n, a in arrays.items()}
    want = expected(case, arrays)
    try:
        tkir.interpret(k, *(arrays[n] for n in names))  # type: ignore[arg-type]
    except Exception as e:
        return Outcome(BACKEND_FAILURE, f"interpreter: {type(e).__name__}: {e}", traceback.format_exc())
    outputs = {n: arrays[n] for n in want}
    # each output at the tolerance of its own dtype (the GEMM output G is bf16 in every case)
    dtypes = {name: dt for name, dt, _ in global_params(source)}
    bad = [mismatch(n, outputs[n], want[n], TOLERANCE[dtypes.get(n, case.dtype)]) for n in want]
    bad = [b for b in bad if b]
    if bad:
        return Outcome(BACKEND_FAILURE, f"interpreter mismatch: {bad[0]}", "\n".join(bad))
    return Outcome(WORKS, outputs=outputs, kernel=k, inputs=given)


def mismatch(name: str, got: np.ndarray, want: np.ndarray, rtol: float) -> str:
    """'' when got matches want within rtol (relative, with an absolute floor scaled by the
    output's magnitude, because a rounding in a sum lands on the sum's scale); else a summary."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, want {want.shape}"
    finite = np.isfinite(want)
    scale = float(np.max(np.abs(want[finite]), initial=1.0))
    with np.errstate(invalid="ignore"):  # inf - inf where an infinite result is checked by equality
        ok = np.where(finite, np.abs(got - want) <= rtol * (np.abs(want) + SCALE_FLOOR * scale), got == want)
    if ok.all():
        return ""
    idx = tuple(int(i) for i in np.argwhere(~ok)[0])
    return f"{name}: {int((~ok).sum())} of {ok.size} elements differ, first at {idx}: {got[idx]} vs {want[idx]}"
