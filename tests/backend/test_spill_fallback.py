"""Spills are never a surprise: where ptxas spills at the compiler's own `.minnctapersm` > 1, the backend lowers
the kernel again for the highest lower count of blocks per SM at which ptxas does not spill (backend/lower.py
avoid_spills, a bounded search), records the decision as the kernel attr `spill_fallback` and `tkc report` says
so; where every count spills it keeps the least spilling one and says so; a user's `@blocks_per_sm(B)` is kept
with a located SpillWarning; plan-occupancy{spill_retry=false} is the ablation. Runs the local ptxas (no GPU)."""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from pathlib import Path

import pytest

import tkir
from tkir.backend import toolchain
from tkir.backend.lower import SPILL_FALLBACK_ATTR, SpillWarning, assemble_artifacts, reg_cap, retry_counts
from tkir.backend.toolchain import local_memory_ops
from tkir.facts import OccupancyPlan
from tkir.passes.registry import DEFAULT_PIPELINE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROW_KERNELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "rows"  # the row kernels with every knob
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
                     r"blocks/SM instead, the highest count ptxas does not spill at, 2 ptxas runs", out), out
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


SOFTMAX_BWD = str(EXAMPLES / "softmax_bwd.tk")
# softmax_bwd at D = 4096 in one row per 128-thread block: ptxas needs 80 registers without spilling (6 blocks
# per SM; 84 uncapped) and spills at 7 (72 registers, 28 B), 8 (64, 68 B) and 9 (56, 112 B). The packed-cast rule
# alone (passes/plan_occupancy.py _widened_at_use, before its reduction exception) estimated 56 and planned 9:
# the plan below is that one, forced, so the case stays one where a single step is not enough whatever the
# estimate becomes.
WIDE_ROW = {"D": 4096, "DC": 4096, "ROWS": 1, "WG": 1}
FORCED_BLOCKS = 9
SPILL_FREE_BLOCKS = 6


def _forced(path: str, blocks: int, **consts: int) -> tkir.CompiledKernel:
    """The kernel after the passes, its occupancy plan's blocks per SM set to `blocks` (the backend not yet run)."""
    k = tkir.compile(path, **consts)
    assert "ptx" not in dict.keys(k.asm)  # the backend runs on first use, after the edit below
    plan = OccupancyPlan.of(k.module.kernel)
    k.module.kernel.attrs[OccupancyPlan.ATTR] = dataclasses.replace(plan, blocks_per_sm=blocks).to_attr()
    return k


def _with_blocks(ptx: str, blocks: int) -> str:
    return re.sub(r"\.minnctapersm \d+", f".minnctapersm {blocks}", ptx)


def test_retry_counts_are_one_per_register_cap() -> None:
    # 128 threads: caps 64 (8 blocks), 72, 80, 96, 128, 168, 255 (2 blocks; 1 block gives no more)
    assert retry_counts(9, 128) == [8, 7, 6, 5, 4, 3, 2]
    assert [reg_cap(b, 128) for b in retry_counts(9, 128)] == [64, 72, 80, 96, 128, 168, 255]
    assert retry_counts(16, 128) == [12, 10, 9, 8, 7, 6, 5, 4, 3, 2]  # 13-15 blocks: 32 registers, as 16
    assert retry_counts(2, 512) == [1] and retry_counts(2, 128) == []  # 255 at 2 blocks of 128: nothing above
    assert retry_counts(9, 128, floor=4) == [8, 7, 6, 5, 4]


