"""Properties of tkir/layout.py: swizzles are bijections, fragments cover their tiles, and the bank
model agrees with brute-force enumeration for every access pattern the passes emit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tkir.layout import (
    SWIZZLE_SPANS,
    SharedLayout,
    acc_pair_pattern,
    addresses,
    bf16_pair_pattern,
    brute_force_wavefronts,
    conflict_degree,
    conversion,
    core_matrix_pattern,
    dtype_bytes,
    fragment,
    ldmatrix_pattern,
    make_layout,
    mma_warps_n,
    register_access,
    regs_per_thread,
    row_chunk_pattern,
    row_layout_warps,
    row_split,
    swizzle,
    tma_pattern,
    wavefronts,
)

DTYPES = ("bf16", "f32", "e4m3")
QUICK = settings(max_examples=40, deadline=None)


@st.composite
def shared_layouts(draw: st.DrawFn) -> SharedLayout:
    """Every (dtype, shape, swizzle, pad) the passes can choose: dims multiples of 16."""
    dtype = draw(st.sampled_from(DTYPES))
    rows = 16 * draw(st.integers(1, 8))
    cols = 16 * draw(st.integers(1, 16))
    span = draw(st.sampled_from([s for s in SWIZZLE_SPANS
                                 if s == 0 or (cols * dtype_bytes(dtype)) % s == 0]))
    pad = 0 if span else draw(st.sampled_from((0, 4, 8, 16, 32, 64)))
    return SharedLayout(dtype, rows, cols, span, pad)


@QUICK
@given(shared_layouts())
def test_swizzled_layout_is_a_bijection(lay: SharedLayout) -> None:
    assert lay.problem() is None
    r, b = np.meshgrid(np.arange(lay.rows), np.arange(lay.row_bytes), indexing="ij")
    offs = lay.offset(r, b).ravel()
    assert len(np.unique(offs)) == offs.size             # injective
    assert offs.min() >= 0 and offs.max() < lay.size_bytes
    if not lay.pad:
        assert offs.size == lay.size_bytes                # onto: every byte of the tile is used
    # chunks stay whole: the swizzle permutes 16-byte chunks, never splits them
    if lay.pad % 16 == 0:
        assert np.all(lay.offset(r, b)[:, ::16] % 16 == 0)


@given(st.integers(0, 1 << 20), st.sampled_from(SWIZZLE_SPANS))
def test_swizzle_is_an_involution_within_its_period(o: int, span: int) -> None:
    assert swizzle(swizzle(o, span), span) == o


def test_swizzle_matches_hopper_probe() -> None:
    # HOPPER.md §3.1: chunk c of 128-byte line L goes to c ^ (L & 7) for 128B
    for line in range(8):
        for chunk in range(8):
            assert swizzle(line * 128 + chunk * 16, 128) == line * 128 + (chunk ^ line) * 16
    assert swizzle(0x1F0, 64) == 0x1F0 ^ 0x30


TILE_LAYOUTS = [
    (make_layout("wgmma_acc", wg=1), "f32", (64, 64)),
    (make_layout("wgmma_acc", wg=2), "f32", (128, 256)),
    (make_layout("wgmma_acc", wg=1), "bf16", (128, 32)),
    (make_layout("wgmma_a", wg=1), "bf16", (64, 64)),
    (make_layout("wgmma_a", wg=1), "f32", (64, 32)),
    (make_layout("wgmma_a", wg=2), "e4m3", (128, 64)),
    (make_layout("mma_c", warps=8), "f32", (128, 64)),
    (make_layout("mma_c", warps=8, warps_n=2), "f32", (256, 128)),
    (make_layout("mma_c", warps=8, warps_n=4), "bf16", (128, 256)),
    (make_layout("mma_a", warps=4), "bf16", (64, 32)),
    (make_layout("row", warps=4, vec=8), "bf16", (16, 1024)),
    (make_layout("row", warps=4, vec=8), "f32", (16, 64)),
    (make_layout("row", warps=16, vec=8, parts=4), "bf16", (4, 8192)),
    (make_layout("row", warps=8, vec=4, parts=8), "f32", (1, 4096)),
]


@given(st.sampled_from([1, 2, 4, 8, 16, 32]), st.sampled_from([256, 1024, 4096, 16384]),
       st.sampled_from([4, 8]), st.sampled_from([4, 8, 16, 32]))
def test_row_split_uses_every_warp_and_covers_the_tile(rows: int, cols: int, vec: int, warps: int) -> None:
    """row_split: G * P warps, each element held once, and fewer elements per thread than unsplit."""
    split = row_split(rows, cols, vec, warps, 64)
    if split is None:
        return
    groups, parts = split
    assert groups * parts == warps and parts >= 2
    lay = make_layout("row", warps=warps, vec=vec, parts=parts)
    f = fragment(lay, "f32", (rows, cols))
    held = f[f >= 0]
    assert sorted(held.tolist()) == list(range(rows * cols))
    unsplit = rows * cols // (row_layout_warps(rows, cols, vec, warps) * 32)
    assert (f >= 0).sum(axis=1).max() < unsplit


@st.composite
def mma_warp_grids(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """(warps, warps_n, rows, cols) of an mma_c accumulator over a 2-D warp grid: any block of up to
    16 warps, any grid of them with 2 or more columns, rows and cols multiples of 8 (some of which
    the grid cannot split)."""
    warps = draw(st.sampled_from([2, 4, 6, 8, 12, 16]))
    warps_n = draw(st.sampled_from([n for n in range(2, warps + 1) if warps % n == 0]))
    rows = 8 * draw(st.integers(1, 40))
    cols = 8 * draw(st.integers(1, 48))
    return warps, warps_n, rows, cols


@settings(max_examples=150, deadline=None)
@given(mma_warp_grids(), st.sampled_from(["f32", "bf16"]))
def test_mma_warp_grid_is_a_bijection_onto_the_tile(grid: tuple[int, int, int, int], dtype: str) -> None:
    """The 2-D mma_c layout accepts exactly the tiles its (W/N) x N grid splits into whole m16 x n8
    blocks, and then maps (thread, slot) one-to-one onto the tile's elements, every slot used; each
    warp holds exactly its block, and every thread's rows and columns are those its acc_row_vec and
    col_vec of mma_c hold (what broadcasts and casts pair slot by slot). The backend's slot formulas
    (backend.fragments.slot_coords) give the same map."""
    from tkir.backend.fragments import NumpyBuilder, slot_coords

    warps, warps_n, rows, cols = grid
    wm = warps // warps_n
    lay = make_layout("mma_c", warps=warps, warps_n=warps_n)
    accepts = rows % (16 * wm) == 0 and cols % (8 * warps_n) == 0
    if not accepts:
        try:
            fragment(lay, dtype, (rows, cols))
        except ValueError:
            return
        raise AssertionError(f"{rows} x {cols} over a {wm} x {warps_n} grid should be refused")
    f = fragment(lay, dtype, (rows, cols))
    assert (f >= 0).all()                                          # every slot holds an element
    assert np.array_equal(np.sort(f.ravel()), np.arange(rows * cols))  # each element exactly once
    r, c = f // cols, f % cols
    warp = np.arange(32 * warps) // 32
    slab, width = rows // wm, cols // warps_n
    assert ((r // slab) == (warp // warps_n)[:, None]).all() and ((c // width) == (warp % warps_n)[:, None]).all()
    rv = fragment(make_layout("acc_row_vec", warps=warps, warps_n=warps_n), "f32", (rows,))
    cv = fragment(make_layout("col_vec", of="mma_c", warps=warps, warps_n=warps_n), "f32", (cols,))
    for t in range(0, 32 * warps, 7):
        assert set(r[t].tolist()) == set(rv[t].tolist()) and set(c[t].tolist()) == set(cv[t].tolist())
    tid = np.arange(32 * warps)
    got = np.stack([np.broadcast_to(sr, tid.shape) * cols + np.broadcast_to(sc, tid.shape)
                    for sr, sc in slot_coords(lay, (rows, cols), NumpyBuilder(), tid)], axis=1)
    assert np.array_equal(got, f)


def test_mma_warps_n_picks_the_fewest_loads_per_mma() -> None:
    """infer-layouts' grid rule (tkir.layout.mma_warps_n): 64 x 64 warp tiles for both 8-warp gemm
    tiles, the 1-D layout when no grid has whole n16 pairs, ties to fewer column warps."""
    assert mma_warps_n(256, 128, 8) == 2 and mma_warps_n(128, 256, 8) == 4
    assert mma_warps_n(64, 64, 4) == 2
    assert mma_warps_n(128, 16, 8) == 1     # 16 columns: no pair for a second warp column
    assert mma_warps_n(32, 32, 2) == 1      # 16 x 32 and 32 x 16 warp tiles load the same: keep rows
    assert mma_warps_n(16, 64, 1) == 1


def test_tile_fragments_cover_each_element_once() -> None:
    for layout, dtype, shape in TILE_LAYOUTS:
        f = fragment(layout, dtype, shape)
        held = f[f >= 0]
        assert sorted(held.tolist()) == list(range(shape[0] * shape[1])), (layout, shape)


def test_fragment_formulas_of_hopper_examples() -> None:
    # HOPPER.md §1.5: thread 37 of m64nN: d0=(17,2), d1=(17,3), d2=(25,2), d3=(25,3), d4=(17,10)
    f = fragment(make_layout("wgmma_acc", wg=1), "f32", (64, 64))
    assert [(int(x) // 64, int(x) % 64) for x in f[37][:5]] == [(17, 2), (17, 3), (25, 2), (25, 3), (17, 10)]
    assert regs_per_thread(make_layout("wgmma_acc", wg=2), "f32", (128, 256)) == 128  # m64n256: N/2
    # mma_b is replicated: every warp holds all of B
    f = fragment(make_layout("mma_b", warps=2), "bf16", (16, 8))
    assert sorted(f[:32].ravel().tolist()) == list(range(128)) == sorted(f[32:].ravel().tolist())


def test_conversion_costs() -> None:
    acc, a = make_layout("wgmma_acc", wg=1), make_layout("wgmma_a", wg=1)
    assert conversion(acc, a, "bf16", (64, 64)) == ("none", 0)        # §1.6: same registers
    via, n = conversion(acc, a, "f32", (64, 32))                        # tf32 A: other columns
    assert via == "shuffle" and n > 0
    c, b = make_layout("mma_c", warps=4), make_layout("mma_b", warps=4)
    assert conversion(c, b, "bf16", (64, 64))[0] == "smem"  # every warp needs all of B


# --- the bank model ------------------------------------------------------------------------------


@st.composite
def emitted_accesses(draw: st.DrawFn):
    """An access pattern the passes emit, on a layout select-swizzle/bank-conflicts can choose."""
    kind = draw(st.sampled_from(["ldmatrix", "acc_pair", "bf16_pair", "row", "core", "tma", "vector"]))
    rows = 16 * draw(st.integers(1, 4))
    span = draw(st.sampled_from(SWIZZLE_SPANS))
    pad = 0 if span else draw(st.sampled_from((0, 16, 32)))
    if kind == "ldmatrix":
        cols = 16 * draw(st.integers(1, 8))
        lay = SharedLayout("bf16", rows, cols, span, pad)
        acc = ldmatrix_pattern("ldmatrix.x4", rows, cols * 2)
    elif kind == "acc_pair":
        cols = 8 * draw(st.integers(1, 16))
        lay = SharedLayout("f32", rows, cols, span, pad)
        acc = acc_pair_pattern("st.shared.v2", rows, cols * 4)
    elif kind == "bf16_pair":  # the staged epilogue's writes (create-tma)
        cols = 8 * draw(st.integers(1, 16))
        lay = SharedLayout("bf16", rows, cols, span, pad)
        acc = bf16_pair_pattern("st.shared.b32", rows, cols * 2)
    elif kind == "row":  # fp8 chunks of 1 to 16 bytes: sub-word accesses (b8, b16) included
        dtype = draw(st.sampled_from(("bf16", "f32", "e4m3")))
        cols = 16 * draw(st.integers(1, 16))
        vec = draw(st.sampled_from((1, 2, 4, 8, 16) if dtype == "e4m3" else (4, 8)))
        layout = make_layout("row", warps=row_layout_warps(rows, cols, vec, 4), vec=vec)
        lay = SharedLayout(dtype, rows, cols, span, pad)
        acc = row_chunk_pattern("ld.shared.v4", layout, dtype, rows, cols)
    elif kind == "core":  # wgmma operands: 16-bit, or fp8 (the same 16-byte core-matrix rows)
        dtype = draw(st.sampled_from(("bf16", "e4m3")))
        cols = 16 * draw(st.integers(1, 8))
        eb = dtype_bytes(dtype)
        lay, acc = SharedLayout(dtype, rows, cols, span, pad), core_matrix_pattern(rows, cols * eb)
    elif kind == "tma":
        dtype = draw(st.sampled_from(("bf16", "e4m3")))
        cols = 16 * draw(st.integers(1, 8))
        eb = dtype_bytes(dtype)
        lay, acc = SharedLayout(dtype, rows, cols, span, pad), tma_pattern(rows, cols * eb)
    else:
        n = 64 * draw(st.integers(1, 2))
        layout = draw(st.sampled_from([make_layout("acc_row_vec", wg=1), make_layout("row_vec", warps=4),
                                       make_layout("col_vec", of="wgmma_acc", wg=1)]))
        lay, acc = SharedLayout("f32", 1, n), register_access(True, layout, "f32", (n,))
    if lay.problem() is not None:
        lay = SharedLayout(lay.dtype, lay.rows, lay.cols, 0, pad)
    return lay, acc


@QUICK
@given(emitted_accesses())
def test_bank_model_equals_brute_force(case) -> None:
    lay, acc = case
    addrs = addresses(acc, lay)
    model = wavefronts(addrs, acc.width)
    assert np.all(addrs[addrs >= 0] % acc.width == 0)  # every lane's access is width-aligned
    for i in range(0, addrs.shape[0], max(1, addrs.shape[0] // 8)):  # a spread of instructions
        assert model[i].tolist() == brute_force_wavefronts(addrs[i].tolist(), acc.width)


def test_the_classic_cases() -> None:
    # 16-byte column chunks of 128-byte rows: 8-way unswizzled, conflict-free with 128B (§3.3)
    ld = ldmatrix_pattern("ldmatrix.x4", 64, 128)
    assert conflict_degree(ld, SharedLayout("bf16", 64, 64)) == 8
    assert conflict_degree(ld, SharedLayout("bf16", 64, 64, 128)) == 1
    assert conflict_degree(ld, SharedLayout("bf16", 64, 64, 0, 16)) == 1  # 16 B of padding
    # contiguous v4 rows never conflict, swizzled or not
    row = row_chunk_pattern("ld.shared.v4", make_layout("row", warps=4, vec=8), "bf16", 16, 1024)
    assert conflict_degree(row, SharedLayout("bf16", 16, 1024)) == 1
    # brute force: 32 lanes reading the same word is a broadcast, 32 lanes down one bank are 32-way
    assert brute_force_wavefronts([0] * 32, 4) == [1]
    assert brute_force_wavefronts([128 * i for i in range(32)], 4) == [32]


def test_fp8_cases() -> None:
    """1-byte elements: an fp8 GEMM's K-major operand (128 e4m3 = one 128-byte row) is read by wgmma's
    core-matrix fetches 8-way unswizzled and conflict-free with the 128B swizzle, as a 64-wide bf16 tile is;
    a warp's 1-byte accesses are counted in bank words: 32 consecutive bytes are one wavefront (lanes sharing
    a word are served together), one byte from each of 32 rows of a 128-byte pitch is 32-way."""
    core = core_matrix_pattern(128, 128)
    assert conflict_degree(core, SharedLayout("e4m3", 128, 128)) == 8
    assert conflict_degree(core, SharedLayout("e4m3", 128, 128, 128)) == 1
    row = row_chunk_pattern("ld.shared.v4", make_layout("row", warps=4, vec=16), "e4m3", 64, 128)
    assert row.width == 16 and conflict_degree(row, SharedLayout("e4m3", 64, 128, 128)) == 1
    assert wavefronts(np.arange(32)[None, :], 1).tolist() == [[1]] == [brute_force_wavefronts(list(range(32)), 1)]
    down = [128 * i for i in range(32)]
    assert wavefronts(np.array([down]), 1).tolist() == [[32]] == [brute_force_wavefronts(down, 1)]
    one = row_chunk_pattern("ld.shared.b8", make_layout("row", warps=4, vec=1), "e4m3", 64, 128)
    assert one.width == 1 and conflict_degree(one, SharedLayout("e4m3", 64, 128)) == 1


def _per_instruction(instructions: list[tuple[list[int], list[int]]]) -> tuple[np.ndarray, np.ndarray]:
    """(rows, bytecols) arrays built one warp instruction at a time (the access patterns' definition)."""
    rows = np.array([r for r, _ in instructions], dtype=np.int64).reshape(-1, 32)
    cols = np.array([c for _, c in instructions], dtype=np.int64).reshape(-1, 32)
    return rows, cols


@QUICK
@given(st.sampled_from([0, 1, 7, 8, 16, 24, 33, 64, 128]), st.sampled_from([16, 32, 48, 64, 128, 256, 512]),
       st.sampled_from([None, 16, 32, 64, 128]), st.sampled_from([4, 8]))
def test_vectorised_patterns_match_their_per_instruction_definition(rows: int, row_bytes: int, box: int | None,
                                                                    pair: int) -> None:
    """tma_pattern, core_matrix_pattern and the accumulator pair patterns are built with whole-array
    numpy (the select-swizzle and bank-conflicts passes call them on every shared tile); each must equal
    the instruction-by-instruction construction its docstring describes."""
    if box is not None and row_bytes % box:
        box = None
    b = box or row_bytes
    cpb, total = b // 16, rows * (b // 16) * (row_bytes // b)
    want = _per_instruction([([(e % (rows * cpb)) // cpb if e < total else -1 for e in range(e0, e0 + 32)],
                              [(e // (rows * cpb)) * b + (e % (rows * cpb)) % cpb * 16 if e < total else -1
                               for e in range(e0, e0 + 32)]) for e0 in range(0, total, 32)])
    got = tma_pattern(rows, row_bytes, box)
    assert (got.rows == want[0]).all() and (got.bytecols == want[1]).all() and got.rows.shape == want[0].shape
    want = _per_instruction([([r0 + lane if r0 + lane < rows else -1 for lane in range(32)], [c0] * 32)
                             for c0 in range(0, row_bytes, 16) for r0 in range(0, rows, 32)])
    got = core_matrix_pattern(rows, row_bytes)
    assert (got.rows == want[0]).all() and (got.bytecols == want[1]).all() and got.rows.shape == want[0].shape
    pattern = acc_pair_pattern if pair == 8 else bf16_pair_pattern
    want = _per_instruction([([r0 + lane // 4 for lane in range(32)], [c0 + pair * (lane % 4) for lane in range(32)])
                             for r0 in range(0, rows - 7, 8) for c0 in range(0, row_bytes - 4 * pair + 1, 4 * pair)])
    got = pattern("st.shared", rows, row_bytes)
    assert (got.rows == want[0]).all() and (got.bytecols == want[1]).all() and got.rows.shape == want[0].shape
    assert got.rows.flags.writeable and got.rows.dtype == np.int64
