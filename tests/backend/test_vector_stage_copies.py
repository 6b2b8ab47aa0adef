"""The backend's copies of a ring-buffered shared vector's stage (tests/filecheck/passes/pipeline-vectors.tk).

sm_90a: one 1-D TMA box per copy, whose coordinate is the vector's index times its length (the IR counts vectors,
TMA elements). sm_80: cp.async copies the vector as the one-row tile it is (backend/rules_sm80.py `row_tile`): row
r of a tensor's last two dims, or the one row of a one-dim tensor. The interpreter runs the IR, not these, so
these are checked here on the LLVM text and on the helper.
"""

from __future__ import annotations

import re
from pathlib import Path

import tkir
from tkir.backend.rules_sm80 import row_tile
from tkir.backend.values import Global, Smem
from tkir.types import GlobalType, TileType, VectorType

KERNEL = Path(__file__).resolve().parents[2] / "tests" / "filecheck" / "passes" / "pipeline-vectors.tk"


def test_the_tma_box_starts_at_the_vectors_first_element() -> None:
    llvm = tkir.compile(str(KERNEL)).asm["llvm"]
    calls = re.findall(r'cp\.async\.bulk\.tensor\.1d\.[^"]*"[^(]*\(i32 %[\w.]+, ptr %L_tma, i32 %[\w.]+, i32 (%[\w.]+)\)',
                       llvm)
    assert len(calls) == 1, calls
    x = re.escape(calls[0])
    assert re.search(rf"{x} = mul i32 %k[\w.]*, 64\b", llvm), "the coordinate is not the loop index times 64"


def test_sm80_copies_a_vector_as_a_one_row_tile() -> None:
    vec = Smem("%stage", VectorType("sv", "f32", 64, (("align", 16),)))
    row_t = TileType("st", "f32", 1, 64, (("align", 16),))
    g3 = Global("%p", GlobalType("f32", ("B", "H", "NP")))
    dst, src, coords = row_tile(vec, g3, ["%b", "%h", "%i"])
    assert (dst.type, src, coords) == (row_t, g3, ["%b", "%h", "%i"])  # row h of [H, NP], tile column i
    g1 = Global("%p", GlobalType("f32", ("M",)))
    dst, src, coords = row_tile(vec, g1, ["%i"])
    assert (dst.type, src.type.dims, coords) == (row_t, (1, "M"), ["0", "%i"])  # the one row of [1, M]
    tile = Smem("%t", TileType("st", "bf16", 64, 64))
    assert row_tile(tile, g3, ["%b", "%h", "%i"]) == (tile, g3, ["%b", "%h", "%i"])
