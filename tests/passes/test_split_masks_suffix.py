"""split-masks{suffix=true} on the causal attention backward (examples/attention_bwd.tk): the loop over query
blocks is split where the causal mask stops masking (the diagonal blocks first, masked; the rest without the
mask), and the kernel still computes dK, dV and dQ in the interpreter against the float64 reference, at ragged
N, D = 64 and 128, on both targets; the non-causal kernel (no mask) and the default (off) are unchanged."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkir
from tkir.tools.examples import check_interpreted, load_companion

PATH = Path(__file__).resolve().parents[2] / "examples" / "attention_bwd.tk"
COMP = load_companion(str(PATH))
EDIT = "split-masks{suffix=true}"
TILES = {128: {"BQ": 64, "BKV": 128, "WG": 2}, 64: {"D": 64, "BQ": 64, "BKV": 64, "WG": 1}}


def _consumer_loops(ir: str) -> list[str]:
    """The consumer role's scf.for headers."""
    role = ir[ir.index("tk.role {kind = consumer"):] if "tk.role {kind = consumer" in ir else ir
    return re.findall(r"= scf\.for [^\n]*", role)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("d", [128, 64])
@pytest.mark.parametrize("n", [200, 65])
def test_split_causal_backward_matches_float64(target: str, d: int, n: int) -> None:
    # sm_90a at the bench tiles; sm_80 at the tiles `auto` chooses there (two consumer warpgroups are sm_90a's)
    consts = {**(TILES[d] if target == "sm_90a" else {"D": d}), "CAUSAL": 1}
    k = tkir.compile(str(PATH), target=target, pass_edits=EDIT, **consts)
    loops = _consumer_loops(k.ir)
    assert len(loops) == 2 and "%split" in loops[1], loops  # the masked diagonal blocks, then the rest
    results = check_interpreted(k.module, COMP, dict(B=1, H=2, N=n), consts, seed=n + d)
    assert all(r.ok for r in results), [str(r) for r in results]


def test_only_the_first_loop_masks() -> None:
    ir = tkir.compile(str(PATH), pass_edits=EDIT, **TILES[128], CAUSAL=1).ir
    second = ir[ir.index("scf.for %split"):]
    first = ir[ir.index("tk.role {kind = consumer"):ir.index("scf.for %split")]
    assert "tk.select" in first and "tk.select" not in second.split("scf.yield")[0]


@pytest.mark.parametrize("consts", [{**TILES[128], "CAUSAL": 0}, {**TILES[64], "CAUSAL": 1}])
def test_off_by_default_and_without_a_mask(consts: dict) -> None:
    """The default pipeline does not split the backward's loop; with the switch a loop without a mask stays whole."""
    assert len(_consumer_loops(tkir.compile(str(PATH), **consts).ir)) == 1
    if not consts["CAUSAL"]:
        assert len(_consumer_loops(tkir.compile(str(PATH), pass_edits=EDIT, **consts).ir)) == 1
