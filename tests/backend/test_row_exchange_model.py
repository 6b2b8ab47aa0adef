"""The bank model's account of a row reduction's shared-memory traffic (tkir/layout.py row_exchange_accesses,
row_gather_accesses; listed by bank-conflicts as `tile = "scratch"`) against what the backend emits
(backend/exchange.py): every f32 ld/st.shared (and the v2/v4 reads of a row's parts) of the lowered LLVM, its address evaluated for every thread with
tests/llvm_eval_test_support.py, cut into warps, must be one of the model's instructions and the other way round
(as multisets). The backend's addresses are taken relative to the lowest one in the kernel: every exchange
starts at the scratch area's base, which the model calls 0. Kernels with a column reduction are left out (its
store and reads are listed once per pattern, not per warp)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from llvm_eval_test_support import LLVMText, shared_addresses  # tests/ is on sys.path under pytest

import tkir
from tkir.access_report import ACCESS_ATTR
from tkir.facts import OccupancyPlan
from tkir.layout import WARP, Access, SharedLayout, layout_of, row_exchange_accesses, row_gather_accesses
from tkir.ops import ARG_KINDS, STATS_ATTR

ROOT = Path(__file__).resolve().parents[2]
SCRATCH_ASM = {"st.shared.f32 [$0], $1;": "st.shared.f32", "ld.shared.f32 $0, [$1];": "ld.shared.f32",
               "ld.shared.v2.f32 {$0, $1}, [$2];": "ld.shared.v2", "ld.shared.v4.f32 {$0, $1, $2, $3}, [$4];": "ld.shared.v4"}

# a fused row mean and variance over rows split across warps (k = 2: combine_row_stats), one row a block and
# four (several row groups, the results gathered into the row vector's layout)
STATS = """
kernel rowstats<R=1, D=4096>(X: gl<bf16>[N, D], Y: gl<bf16>[N, D])
    grid(cdiv(N, R))
{
    reg x: rt<bf16, R, D> = X[block.x, 0]
    let xf = f32(x)
    Y[block.x, 0] = bf16((xf - row_mean(xf)) * rsqrt(row_var(xf) + 1e-5))
}
"""

KERNELS = ["softmax_bwd", "argmax", "attention_bwd_prep", "cross_entropy", "softmax_vocab", "user/row_argmax",
           "user/cross_entropy"]


def _relative(addrs: np.ndarray, base: int) -> tuple[int, ...]:
    return tuple(np.where(addrs >= 0, addrs - base, -1).tolist())


def _backend(k: tkir.api.Kernel) -> Counter:
    """(op, relative lane addresses) of every warp's ld/st.shared.f32 in the kernel's LLVM."""
    fn = LLVMText(k.asm["llvm"])
    threads = OccupancyPlan.of(k.module.kernel).threads
    calls = [(op, shared_addresses(fn, c, threads, store=op.startswith("st")))
             for c in fn.calls if (op := SCRATCH_ASM.get(c.asm.strip())) is not None]
    base = min((int(a.min()) for _, a in calls), default=0)  # every exchange starts at the scratch area's base
    out: Counter = Counter()
    for op, a in calls:
        for w in range(threads // WARP):
            out[(op, _relative(a[w * WARP:(w + 1) * WARP], base))] += 1
    return out


def _model_accesses(k: tkir.api.Kernel) -> list[tuple[Access, SharedLayout]]:
    """The model's accesses of every row reduction, as bank-conflicts lists them."""
    out, seen = [], set()
    for op in k.module.kernel.walk():
        if op.name != "tk.reduce" or str(op.attrs["axis"]) != "row":
            continue
        t = op.operands[0].type
        lay, res = layout_of(t), layout_of(op.result.type)
        kind, group = str(op.attrs["kind"]), op.attrs.get(STATS_ATTR)
        if group is None or group not in seen:
            kv = 2 if kind in ARG_KINDS or kind == "var" or group is not None else 1
            out += row_exchange_accesses(lay, t.rows, t.cols, kv)
            seen.add(group)
        out += row_gather_accesses(lay, t.rows, t.cols, res)
    return out


def _model(k: tkir.api.Kernel) -> Counter:
    out: Counter = Counter()
    for access, layout in _model_accesses(k):
        for i in range(access.rows.shape[0]):
            rows, cols = access.rows[i], access.bytecols[i]
            phys = np.where(rows >= 0, layout.offset(np.maximum(rows, 0), np.maximum(cols, 0)), -1)
            out[(access.op, _relative(phys, 0))] += 1
    return out


def _compile(name: str, target: str, consts: dict | None = None, tmp: Path | None = None) -> tkir.api.Kernel:
    if name == "rowstats":
        assert tmp is not None
        path = tmp / "rowstats.tk"
        path.write_text(STATS)
        return tkir.compile(str(path), target=target, **(consts or {}))
    return tkir.compile(str(ROOT / "examples" / f"{name}.tk"), target=target)


CASES = [(name, "sm_90a", None) for name in KERNELS] + [
    ("softmax_bwd", "sm_80", None), ("user/row_argmax", "sm_80", None),
    ("rowstats", "sm_90a", {"R": 1}), ("rowstats", "sm_90a", {"R": 4}), ("rowstats", "sm_80", {"R": 4}),
]


@pytest.mark.parametrize(("name", "target", "consts"), CASES,
                         ids=[f"{n}-{t}" + (f"-R{c['R']}" if c else "") for n, t, c in CASES])
def test_model_lists_exactly_the_backend_scratch_instructions(name: str, target: str, consts: dict | None,
                                                              tmp_path: Path) -> None:
    k = _compile(name, target, consts, tmp_path)
    got, want = _backend(k), _model(k)
    assert sum(got.values()) > 0, f"{name}: no scratch traffic in the LLVM (the case tests nothing)"
    assert got == want, (f"{name} {target}: backend-only {list((got - want).items())[:2]}, "
                         f"model-only {list((want - got).items())[:2]}")


def test_fused_stats_split_rows_take_two_values_a_row(tmp_path: Path) -> None:
    """The stats kernel's rows really are split over warps, and its exchange carries (mean, M2): the
    model's stores address 2 words per (row, part)."""
    k = _compile("rowstats", "sm_90a", {"R": 4}, tmp_path)
    stores = [a for a, lay in _model_accesses(k) if a.op == "st.shared.f32" and lay.cols > 4]
    assert stores, "no cross-warp exchange: the rows are not split over warps"
    assert any(layout_of(op.operands[0].type).nparts > 1 for op in k.module.kernel.walk() if op.name == "tk.reduce")


@pytest.mark.parametrize("name", ["softmax_bwd", "argmax", "attention_bwd_prep"])
def test_report_lists_the_scratch_traffic(name: str) -> None:
    """bank-conflicts writes the entries on the reductions (the report's `scratch` rows), each 1-way."""
    k = _compile(name, "sm_90a")
    entries = [e for op in k.module.kernel.walk() if op.name == "tk.reduce"
               for e in op.attrs.get(ACCESS_ATTR, []) if e["tile"] == "scratch"]
    ops = {e["op"] for e in entries}
    assert "st.shared.f32" in ops and ops - {"st.shared.f32"} <= {"ld.shared.f32", "ld.shared.v2", "ld.shared.v4"}
    assert len(ops) == 2, ops  # the stores and one width of reads
    assert all(e["degree"] == 1 for e in entries)
