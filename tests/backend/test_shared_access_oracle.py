"""Every shared-memory instruction the backend emits is one the report lists, at the degree it lists.

For every example and user-suite kernel on both targets (tkir/tools/register_table.py suite_paths, default
consts), each `ld/st.shared` (b8 .. v4) and `ldmatrix/stmatrix` in the lowered LLVM has its address evaluated for
every thread of the block (tests/llvm_eval_test_support.py: iteration 0 of each loop, block 0) and put through
the bank model (tkir.layout.wavefronts, warp by warp); its (class, width) key (tkir/tools/measure.py: the SASS
width `tkc report --measure` judges, LDS.32, STS.64, LDSM.x4, ...) and its degree must be a pair the kernel's
`access` entries list (bank-conflicts, create-tma, stage-epilogue). An instruction whose degree the report does not
predict is what `--measure` would find on the GPU as an unlisted or off width; here it fails on the CPU. KNOWN
lists the pairs the report does not list yet, each with why; one that becomes listed must leave the list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llvm_eval_test_support import LLVMText, shared_addresses  # tests/ is on sys.path under pytest

import tkir
from tkir.access_report import reports_of
from tkir.diagnostics import TkirError
from tkir.facts import OccupancyPlan
from tkir.layout import WARP, wavefronts
from tkir.tools.measure import access_key
from tkir.tools.register_table import TARGETS, kernel_name, suite_paths

PLAIN = re.compile(r"^(ld|st)\.shared\.(?:(v[24])\.)?(b8|b16|b32|f32|b64)\b")
MATRIX = re.compile(r"^(ld|st)matrix\.sync\.aligned\.m8n8\.x(\d)")
ELEM_BYTES = {"b8": 1, "b16": 2, "b32": 4, "f32": 4, "b64": 8}
MATRIX_ROW_BYTES = 16  # each lane gives the address of one 16-byte row of an 8 x 8 b16 matrix (PTX ISA ldmatrix)

# (kernel, target) -> {((class, width), degree): why the report does not list it}
_BASED = {(("ld", "LDS.64"), 1): "the column sum's read-back in v2 groups where tkir.layout.vector_read_accesses "
                                  "groups the same slots as v4",
          (("ld", "LDS.16"), 1): "a bf16 vector's layout conversion through shared memory (the report lists tile "
                                  "conversions only)"}
KNOWN: dict[tuple[str, str], dict] = {("based", "sm_90a"): _BASED, ("based", "sm_80"): _BASED}


def _key(asm: str) -> tuple[tuple[str, str], int, bool] | None:
    """((class, width key), bytes a lane, whether it is a load) of a shared instruction."""
    m = PLAIN.match(asm)
    if m:
        width = ELEM_BYTES[m.group(3)] * (int(m.group(2)[1]) if m.group(2) else 1)
        return (m.group(1), f"{'LDS' if m.group(1) == 'ld' else 'STS'}.{width * 8}"), width, m.group(1) == "ld"
    m = MATRIX.match(asm)
    if m:
        return (m.group(1), f"{'LDSM' if m.group(1) == 'ld' else 'STSM'}.x{m.group(2)}"), MATRIX_ROW_BYTES, \
            m.group(1) == "ld"
    return None


def emitted(k: tkir.api.Kernel) -> set[tuple[tuple[str, str], int]]:
    """((class, width), degree) of every shared instruction of the kernel's LLVM (its worst warp)."""
    fn = LLVMText(k.asm["llvm"])
    threads = OccupancyPlan.of(k.module.kernel).threads
    out = set()
    for call in fn.calls:
        found = _key(call.asm.strip().split("\n")[0])
        if found is None:
            continue
        key, width, is_load = found
        a = shared_addresses(fn, call, threads, store=not is_load)
        degree = max(int(wavefronts(a[w * WARP:(w + 1) * WARP][None, :], width).max()) for w in range(threads // WARP))
        out.add((key, degree))
    return out


def listed(k: tkir.api.Kernel) -> set[tuple[tuple[str, str], int]]:
    return {(key, r.degree) for op in k.module.kernel.walk() for r in reports_of(op.attrs)
            if (key := access_key(r.op)) is not None}


CASES = [(p, t) for p in suite_paths() for t in TARGETS]


@pytest.mark.parametrize(("path", "target"), CASES, ids=[f"{kernel_name(p)}-{t}" for p, t in CASES])
def test_every_shared_instruction_is_listed_at_its_degree(path: Path, target: str) -> None:
    try:
        k = tkir.compile(str(path), target=target)
    except TkirError as e:  # an fp8 '@' on sm_80 (no fp8 mma there): a located refusal, nothing emitted
        assert target == "sm_80" and "fp8 '@'" in str(e) and f"{path.name}:" in str(e), e
        return
    known = KNOWN.get((kernel_name(path), target), {})
    got, lst = emitted(k), listed(k)
    unlisted = {pair for pair in got if pair not in lst}
    assert unlisted <= set(known), f"shared instructions the report does not list at their degree: " \
                                   f"{sorted(unlisted - set(known))}; listed: {sorted(lst)}"
    stale = set(known) - unlisted
    assert not stale, f"listed now (or no longer emitted): {sorted(stale)}; take them off KNOWN"


def test_the_oracle_sees_a_conflict() -> None:
    """The evaluation is not blind: Based's states' transpose reads its scratch tile at 16-way, as the report says."""
    k = tkir.compile(str(Path(__file__).resolve().parents[2] / "examples" / "based.tk"))
    assert (("ld", "LDS.32"), 16) in emitted(k) and (("ld", "LDS.32"), 16) in listed(k)
