"""overlap-mma declines a rotation that would read a ring-buffer stage after its release.

tests/data/attention_dkdv.tk (attention's dK/dV: dO's stage is read by dV += P^T dO, the mma overlap-mma would
rotate into the next iteration, and by dP^T = V dO^T, which stays in this one and is followed by dO's release)
compiles with the default pipeline on both targets, matches its float64 reference in the interpreter, and on
sm_90a its loop carries the pass's remark (`overlap_skipped`, the read and the release) instead of the rotation.
attention_fwd's loop (its V stage read only by the rotated mma) is still rotated.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import tkir
from tkir.tools.examples import check_interpreted

ROOT = Path(__file__).resolve().parents[2]
DKDV = ROOT / "tests" / "data" / "attention_dkdv.tk"
SKIPPED_ATTR = "overlap_skipped"
# Ragged: N not a multiple of BQ = BKV = 64, so TMA's zero fill and the clipped stores are exercised.
SIZES = dict(B=1, H=2, N=200)


def _companion():
    spec = importlib.util.spec_from_file_location("attention_dkdv_ref", DKDV.with_suffix(".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _loops(k: tkir.api.CompiledKernel) -> list:
    return [op for op in k.module.kernel.walk() if op.name == "scf.for"]


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_dkdv_default_pipeline_matches_reference(target: str) -> None:
    k = tkir.compile(str(DKDV), target=target)
    for seed in (0, 1):
        results = check_interpreted(k.module, _companion(), SIZES, {}, seed=seed)
        assert all(r.ok for r in results), [str(r) for r in results]


def test_dkdv_rotation_declined_with_remark() -> None:
    k = tkir.compile(str(DKDV), target="sm_90a")
    remarks = [op.attrs[SKIPPED_ATTR] for op in _loops(k) if SKIPPED_ATTR in op.attrs]
    assert len(remarks) == 1, remarks
    assert "%dos" in remarks[0] and "pipe.arrive %empty_dos" in remarks[0] and "line 39" in remarks[0]
    # declined, not half-done: no deferred mma and no prologue guard
    ops = [op.name for op in k.module.kernel.walk()]
    assert "tk.mma_wait" not in ops


def test_attention_fwd_still_rotated() -> None:
    k = tkir.compile(str(ROOT / "examples" / "attention_fwd.tk"), target="sm_90a", D=64)
    assert not any(SKIPPED_ATTR in op.attrs for op in _loops(k))
    assert any(op.name == "tk.mma_wait" for op in k.module.kernel.walk())
