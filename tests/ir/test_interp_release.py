"""The interpreter as a race detector: a consumer role's read of a ring stage it has released (and not waited
for again) is an InterpError naming the read, the stage and the release (tkir/interp/pipeline.py Releases).

The IR mutant moves a read after its stage's release: in attention's dK/dV (tests/data/attention_dkdv.tk,
default pipeline, sm_90a) dO's `pipe.arrive %empty_dos` goes before the mma dP^T = V dO^T that reads it. The
interpreter flags the read; the verifier rejects the mutant with a located error too. The unmutated kernel runs
clean (tests/passes/test_overlap_hazard.py checks its values).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import tkir
from tkir.interp import InterpError
from tkir.interp.pipeline import ABANDONED_NOTE
from tkir.parser import parse_module
from tkir.tools.examples import check_interpreted
from tkir.verifier import VerifyError, verify

DKDV = Path(__file__).resolve().parents[2] / "tests" / "data" / "attention_dkdv.tk"
SIZES = dict(B=1, H=1, N=200)
# dP^T = V dO^T, then dO's release (early-release puts it right after dO's last reader)
READ_THEN_RELEASE = re.compile(r"( *)(%dpt = tk.mma %v, %dos_s[^\n]*\n) *(pipe.arrive %empty_dos[^\n]*\n)")


def _companion():
    spec = importlib.util.spec_from_file_location("attention_dkdv_ref", DKDV.with_suffix(".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _mutant() -> str:
    text = tkir.compile(str(DKDV)).ir
    matches = READ_THEN_RELEASE.findall(text)
    assert len(matches) == 1, "the dK/dV loop's dP mma and dO release no longer sit together"
    indent, read, release = matches[0]
    return text.replace(indent + read + indent + release, indent + release + indent + read)


def test_unmutated_runs_clean() -> None:
    mod = parse_module(tkir.compile(str(DKDV)).ir, "dkdv.tkir")
    assert all(r.ok for r in check_interpreted(mod, _companion(), SIZES, {}, seed=0))


def test_read_after_release_is_an_interp_error() -> None:
    """...and it comes at once: the producer role, left waiting on a barrier the failed consumer will never
    arrive at, gives up (RoleAborted, said in the error's note) instead of waiting out ROLE_TIMEOUT_S."""
    mod = parse_module(_mutant(), "mutant.tkir")
    with pytest.raises(InterpError, match=r"mutant\.tkir:\d+:\d+: 'tk\.mma' reads stage \d of %dos after the consumer "
                                          r"role released it \('pipe\.arrive %empty_dos' at mutant\.tkir:\d+:\d+\)") as info:
        check_interpreted(mod, _companion(), SIZES, {}, seed=0)
    notes = getattr(info.value, "__notes__", [])
    assert any(ABANDONED_NOTE in n for n in notes), ("the producer role waited out its barrier's timeout", notes)


def test_read_after_release_is_a_verify_error() -> None:
    mod = parse_module(_mutant(), "mutant.tkir")
    with pytest.raises(VerifyError, match=r"mutant\.tkir:\d+:\d+: error: 'pipe\.arrive' releases stage \d of %dos"):
        verify(mod)
