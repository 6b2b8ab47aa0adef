"""fold-acc-init's loop form (`fold-acc-init{loops=true}`, passes/fold_acc_init.py): GEMM + bias kernels whose
accumulator starts from the bias instead of zero stay correct in the interpreter, and the user GEMM + bias + GELU's
wide tile (128 x 256), which ptxas spills 32 B for without the fold, assembles without spills, so auto consts take
it."""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir
from tkir.tools.examples import check_interpreted, load_companion

ROOT = Path(__file__).resolve().parents[2]
LOOPS = "fold-acc-init{loops=true}"


def _folded(k: tkir.api.CompiledKernel) -> bool:
    return any(op.result.name and op.result.name.endswith("_init") for op in k.module.kernel.walk()
               if op.name == "tk.add" and op.results)


@pytest.mark.parametrize("path, i", [("examples/user/gemm_bias_gelu.tk", i) for i in range(4)]
                         + [("examples/linear.tk", i) for i in range(3)])
def test_bias_folded_into_the_accumulator_matches_reference(path: str, i: int) -> None:
    tk = ROOT / path
    comp = load_companion(tk)
    sizes, consts = comp.CHECK_SIZES[i], comp.CHECK_CONSTS[i]
    k = tkir.compile(str(tk), target="sm_90a", pass_edits=LOOPS, **consts)
    assert _folded(k)
    results = check_interpreted(k.module, comp, sizes, consts, seed=i)
    assert all(r.ok for r in results), [str(r) for r in results]


def test_wide_tile_without_spills_is_chosen() -> None:
    tk = str(ROOT / "examples" / "user" / "gemm_bias_gelu.tk")
    on = tkir.compile(tk, target="sm_90a")  # the default: the loop form on
    assert on.module.kernel.attrs["auto"] == {"BM": 128, "BN": 256}
    assert on.asm["ptxas"].spill_stores == 0
    off = tkir.compile(tk, target="sm_90a", pass_edits="fold-acc-init{loops=false}")  # the wide tile spills: 256 x 128
    assert off.module.kernel.attrs["auto"] == {"BM": 256, "BN": 128}
    assert not _folded(off)
