"""The row kernels written with two consts (scripts/bench/row_plain/: D and ROWS=auto, no schedule annotation;
the compiler chooses the rows per block and the warps) against the examples' float64 references in the
interpreter, at ragged row counts and the widths the row sweep times. docs/experiments.md, "Row kernels with two
consts", times them against the examples at their tuned points."""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir
from tkir.tools.examples import check_interpreted, load_companion

ROOT = Path(__file__).resolve().parents[2]
PLAIN = ROOT / "scripts" / "bench" / "row_plain"
CASES = [(name, n, d) for name in ("layernorm", "rmsnorm", "softmax") for n, d in ((37, 768), (5, 4096), (3, 16384))]


@pytest.mark.parametrize("name, n, d", CASES, ids=[f"{c[0]}-{c[1]}x{c[2]}" for c in CASES])
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_plain_row_kernel_matches_reference(name: str, n: int, d: int, target: str) -> None:
    comp = load_companion(str(ROOT / "examples" / f"{name}.tk"))
    k = tkir.compile(str(PLAIN / f"{name}.tk"), target=target, sizes={"N": n}, D=d)
    results = check_interpreted(k.module, comp, {"N": n}, {"D": d}, seed=n)
    assert all(r.ok for r in results), [str(r) for r in results]


def test_declares_at_most_three_consts() -> None:
    for tk in sorted(PLAIN.glob("*.tk")):
        header = next(line for line in tk.read_text().splitlines() if line.startswith("kernel "))
        consts = header[header.index("<") + 1:header.index(">")].split(",")
        assert len(consts) <= 3, f"{tk.name}: {consts}"
        assert "@warpgroups" not in tk.read_text() and "@blocks_per_sm" not in tk.read_text()
