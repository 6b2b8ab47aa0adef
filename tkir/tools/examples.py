"""Example companions and the interpreter check: does a compiled kernel compute its reference?

Every kernel `examples/<name>.tk` has a companion `examples/<name>.py` beside it, a plain module
(loaded by path, not installed) that defines:

    KERNEL = "gemm.tk"             the source beside it
    PARAMS = ["A", "B", "C"]       kernel parameter order
    OUTPUTS = ["C"]                parameters the kernel writes
    CHECK_SIZES, CHECK_CONSTS      small sizes (and per-size -D overrides) for the interpreter
    BENCH_SIZES, BENCH_CONSTS      large sizes for the GPU
    PEER = "torch.matmul"          what the GPU benchmark compares against
    make_inputs(rng, sizes, consts) -> list[np.ndarray]     every parameter; outputs poisoned with NaN
    reference(inputs, sizes, consts) -> {output: float64 array}
    flops(sizes, consts), bytes_moved(sizes, consts)       each input read once, each output written once
    TOLERANCE                      bound on ||out - ref|| / ||ref||: one number, or one per output
                                   ({"O": 2e-2, "L": 1e-5}: an f32 output at an f32 bound)
    ELEMENT_TOLERANCE (optional)   bound on max|out - ref| / max|ref|, one number or one per output
                                   (default: the output's TOLERANCE): one element far off fails even
                                   where the norm hides it

`check_interpreted` runs a compiled module on fresh random inputs in the reference interpreter
and compares every output with the companion's reference.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tkir.api import CompiledKernel
from tkir.diagnostics import CompileError
from tkir.interp import NUM_SMS, interpret
from tkir.ir import Module

# What a companion must define (checked on load, so a broken companion fails with its name).
COMPANION_NAMES = ("KERNEL", "PARAMS", "OUTPUTS", "CHECK_SIZES", "CHECK_CONSTS", "BENCH_SIZES", "PEER",
                   "make_inputs", "reference", "flops", "bytes_moved", "TOLERANCE")


@dataclass
class CheckResult:
    output: str
    rel_err: float
    bound: float
    ok: bool
    max_err: float = 0.0  # max|out - ref| / max|ref|
    max_bound: float = float("inf")

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "FAIL"
        return (f"{self.output}: rel_err {self.rel_err:.3e} (bound {self.bound:.1e}), max_err {self.max_err:.3e} "
                f"(bound {self.max_bound:.1e}) {verdict}")


def _per_output(value: float | dict, output: str, what: str) -> float:
    if isinstance(value, dict):
        if output not in value:
            raise KeyError(f"the companion's {what} has no bound for output '{output}' ({', '.join(value)})")
        return float(value[output])
    return float(value)


def tolerance(companion: types.ModuleType, output: str) -> float:
    """The bound on ||out - ref|| / ||ref|| for `output` (TOLERANCE: one number or one per output)."""
    return _per_output(companion.TOLERANCE, output, "TOLERANCE")


def element_tolerance(companion: types.ModuleType, output: str) -> float:
    """The bound on max|out - ref| / max|ref| for `output` (ELEMENT_TOLERANCE, else its TOLERANCE)."""
    value = getattr(companion, "ELEMENT_TOLERANCE", None)
    return tolerance(companion, output) if value is None else _per_output(value, output, "ELEMENT_TOLERANCE")


def compare(companion: types.ModuleType, output: str, out: np.ndarray, ref: np.ndarray) -> CheckResult:
    """`out` against `ref` at the output's two bounds (norm and element); NaN anywhere fails."""
    err, bound = relative_error(out, ref), tolerance(companion, output)
    max_err, max_bound = max_error(out, ref), element_tolerance(companion, output)
    ok = bool(np.isfinite(err) and err <= bound and np.isfinite(max_err) and max_err <= max_bound)
    return CheckResult(output, err, bound, ok, max_err, max_bound)


