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


def test_the_verifier_rejects_the_rotation_overlap_mma_declines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without its hazard check, overlap-mma rotates dV += P^T dO past dO's release; the verifier's protocol
    model (run after every pass) proves the read unsafe and names the pass, the read, the buffer and the
    release. The check in the pass and the check in the verifier are independent."""
    import tkir.passes.overlap_mma as om

    monkeypatch.setattr(om, "rotation_hazard", lambda loop, plan: None)
    from tkir.diagnostics import CompileError

    with pytest.raises(CompileError) as e:
        tkir.compile(str(DKDV), target="sm_90a")
    msg = str(e.value)
    assert "after pass 'overlap-mma'" in msg, msg
    assert msg.startswith(f"{DKDV}:39:"), msg  # dv += bf16(pt) @ dos, the rotated read
    assert "'tk.mma' in the consumer role (1 warpgroup) reads stage 0 of %dos after releasing it ('pipe.arrive " \
           "%empty_dos'" in msg, msg


def test_the_verifier_rejects_a_read_moved_after_its_release(tmp_path: Path) -> None:
    """An IR edit of the pipelined dK/dV loop: the mma dV += P^T dO moved below dO's release."""
    text = tkir.compile(str(DKDV), target="sm_90a").ir
    lines = text.split("\n")
    i = next(k for k, ln in enumerate(lines) if "%dv.3 = tk.mma" in ln)
    j = next(k for k, ln in enumerate(lines) if k > i and "pipe.arrive %empty_dos" in ln)
    lines.insert(j, lines.pop(i))
    bad = tmp_path / "dkdv_read_after_release.tkir"
    bad.write_text("\n".join(lines), encoding="utf-8")
    import contextlib
    import io

    from tkir.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["opt", str(bad), "--passes=canonicalize", "-o", str(tmp_path / "out.tkir")])
    assert rc == 1
    first = err.getvalue().splitlines()[0]
    assert first.startswith(f"{bad}:{j + 1}:"), first
    assert "reads stage" in first and "%dos after releasing it ('pipe.arrive %empty_dos' at line" in first, first
    assert not (tmp_path / "out.tkir").exists()
