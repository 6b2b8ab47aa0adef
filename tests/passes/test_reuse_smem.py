"""reuse-smem (passes/reuse_smem.py): the epilogue's staging tiles in the memory of tiles dead by then.

On attention's dK/dV backward (tests/data/attention_dkdv.tk, K and V loaded once and read by the key loop) the
staging tiles of dK and dV take K's and V's memory; the kernel stays correct in the interpreter on both targets.
An IR mutant that places the reuse before the loop (so the loop reads K after its memory was given away) is a
located verifier error and, unverified, an interpreter error: the interpreter is a race detector for it too.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import tkir
from tkir.interp import InterpError
from tkir.parser import parse_module
from tkir.tools.examples import check_interpreted
from tkir.verifier import VerifyError, verify

ROOT = Path(__file__).resolve().parents[2]
DKDV = ROOT / "tests" / "data" / "attention_dkdv.tk"
FILECHECK_KERNEL = ROOT / "tests" / "filecheck" / "passes" / "reuse-smem.tk"
SIZES = dict(B=1, H=2, N=200)
REUSE_K = re.compile(r"\n( *)(%DK_stage = tk\.reuse %k[^\n]*)")


def _companion():
    spec = importlib.util.spec_from_file_location("attention_dkdv_ref", DKDV.with_suffix(".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _smem(k: tkir.api.CompiledKernel) -> int:
    return int(k.module.kernel.attrs["occupancy"]["smem_bytes"])


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_dkdv_staging_in_k_and_v(target: str) -> None:
    k = tkir.compile(str(DKDV), target=target)
    reuses = {op.result.name: op.operands[0].name for op in k.module.kernel.walk() if op.name == "tk.reuse"}
    if target == "sm_90a":  # create-tma's staged epilogue; sm_80 stores the accumulators another way
        assert reuses == {"DK_stage": "k", "DV_stage": "v"}
        off = tkir.compile(str(DKDV), target=target, pass_edits="-reuse-smem")
        assert _smem(off) - _smem(k) == 2 * 64 * 64 * 2  # two 64 x 64 bf16 staging tiles
    for seed in (0, 1):
        results = check_interpreted(k.module, _companion(), SIZES, {}, seed=seed)
        assert all(r.ok for r in results), [str(r) for r in results]


def _mutant() -> str:
    """The reuse of K moved to the top of the consumer role, before the key loop that reads K."""
    text = tkir.compile(str(DKDV), target="sm_90a").ir
    found = REUSE_K.findall(text)
    assert len(found) == 1
    indent, line = found[0]
    text = text.replace("\n" + indent + line, "")
    role = re.search(r"\n( *)tk\.role \{kind = consumer[^\n]*\n", text)
    assert role is not None
    at = role.end()
    return text[:at] + indent + line + "\n" + text[at:]


def test_a_read_after_the_reuse_is_a_verify_error() -> None:
    with pytest.raises(VerifyError, match=r"mutant\.tkir:\d+:\d+: error: 'tk\.mma' uses %k after its memory was given "
                                          r"to %DK_stage \('tk\.reuse' at mutant\.tkir:\d+:\d+\)"):
        verify(parse_module(_mutant(), "mutant.tkir"))


def test_a_read_after_the_reuse_is_an_interp_error() -> None:
    mod = parse_module(_mutant(), "mutant.tkir")
    with pytest.raises(InterpError, match=r"'tk\.mma' reads %k after its memory was given to another tile "
                                          r"\('tk\.reuse' of %DK_stage at mutant\.tkir:\d+:\d+\)"):
        check_interpreted(mod, _companion(), SIZES, {}, seed=0)


def test_wgmma_groups_waited_before_the_role_meets() -> None:
    """The reuse's barrier (the role's named barrier 8 in this kernel) comes right after wgmma.wait_group 0."""
    ptx = tkir.compile(str(FILECHECK_KERNEL), target="sm_90a").asm["ptx"]
    lines = [ln.strip() for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    at = [i for i, ln in enumerate(lines) if ln == "bar.sync 8, 128;"]
    assert len(at) == 1
    assert lines[at[0] - 1] == "wgmma.wait_group.sync.aligned 0;"


def test_persistent_gives_the_tile_its_own_memory_back() -> None:
    """persistent{linear_grids=true} refills attention's Q tile per output tile: O's staging tile, which
    reuse-smem placed in Q's memory, gets its own again (and the plan's bytes grow by it)."""
    path = str(ROOT / "examples" / "attention_fwd.tk")
    plain = tkir.compile(path, target="sm_90a")
    assert [op.operands[0].name for op in plain.module.kernel.walk() if op.name == "tk.reuse"] == ["q"]
    k = tkir.compile(path, target="sm_90a", pass_edits="persistent{linear_grids=true}")
    ops = list(k.module.kernel.walk())
    assert "persistent_skipped" not in k.module.kernel.attrs
    assert not any(op.name == "tk.reuse" for op in ops)
    assert any(op.name == "tk.alloc" and op.result.name == "O_stage" for op in ops)
    stage = next(op.result.type for op in ops if op.name == "tk.alloc" and op.result.name == "O_stage")
    # the stage's bytes, and persistent's own once_empty barrier with its alignment
    assert stage.nbytes <= _smem(k) - _smem(plain) <= stage.nbytes + 1024
