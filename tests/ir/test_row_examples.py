"""The row examples (examples/layernorm.tk, rmsnorm.tk, softmax.tk) are written with two consts, D and ROWS=auto,
and no schedule annotation: the compiler chooses the rows per block, the warps, the blocks per SM and where the
loads go. Here: each against its float64 reference in the interpreter at ragged row counts and the widths the row
sweep times, on both targets, and the header holds at most three consts and no schedule annotation (issue 44's
bar). docs/experiments.md, "The row examples with two consts", times them against their knob versions
(tests/data/rows/) at the consts the last sweep tuned."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkir
from tkir.tools.examples import check_interpreted, load_companion

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("layernorm", "rmsnorm", "softmax")
CASES = [(name, n, d) for name in NAMES for n, d in ((37, 768), (5, 4096), (3, 16384))]
# annotations that pin a schedule decision (docs/language.md, "Annotations"); @tune only lists candidates
SCHEDULE_ANNOTATIONS = ("warpgroups", "warps", "blocks_per_sm", "cluster", "hoist_loads", "fence_loads",
                        "stages", "persistent", "stream_k", "passes")


@pytest.mark.parametrize("name, n, d", CASES, ids=[f"{c[0]}-{c[1]}x{c[2]}" for c in CASES])
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_row_example_matches_reference(name: str, n: int, d: int, target: str) -> None:
    path = str(ROOT / "examples" / f"{name}.tk")
    k = tkir.compile(path, target=target, sizes={"N": n}, D=d)
    results = check_interpreted(k.module, load_companion(path), {"N": n}, {"D": d}, seed=n)
    assert all(r.ok for r in results), [str(r) for r in results]


@pytest.mark.parametrize("name", NAMES)
def test_declares_at_most_three_consts_and_no_schedule(name: str) -> None:
    text = (ROOT / "examples" / f"{name}.tk").read_text()
    header = next(line for line in text.splitlines() if line.startswith("kernel "))
    consts = header[header.index("<") + 1:header.index(">")].split(",")
    assert len(consts) <= 3, consts
    code = "\n".join(line.split("//")[0] for line in text.splitlines())
    used = set(re.findall(r"@(\w+)", code))
    assert used <= {"tune"}, used
    assert not used & set(SCHEDULE_ANNOTATIONS)
