"""The integer examples (embedding.tk, argmax.tk, cross_entropy.tk) against their companions' references.

Each is compiled through the default pipeline on both targets and run in the numpy interpreter at its
companion's CHECK_SIZES (ragged row counts, rows walked in several chunks with a ragged tail). A deliberately
wrong variant of each must fail its check, so the companions' inputs can tell: argmax.tk merging chunks with
`<` (a tie across chunks would go to the later one), embedding.tk gathering the next row, cross_entropy.tk
without its IGNORE rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir
from tkir.interp import InterpError
from tkir.tools.examples import check_interpreted, load_companion

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ["embedding", "argmax", "cross_entropy"]
TARGETS = ["sm_90a", "sm_80"]


def _cases() -> list:
    out = []
    for name in NAMES:
        comp = load_companion(str(EXAMPLES / f"{name}.tk"))
        assert len(comp.CHECK_SIZES) == len(comp.CHECK_CONSTS) >= 2
        for i, (sizes, consts) in enumerate(zip(comp.CHECK_SIZES, comp.CHECK_CONSTS, strict=True)):
            for target in TARGETS:
                out.append(pytest.param(name, sizes, consts, target, id=f"{name}-{i}-{target}"))
    return out


@pytest.mark.parametrize(("name", "sizes", "consts", "target"), _cases())
def test_example_matches_reference(name: str, sizes: dict, consts: dict, target: str) -> None:
    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    k = tkir.compile(str(EXAMPLES / comp.KERNEL), target=target, **consts)
    results = check_interpreted(k.module, comp, sizes, consts, seed=0)
    assert results
    for r in results:
        assert r.ok, str(r)


@pytest.mark.parametrize(("name", "old", "new"), [
    ("argmax", "where(v <= best, arg, a + c * VC)", "where(v < best, arg, a + c * VC)"),
    ("embedding", "reg e: rt<bf16, ROWS, DC> = Table[ids, block.y]", "reg e: rt<bf16, ROWS, DC> = Table[ids + 1, block.y]"),
    ("cross_entropy", "where(label == IGNORE, 0.0, lse - row_sum(picked))", "lse - row_sum(picked)"),
])
def test_wrong_kernel_fails_check(tmp_path: Path, name: str, old: str, new: str) -> None:
    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    source = (EXAMPLES / comp.KERNEL).read_text()
    assert old in source
    sizes, consts = comp.CHECK_SIZES[0], comp.CHECK_CONSTS[0]
    wrong = tmp_path / comp.KERNEL
    wrong.write_text(source.replace(old, new))
    module = tkir.compile(str(wrong), **consts).module
    try:
        results = check_interpreted(module, comp, sizes, consts, seed=0)
    except InterpError as e:  # the shifted gather reads past the table: refused, which also tells
        assert name == "embedding" and "is outside the 37 rows of %Table" in str(e)
        return
    assert not all(r.ok for r in results), [str(r) for r in results]
