"""The backend's slot formulas address exactly the elements tkir.layout assigns to each thread."""

from __future__ import annotations

import numpy as np
import pytest

from tkir.backend.fragments import NumpyBuilder, slot_coords
from tkir.layout import fragment, make_layout, num_threads

CASES = [
    (make_layout("wgmma_acc", wg=2), "f32", (128, 256)),
    (make_layout("wgmma_acc", wg=1), "f32", (128, 64)),
    (make_layout("wgmma_acc", wg=1), "f32", (64, 128)),
    (make_layout("wgmma_a", wg=1), "bf16", (64, 64)),
    (make_layout("wgmma_a", wg=2), "bf16", (128, 64)),
    (make_layout("row", warps=4, vec=8), "f32", (16, 1024)),
    (make_layout("row", warps=4, vec=8), "bf16", (16, 64)),
    (make_layout("row", warps=4, vec=8), "bf16", (16, 128)),
    (make_layout("row", warps=2, vec=4), "f32", (8, 256)),
    (make_layout("acc_row_vec", wg=2), "f32", (128,)),
    (make_layout("acc_row_vec", wg=1), "f32", (128,)),
    (make_layout("row_vec", warps=4), "f32", (16,)),
    (make_layout("col_vec", of="row", warps=4, vec=8), "f32", (1024,)),
    (make_layout("col_vec", of="row", warps=4, vec=8), "f32", (64,)),
    (make_layout("col_vec", of="wgmma_acc", wg=1), "f32", (128,)),
]


@pytest.mark.parametrize("layout, dtype, shape", CASES, ids=lambda c: str(c))
def test_slot_formulas_match_layout_tables(layout: dict, dtype: str, shape: tuple) -> None:
    table = fragment(layout, dtype, shape)  # (threads, slots) flat element index, -1 unused
    tid = np.arange(num_threads(layout))
    slots = slot_coords(layout, shape, NumpyBuilder(), tid)
    got = []
    for s in slots:
        if len(s) == 2:
            r, c = (np.broadcast_to(x, tid.shape) for x in s)
            got.append(r * shape[1] + c)
        else:
            got.append(np.broadcast_to(s[0], tid.shape))
    got = np.stack(got, axis=1)
    assert got.shape == table.shape
    assert (got == table).all()
