"""The column reduction's scratch tile: its row padding (tkir.layout.column_scratch_pad, which the backend uses)
and the accesses bank-conflicts lists for it (column_scratch_accesses), checked against the brute-force bank
model and against what Nsight Compute measured."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tkir
from tkir.access_report import reports_of
from tkir.layout import (
    SCRATCH_MAX_PAD,
    SCRATCH_PAD_STEP,
    SharedLayout,
    addresses,
    brute_force_wavefronts,
    column_scratch_accesses,
    column_scratch_pad,
    conflict_degree,
    make_layout,
    register_access,
    vector_read_accesses,
)

ROOT = Path(__file__).resolve().parents[2]
OLD_PAD = 16  # the fixed padding before the bank model chose it


def _store_degree(layout, rows: int, cols: int, pad: int) -> int:
    return conflict_degree(register_access(False, layout, "f32", (rows, cols)), SharedLayout("f32", rows, cols, pad=pad))


def test_col_sum_layout_needs_no_padding() -> None:
    """examples/col_sum.tk: 128 x 16 f32, 4 lanes of 16 bytes per 64-byte row. The old 16-byte pad made the
    quarter-warp's two rows overlap (2-way: 7.59 wavefronts per v4 store measured on an H100); unpadded rows
    are 1-way (3.82 measured, with the 1-wavefront f32 stores in the same class)."""
    lay = make_layout("row", warps=4, vec=4)
    assert column_scratch_pad(lay, 128, 16) == 0
    assert _store_degree(lay, 128, 16, 0) == 1
    assert _store_degree(lay, 128, 16, OLD_PAD) == 2


@pytest.mark.parametrize("kind, split", [("mma_c", {"warps": 4}), ("wgmma_acc", {"wg": 1})])
def test_accumulator_rows_need_a_32_byte_pad(kind: str, split: dict) -> None:
    """An accumulator's st.shared.v2 pairs: 4 rows of 32 bytes per 128-byte phase; 32 bytes of padding put
    them on disjoint banks where 16 overlaps two of them."""
    lay = make_layout(kind, **split)
    assert column_scratch_pad(lay, 64, 64) == 32
    assert _store_degree(lay, 64, 64, 32) == 1
    assert _store_degree(lay, 64, 64, OLD_PAD) == 2


@settings(max_examples=60, deadline=None)
@given(rows=st.sampled_from([4, 16, 64, 128]), cols=st.sampled_from([16, 64, 256, 768, 1024]),
       warps=st.sampled_from([1, 2, 4, 8]), vec=st.sampled_from([2, 4, 8]))
def test_chosen_pad_is_least_and_brute_force_agrees(rows: int, cols: int, warps: int, vec: int) -> None:
    """For row tiles: the chosen pad's store degree is the least of every pad tried (so never worse than the
    old fixed pad), and the model's wavefronts equal the brute-force count instruction by instruction."""
    try:
        lay = make_layout("row", warps=warps, vec=vec)
        store = register_access(False, lay, "f32", (rows, cols))
    except Exception:  # noqa: BLE001 - a shape this layout cannot hold
        return
    pad = column_scratch_pad(lay, rows, cols)
    assert pad % SCRATCH_PAD_STEP == 0 and 0 <= pad <= SCRATCH_MAX_PAD
    chosen = _store_degree(lay, rows, cols, pad)
    assert all(chosen <= _store_degree(lay, rows, cols, p) for p in range(0, SCRATCH_MAX_PAD + 1, SCRATCH_PAD_STEP))
    addrs = addresses(store, SharedLayout("f32", rows, cols, pad=pad))
    worst = max(max(brute_force_wavefronts([int(a) for a in inst], store.width)) for inst in addrs[:16])
    assert worst <= chosen


def test_result_read_back_in_16_byte_groups() -> None:
    """A col_vec of a row tile with 4 f32 columns per lane is read back as one ld.shared.v4 per lane, as
    load_from_shared groups it (ptxas's LDS.128 in examples/col_sum.tk's SASS)."""
    (acc,) = vector_read_accesses(make_layout("col_vec", of="row", warps=4, vec=4), 16)
    assert acc.op == "ld.shared.v4" and acc.width == 16


def test_accesses_listed_in_order() -> None:
    lay = make_layout("row", warps=4, vec=4)
    ops = [a.op for a, _ in column_scratch_accesses(lay, 128, 16, make_layout("col_vec", of="row", warps=4, vec=4))]
    assert ops == ["st.shared.v4", "ld.shared.f32", "st.shared.f32", "ld.shared.v4"]


def test_report_lists_the_scratch_accesses_of_col_sum() -> None:
    k = tkir.compile(str(ROOT / "examples" / "col_sum.tk"), target="sm_90a")
    (red,) = [op for op in k.module.kernel.walk() if op.name == "tk.reduce"]
    got = [(r.op, r.tile, r.degree) for r in reports_of(red.attrs)]
    assert got == [("st.shared.v4", "scratch", 1), ("ld.shared.f32", "scratch", 1), ("st.shared.f32", "scratch", 1),
                   ("ld.shared.v4", "scratch", 1)]
    ptx = k.asm["ptx"]
    assert "ld.shared.v4.b32" in ptx  # the result read back in 16-byte groups, as listed
