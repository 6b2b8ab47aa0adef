"""Spills are never a surprise: where ptxas spills at the compiler's own `.minnctapersm` > 1, the backend lowers
the kernel again for one fewer block per SM (backend/lower.py avoid_spills), records the decision as the kernel
attr `spill_fallback` and `tkc report` says so; a user's `@blocks_per_sm(B)` is kept with a located
SpillWarning; plan-occupancy{spill_retry=false} is the ablation. Runs the local ptxas (no GPU)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import tkir
from tkir.backend.lower import SPILL_FALLBACK_ATTR, SpillWarning
from tkir.passes.registry import DEFAULT_PIPELINE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LAYERNORM_BWD = str(EXAMPLES / "layernorm_bwd.tk")
# layernorm backward at D = 4096, 2 rows a block, 4 warpgroups: plan-occupancy plans 2 blocks per SM, where
# ptxas fits a thread in 64 registers only by spilling (212 B measured); at 1 block it needs 122, no spills
SPILLING = {"D": 4096, "ROWS": 2, "WG": 4}


def _minnctapersm(ptx: str) -> int:
    (n,) = re.findall(r"\.minnctapersm (\d+)", ptx)
    return int(n)


def _without_retry() -> list[str]:
    return [("plan-occupancy{spill_retry=false}" if p == "plan-occupancy" else p) for p in DEFAULT_PIPELINE]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TKIR_CACHE", "0")


def test_spilling_plan_is_lowered_again_for_one_fewer_block() -> None:
    k = tkir.compile(LAYERNORM_BWD, **SPILLING, OCC=0)
    assert _minnctapersm(k.asm["ptx"]) == 1
    fb = k.module.kernel.attrs[SPILL_FALLBACK_ATTR]
    assert fb["blocks_per_sm"] == 2 and fb["to"] == 1 and fb["spill_bytes"] > 0 and fb["registers"] == 64, fb
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0, (res.registers, res.spill_stores)
    assert res.registers > 64


def test_ablation_keeps_the_spilling_code() -> None:
    k = tkir.compile(LAYERNORM_BWD, passes=_without_retry(), **SPILLING, OCC=0)
    assert k.module.kernel.attrs.get("spill_retry") is False
    assert _minnctapersm(k.asm["ptx"]) == 2
    assert SPILL_FALLBACK_ATTR not in k.module.kernel.attrs
    assert k.asm["ptxas"].spill_stores > 0


def test_user_blocks_per_sm_is_honoured_with_a_located_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = tkir.compile(LAYERNORM_BWD, **SPILLING, OCC=2)
        ptx = k.asm["ptx"]
    assert _minnctapersm(ptx) == 2
    assert SPILL_FALLBACK_ATTR not in k.module.kernel.attrs
    spills = [str(w.message) for w in caught if isinstance(w.message, SpillWarning)]
    assert len(spills) == 1, [str(w.message) for w in caught]
    assert re.match(r".*layernorm_bwd\.tk:\d+:\d+: warning: @blocks_per_sm\(2\) on kernel 'layernorm_bwd': ptxas "
                    r"spills \d+ B per thread at 64 registers \(2 blocks per SM\)", spills[0]), spills[0]


def test_no_spill_no_second_lowering() -> None:
    """A kernel that fits at its blocks per SM keeps them (and its PTX): layernorm_bwd at its defaults."""
    k = tkir.compile(LAYERNORM_BWD)
    assert SPILL_FALLBACK_ATTR not in k.module.kernel.attrs
    plain = tkir.compile(LAYERNORM_BWD, passes=_without_retry())
    assert k.asm["ptx"] == plain.asm["ptx"]


def test_the_decision_survives_the_compile_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TKIR_CACHE", "1")
    monkeypatch.setenv("TKIR_CACHE_DIR", str(tmp_path))
    first = tkir.compile(LAYERNORM_BWD, **SPILLING, OCC=0)
    first.lower()
    again = tkir.compile(LAYERNORM_BWD, **SPILLING, OCC=0)
    again.lower()
    assert again.cached is True
    assert again.module.kernel.attrs[SPILL_FALLBACK_ATTR] == first.module.kernel.attrs[SPILL_FALLBACK_ATTR]


def test_report_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from tkir.cli import main

    assert main(["report", LAYERNORM_BWD, "-D", "D=4096", "-D", "ROWS=2", "-D", "WG=4", "-D", "OCC=0"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"spills avoided: ptxas spilled \d+ B at 2 blocks/SM \(64 registers\); the kernel asks for 1 "
                     r"blocks/SM instead", out), out
    assert "spill_stores: 0" in out or "'spill_stores': 0" in out or '"spill_stores": 0' in out, out


def test_spills_at_255_registers_are_said_not_retried() -> None:
    """attention_fwd on sm_80 with 128-row query tiles and 64-key tiles spills at 255 registers at 2 blocks per SM
    and at 1 (measured: 148 B both): giving up a block would cost occupancy for nothing, so the code is kept
    and a SpillWarning at the kernel says why."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = tkir.compile(str(EXAMPLES / "attention_fwd.tk"), target="sm_80", BQ=128, BKV=64)
        ptx = k.asm["ptx"]
    assert _minnctapersm(ptx) == 2 and SPILL_FALLBACK_ATTR not in k.module.kernel.attrs
    spills = [str(w.message) for w in caught if isinstance(w.message, SpillWarning)]
    assert len(spills) == 1 and re.match(r".*attention_fwd\.tk:\d+:\d+: warning: kernel '\w+': ptxas spills \d+ B per "
                                         r"thread at 255 registers, the most a thread can have", spills[0]), spills