def worst(companion: types.ModuleType, errs: dict[str, float]) -> tuple[float, float, bool]:
    """Of per-output norm errors: the error and bound of the output nearest its bound (or furthest past
    it), and whether every output is within its own bound."""
    ratios = {o: (e / tolerance(companion, o) if tolerance(companion, o) > 0 else (0.0 if e == 0 else np.inf))
              for o, e in errs.items()}
    o = max(ratios, key=lambda k: ratios[k])
    ok = all(np.isfinite(e) and e <= tolerance(companion, k) for k, e in errs.items())
    return errs[o], tolerance(companion, o), ok


def load_companion(tk_path: str) -> types.ModuleType:
    """The companion module of a kernel source: examples/gemm.tk -> examples/gemm.py."""
    py = Path(tk_path).with_suffix(".py")
    if not py.is_file():
        raise CompileError(None, f"no companion '{py}' for '{tk_path}'",
                           hint="a companion defines make_inputs, reference, CHECK_SIZES, ... "
                                "(see tkir/tools/examples.py)")
    spec = importlib.util.spec_from_file_location(f"tkir_example_{py.stem}", py)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    missing = [n for n in COMPANION_NAMES if not hasattr(mod, n)]
    if missing:
        raise CompileError(None, f"companion '{py}' lacks {', '.join(missing)}")
    return mod


def load_module(path: str | Path, name: str | None = None) -> types.ModuleType:
    """The Python file at `path` as a module named `name` (default: the file's stem), loaded once per process:
    registered in sys.modules before it runs, as a module that defines dataclasses must be (they look their
    module up), and returned from there afterwards (examples/attention_autograd.py for its benches, tests and
    examples/train_transformer.py)."""
    name = name or Path(path).stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise CompileError(None, f"cannot load '{path}' as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]  # a half-run module is not left behind for the next caller
            raise
    return sys.modules[name]


def reuse_companion(namespace: dict, path: str | Path, **overrides: object) -> None:
    """Define in `namespace` (a companion's `globals()`) everything the companion at `path` defines, then
    `overrides`: the companion of a variant kernel (scripts/bench/gemm_wg.py) in a few lines. The other
    companion's code runs in this namespace, so its functions read the overridden constants (a variant
    with other DEFAULT_CONSTS gets references computed with them)."""
    src = Path(path)
    keep = {k: namespace[k] for k in ("__name__", "__doc__", "__file__") if k in namespace}
    exec(compile(src.read_text(), str(src), "exec"), namespace)  # noqa: S102 - a companion file of this repo
    namespace.update(keep)
    namespace.update(overrides)


def check_interpreted(module: Module | CompiledKernel, companion: types.ModuleType, sizes: dict, consts: dict,
                      seed: int | None = None, num_sms: int = NUM_SMS) -> list[CheckResult]:
    """Interpret `module` on fresh random inputs; compare each output with the reference.

    A compiled kernel runs as tkir.interpret runs it: its variant with narrower pieces where its vector
    pieces do not fit the inputs' rows (CompiledKernel.unaligned_piece). `seed` None draws fresh inputs
    every call. An output holding NaN (e.g. never written: outputs start poisoned) fails.
    """
    rng = np.random.default_rng(seed)
    inputs = companion.make_inputs(rng, sizes, consts)
    expected = companion.reference(inputs, sizes, consts)
    if isinstance(module, CompiledKernel):
        piece = module.unaligned_piece(*inputs)
        module = (module if piece is None else module.variant(piece)).module
    interpret(module, *inputs, sizes=dict(sizes), num_sms=num_sms)
    results = []
    for name in companion.OUTPUTS:
        out = inputs[companion.PARAMS.index(name)].astype(np.float64)
        results.append(compare(companion, name, out, expected[name]))
    return results


def max_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max|out - ref| / max|ref| in float64 (NaN if `out` holds NaN; max|out - ref| where ref is all 0)."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} differs from the reference's {ref.shape}")
    if out.size == 0:
        return 0.0
    top = float(np.max(np.abs(ref)))
    diff = float(np.max(np.abs(out - ref)))
    return diff / top if top > 0 else diff


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64 (NaN if `out` holds NaN)."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} differs from the reference's {ref.shape}")
    den = np.linalg.norm(ref)
    num = np.linalg.norm(out - ref)
    return float(num / den) if den > 0 else float(num)

