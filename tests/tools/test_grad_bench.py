"""scripts/bench/grad_kernels.py on the CPU (no torch, no GPU): its size entries, default rows and the softmax
backward's bar verdicts, so that a command that stops parsing fails here instead of on the device."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from tkir.tools.bench import Row
from tkir.tools.examples import load_companion

ROOT = Path(__file__).resolve().parents[2]


def _load() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("bench_grad_kernels", ROOT / "scripts" / "bench" / "grad_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


grad = _load()


def test_size_entries_split_sizes_from_constants() -> None:
    assert grad.cases("softmax_bwd", ["N=4096,D=4096", "N=65536,D=768,ROWS=4"]) == [
        ({"N": 4096}, {"D": 4096}), ({"N": 65536}, {"D": 768, "ROWS": 4})]
    assert grad.cases("linear_dgrad", ["M=8192,N=4096,K=14336,ACT=2"]) == [
        ({"M": 8192, "N": 4096, "K": 14336}, {"ACT": 2})]
    for bad in ("N4096", "N=x", "=3"):
        with pytest.raises(SystemExit, match="grad_kernels: size entry"):
            grad.parse_size(bad, {"D"})


@pytest.mark.parametrize("kernel", ["softmax_bwd", "linear_dgrad", "linear_wgrad"])
def test_default_rows_are_the_companions_bench_sizes(kernel: str) -> None:
    comp = load_companion(str(ROOT / "examples" / f"{kernel}.tk"))
    assert grad.cases(kernel, None) == list(zip(comp.BENCH_SIZES, comp.BENCH_CONSTS, strict=True))


def test_the_companion_bench_rows_include_the_bar_sizes() -> None:
    rows = [{"N": s["N"], "D": c.get("D")} for s, c in grad.cases("softmax_bwd", None)]
    assert all(b in rows for b in grad.BAR_SIZES)


def _row(n: int, d: int, ms: float, peer_ms: float) -> Row:
    return Row("softmax_bwd", {"N": n}, {"D": d}, "tkir", 1e-3, 2e-2, True, ms, peer_ms, "eager", 1, 1)


def test_bar_verdicts() -> None:
    rows = [_row(4096, 4096, 0.1, 0.12), _row(65536, 768, 0.2, 0.19), _row(16384, 1024, 0.1, 0.05)]
    got = grad.bar_verdicts(rows)
    assert [(w, round(r, 3), m) for w, r, m in got] == [("softmax_bwd 4096 x 4096", 1.2, True),
                                                        ("softmax_bwd 65536 x 768", 0.95, False)]