def test_a_plan_several_steps_too_high_reaches_the_highest_spill_free_count(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []
    real = toolchain.assemble
    monkeypatch.setattr(toolchain, "assemble", lambda ptx, *a, **kw: runs.append(ptx) or real(ptx, *a, **kw))
    k = _forced(SOFTMAX_BWD, FORCED_BLOCKS, **WIDE_ROW)
    ptx = k.asm["ptx"]
    fb = k.module.kernel.attrs[SPILL_FALLBACK_ATTR]
    assert _minnctapersm(ptx) == SPILL_FREE_BLOCKS, fb
    assert fb["blocks_per_sm"] == FORCED_BLOCKS and fb["to"] == SPILL_FREE_BLOCKS and fb["spill_bytes_to"] == 0, fb
    assert fb["spill_bytes"] > 0 and fb["registers"] == reg_cap(FORCED_BLOCKS, 128), fb
    # bounded: 1 run at the plan, 1 at the last candidate, ceil(log2(candidates)) to bisect; each PTX once
    bound = 2 + math.ceil(math.log2(len(retry_counts(FORCED_BLOCKS, 128))))
    assert fb["ptxas_runs"] == len(runs) == len(set(runs)) <= bound, (fb, len(runs), bound)
    res = k.asm["ptxas"]  # ptxas's report on the PTX kept
    assert res.spill_stores == res.spill_loads == res.stack_frame == 0, res
    assert k.asm["cubin"] == res.cubin and len(runs) == fb["ptxas_runs"], len(runs)  # the search's run, not another
    assert not local_memory_ops(k.asm["sass"])
    # the highest such count: one block more spills
    above = assemble_artifacts(_with_blocks(ptx, SPILL_FREE_BLOCKS + 1), "sm_90a", sass=False)["ptxas"]
    assert above.spill_stores > 0, above
    # deterministic: the same search, the same PTX
    again = _forced(SOFTMAX_BWD, FORCED_BLOCKS, **WIDE_ROW)
    assert again.asm["ptx"] == ptx and again.module.kernel.attrs[SPILL_FALLBACK_ATTR] == fb


def test_spilling_at_every_count_keeps_the_least_spilling_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """layernorm at D = 16384 (its header: 16 rows of 1024-wide chunks over 512 threads) spills at 1 block per SM
    too (28 B at 128 registers; the xfail in tests/passes/test_wide_rows.py): forced to 2 blocks (696 B at 64
    registers), the backend keeps 1, the least spilling, records what it still spills and warns."""
    from tkir.tools.report import format_report, spill_fallback

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = _forced(str(ROW_KERNELS / "layernorm.tk"), 2, D=16384)
        ptx = k.asm["ptx"]
    assert _minnctapersm(ptx) == 1
    fb = k.module.kernel.attrs[SPILL_FALLBACK_ATTR]
    res = k.asm["ptxas"]
    assert fb["blocks_per_sm"] == 2 and fb["to"] == 1 and fb["ptxas_runs"] == 2, fb
    assert 0 < fb["spill_bytes_to"] == max(res.spill_stores, res.spill_loads) < fb["spill_bytes"], (fb, res)
    spills = [str(w.message) for w in caught if isinstance(w.message, SpillWarning)]
    assert len(spills) == 1 and re.match(r".*layernorm\.tk:\d+:\d+: warning: kernel 'layernorm': ptxas spills at every "
                                         r"count of blocks per SM from 2 down to 1 \(\d+ B per thread at 2, \d+ B "
                                         r"at 1\); kept 1, the least spilling", spills[0]), spills
    line = format_report({"spill_fallback": spill_fallback(k.module)})
    assert re.search(r"spills NOT avoided: ptxas spilled \d+ B at 2 blocks/SM \(64 registers\) and spills at every "
                     r"lower count; the kernel asks for 1 blocks/SM, the least spilling \(\d+ B, 2 ptxas runs\)",
                     line), line


# The conformance case r2s-loop-bf16-sm_80 (tests/conformance/cases.py: register -> shared -> global in a loop):
# plan-occupancy plans 12 blocks per SM (40 registers), where ptxas spills 264 B on sm_80 (it keeps more than one
# iteration's tile live); it holds the loop without spills from 80 registers (6 blocks). Unforced: the plan as the
# estimate makes it, several steps too high.
R2S_LOOP = """kernel r2s(X: gl<bf16>[N, 64], Y: gl<bf16>[N, 64])
    grid(1)
{
    shared a: st<bf16, 64, 64>
    for i in 0 .. cdiv(N, 64) {
        reg x: rt<bf16, 64, 64> = X[i, 0]
        a = x
        Y[i, 0] = a
    }
}
"""


def test_a_loop_the_estimate_undercounts_falls_back_several_steps(tmp_path: Path) -> None:
    path = tmp_path / "r2s.tk"
    path.write_text(R2S_LOOP, encoding="utf-8")
    k = tkir.compile(str(path), target="sm_80")
    ptx = k.asm["ptx"]
    fb = k.module.kernel.attrs[SPILL_FALLBACK_ATTR]
    assert OccupancyPlan.of(k.module.kernel).blocks_per_sm == fb["blocks_per_sm"] >= _minnctapersm(ptx) + 2, fb
    assert (fb["blocks_per_sm"], fb["to"], fb["spill_bytes_to"]) == (12, 6, 0), fb
    assert _minnctapersm(ptx) == 6
    res = k.asm["ptxas"]
    assert res.spill_stores == res.spill_loads == res.stack_frame == 0, res
    assert fb["ptxas_runs"] <= 2 + math.ceil(math.log2(len(retry_counts(12, 128)))), fb
    above = assemble_artifacts(_with_blocks(ptx, 7), "sm_80", sass=False)["ptxas"]
    assert above.spill_stores > 0, above


def test_the_spill_checks_ptxas_run_is_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose PTX asks for more than one block per SM is assembled once by the spill check; asking for
    ptxas's report or the cubin first (which lowers the kernel) reads that run instead of assembling again."""
    monkeypatch.setenv("TKIR_CACHE", "0")  # the backend runs here, not a disk cache entry from another test
    runs: list[str] = []
    real = toolchain.assemble
    monkeypatch.setattr(toolchain, "assemble", lambda ptx, *a, **kw: runs.append(ptx) or real(ptx, *a, **kw))
    k = tkir.compile(str(EXAMPLES / "attention_bwd_prep.tk"))  # no auto consts: no candidate compiled first
    res = k.asm["ptxas"]
    assert _minnctapersm(k.asm["ptx"]) > 1 and runs == [k.asm["ptx"]], len(runs)
    assert k.asm["cubin"] == res.cubin and len(runs) == 1
