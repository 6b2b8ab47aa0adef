"""The backend's slot formulas address exactly the elements tkir.layout assigns to each thread."""

from __future__ import annotations

import numpy as np
import pytest

from tkir.backend.fragments import NumpyBuilder, row_groups, shared_offset, slot_coords
from tkir.layout import SharedLayout, fragment, make_layout

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
    # the sm_80 path (mma.sync m16n8k16, HOPPER.md §6.3)
    (make_layout("mma_c", warps=8), "f32", (128, 256)),
    (make_layout("mma_c", warps=4), "f32", (64, 64)),
    (make_layout("mma_c", warps=2), "bf16", (64, 128)),
    (make_layout("mma_a", warps=4), "bf16", (64, 64)),
    (make_layout("mma_a", warps=2), "bf16", (64, 32)),
    (make_layout("mma_b", warps=4), "bf16", (64, 128)),
    (make_layout("mma_b", warps=1), "bf16", (32, 24)),
    (make_layout("acc_row_vec", warps=4), "f32", (64,)),
    (make_layout("acc_row_vec", warps=2), "f32", (128,)),
    (make_layout("col_vec", of="mma_c", warps=4), "f32", (64,)),
    # mma_c over a 2-D grid of warps (warps_n), and the vectors that pair with it
    (make_layout("mma_c", warps=8, warps_n=2), "f32", (256, 128)),
    (make_layout("mma_c", warps=8, warps_n=4), "bf16", (128, 256)),
    (make_layout("mma_c", warps=4, warps_n=2), "f32", (64, 48)),
    (make_layout("acc_row_vec", warps=8, warps_n=2), "f32", (256,)),
    (make_layout("acc_row_vec", warps=8, warps_n=4), "f32", (128,)),
    (make_layout("col_vec", of="mma_c", warps=8, warps_n=4), "f32", (256,)),
    (make_layout("col_vec", of="mma_c", warps=4, warps_n=2), "f32", (48,)),
    # rows split over warps (`parts`): wide rows of short tiles
    (make_layout("row", warps=16, vec=8, parts=4), "f32", (4, 8192)),
    (make_layout("row", warps=4, vec=8, parts=4), "bf16", (1, 4096)),
    (make_layout("row", warps=8, vec=4, parts=2), "f32", (8, 256)),
    (make_layout("row", warps=8, vec=8, parts=8), "bf16", (1, 2048)),
    (make_layout("row_vec", warps=16, parts=4), "f32", (4,)),
    (make_layout("row_vec", warps=8, parts=2), "f32", (8,)),
    (make_layout("col_vec", of="row", warps=16, vec=8, parts=4), "f32", (8192,)),
    (make_layout("col_vec", of="row", warps=8, vec=8, parts=2), "f32", (128,)),
    (make_layout("col_vec", of="row", warps=8, vec=8, parts=4), "f32", (1024,)),
]


@pytest.mark.parametrize("layout, dtype, shape", CASES, ids=lambda c: str(c))
def test_slot_formulas_match_layout_tables(layout: dict, dtype: str, shape: tuple) -> None:
    table = fragment(layout, dtype, shape)  # (threads, slots) flat element index, -1 unused
    tid = np.arange(layout.threads)
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


def test_row_reduction_of_a_warp_grid_is_refused() -> None:
    """A row of an mma_c tile over a 2-D warp grid is split over warps: the quad shuffle alone would
    reduce a part of it, so the backend refuses (infer-layouts never gives reduced tiles a grid)."""
    from tkir.facts import FactError

    with pytest.raises(FactError, match="row reduction .* would combine 2 warps' parts of each row"):
        row_groups(make_layout("mma_c", warps=8, warps_n=2), (256, 128))


@pytest.mark.parametrize("kind", ["wgmma_acc", "mma_c"])
def test_accumulator_rows_are_shared_by_a_quad(kind: str) -> None:
    layout = make_layout(kind, **({"wg": 1} if kind == "wgmma_acc" else {"warps": 4}))
    assert row_groups(layout, (64, 64)) == (4, 4)
    table = fragment(layout, "f32", (64, 64)) // 64  # the row of every slot
    quads = table.reshape(-1, 4, table.shape[1])
    assert (quads == quads[:, :1]).all()  # the 4 lanes of a quad hold the same rows, slot by slot


SHARED = [SharedLayout("bf16", 64, 256, 128), SharedLayout("bf16", 128, 64, 128), SharedLayout("bf16", 64, 32, 64),
          SharedLayout("bf16", 32, 16, 32), SharedLayout("f32", 16, 64, 128), SharedLayout("bf16", 48, 64),
          SharedLayout("bf16", 64, 64, 0, 16), SharedLayout("bf16", 16, 40, 0, 16)]


@pytest.mark.parametrize("layout", SHARED, ids=str)
def test_shared_offset_matches_shared_layout(layout: SharedLayout) -> None:
    rows, cols = np.meshgrid(np.arange(layout.rows), np.arange(layout.row_bytes), indexing="ij")
    got = shared_offset(layout, rows, cols, NumpyBuilder())
    assert (got == layout.offset(rows, cols)).all()
    # a bijection onto the tile's bytes (so no two logical bytes share storage)
    assert len(np.unique(got)) == rows.size and got.max() < layout.size_bytes


@pytest.mark.parametrize("span", [32, 64, 128])
def test_swizzle_in_panel_is_the_layouts_swizzle(span: int) -> None:
    """The staged epilogue's addresses (backend.fragments.swizzle_in_panel) equal tkir.layout's swizzle
    of row * span + byte, for every row of a 64-row panel and every byte of a row."""
    from tkir.backend.fragments import swizzle_in_panel
    from tkir.layout import swizzle

    row, byte = np.meshgrid(np.arange(64), np.arange(span), indexing="ij")
    got = swizzle_in_panel(row, byte, span, NumpyBuilder())
    assert (got == swizzle(row * span + byte, span)).all()
    assert len(np.unique(got)) == got.size  # a bijection on the panel


@pytest.mark.parametrize("b", [2, 3, 4, 5, 6, 8, 12, 16, 64, 96, 128, 1000])
def test_index_builder_arithmetic_by_constants(b: int) -> None:
    """LLVMBuilder (the index arithmetic of every rule) strength-reduces by powers of two: mul, div and
    rem of a run-time value by a constant b, evaluated from the emitted LLVM, equal the integer results
    for powers of two and for other b alike. (A random mutation sample: `and` -> `or` in mul's
    power-of-two test, shifting by b.bit_length() - 1 for any constant b, left every example's PTX as
    it was -- they only scale by powers of two -- and no test saw it.)"""
    from llvm_eval_test_support import LLVMText

    from tkir.backend.fragments import LLVMBuilder
    from tkir.backend.llvm_text import LLVMWriter

    w = LLVMWriter()
    ib = LLVMBuilder(w)
    x = w.op("add i32 %n, 7", "x")  # a run-time value: the evaluator gives parameters 4096
    got = {name: getattr(ib, name)(x, b) for name in ("mul", "div", "rem")}
    text = LLVMText("define void @k(i32 %n) {\n" + "\n".join(w.lines) + "\n}\n")
    xv = 4096 + 7
    assert {n: text.value(v, 0) for n, v in got.items()} == {"mul": xv * b, "div": xv // b, "rem": xv % b}
    assert ib.mul(5, b) == 5 * b and ib.div(500, b) == 500 // b and ib.rem(500, b) == 500 % b  # folded
