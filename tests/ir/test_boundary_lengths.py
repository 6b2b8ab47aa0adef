"""Boundary lengths in the interpreter: each kernel at one under, at and one over a multiple of its tile
(rows per block for the row kernels, the chunk C for Based), through the default pipeline on both targets,
against the companions' references at each output's own bounds (tkir.tools.examples.compare). A mask or a
split bound off by one shows at exactly these lengths."""

from __future__ import annotations

import pytest

import tkir
from tkir.tools.examples import check_interpreted, load_companion

ROWS = 16  # the row kernels' default rows per block (tests/data/rows/softmax.tk etc.)
CHUNK = 64  # Based's chunk C (examples/based.tk)
CASES = [(name, {"N": n}, {"D": 256}) for name in ("softmax", "rmsnorm", "layernorm")
         for n in (ROWS - 1, ROWS, ROWS + 1, 3 * ROWS + 1)]
CASES += [("rotary", {"T": t}, {"D": 64}) for t in (ROWS - 1, ROWS + 1)]
CASES += [("based", {"B": 1, "H": 1, "N": n}, {}) for n in (CHUNK - 1, CHUNK + 1, 2 * CHUNK - 1)]


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize(("name", "sizes", "consts"), CASES,
                         ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in s.items())}" for n, s, _ in CASES])
def test_boundary_length(name: str, sizes: dict, consts: dict, target: str) -> None:
    path = f"tests/data/rows/{name}.tk" if name in ("softmax", "rmsnorm", "layernorm") else f"examples/{name}.tk"
    k = tkir.compile(path, target=target, **consts)
    for r in check_interpreted(k.module, load_companion(path), sizes, consts, seed=sum(sizes.values())):
        assert r.ok, f"{name} {sizes} on {target}: {r}"
