"""Shared-access analysis: who touches a shared tile, how, and what that allows (an analysis, not a pass).

For a shared tile (`tk.alloc` of an st or sv) it computes
* `tile_uses`: every warp-wide access to it, in program order, as a TileUse: the op, the
  instruction's address pattern (tkir/layout.py) and the kind of consumer (`ldmatrix.x4`/
  `stmatrix.x4` for 16-bit mma fragments, `ld/st.shared.v2` for f32 accumulators, `ld/st.shared.v4`
  (or .v2/.b32) for `row` tiles, 4-byte accesses for vectors, bf16 pairs for the staged epilogue,
  and the hardware paths `wgmma.desc` (core matrices: 8 rows x 16 B) and `tma`);
* `swizzle_problem`: why a layout is one some consumer cannot read or write (None when all can);
* `choose_swizzle`: select-swizzle's decision rule for one tile (passes/select_swizzle.py says it);
* `access_report`: bank-conflicts' entry for one access: its degree (wavefronts per 128-byte phase of
  the worst instruction, 32 banks x 4 bytes) under the tile's layout and under the plain layout.

select-swizzle and bank-conflicts apply these to every tile; create-tma applies the same two decisions
to the epilogue staging tile it creates after both ran (its swizzle is `choose_swizzle`'s, its report
`access_report`'s), so the report and the bank model cover it.
Register layouts come from infer-layouts; a register tile without one counts as a `row` tile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from tkir.access_report import AccessReport
from tkir.diagnostics import CompileError
from tkir.facts import FactError
from tkir.ir import Operation, Value, uses_of
from tkir.layout import (
    BANK_BYTES,
    CHUNK_BYTES,
    INTERLEAVED,
    SWIZZLE_ALIGN,
    SWIZZLE_SPANS,
    WARP,
    Access,
    RegisterLayout,
    SharedLayout,
    bf16_pair_pattern,
    conflict_degree,
    core_matrix_pattern,
    dtype_bytes,
    fragment,
    layout_of,
    ldmatrix_pattern,
    make_layout,
    register_access,
    row_layout_warps,
    tma_pattern,
)
from tkir.passmanager import Options, PassError
from tkir.target import DEFAULT_WARPS
from tkir.types import GlobalType, TileType, VectorType, is_register

STAGED_SWIZZLE = 128  # the backend writes tk.store_staged's stage as 128B-swizzled 64-column panels
                      # (backend/rules_wgmma.py), one TMA store box each

# "tma": a TMA copy (or its cp.async fallback); "wgmma": a wgmma descriptor operand; "ldmatrix": an
# mma.sync operand; "ldst": thread loads/stores of a register tile or vector; "staged": the staged
# epilogue's bf16-pair writes (tk.store_staged)
Consumer = Literal["tma", "wgmma", "ldmatrix", "ldst", "staged"]


@dataclass(frozen=True)
class TileUse:
    """One op's access to a shared tile: the instruction pattern and what the consumer is."""

    op: Operation
    access: Access
    consumer: Consumer
    major: str | None = None  # wgmma operands: "K" or "MN"


def no_producer(kernel: Operation) -> bool:
    """The source asked for no producer warpgroup, `@warpgroups(consumers=N, producers=0)`: create-tma leaves
    its loads into shared memory as cp.async copies (pipeline-cp-async rings them), so that is also how
    they write the tile here."""
    wg = kernel.attrs.get("warpgroups") if kernel.name == "tk.kernel" else None
    return isinstance(wg, dict) and wg.get("producers") == 0


def tile_uses(root: Operation, tile: Value, options: Options) -> list[TileUse]:
    """Every access to shared `tile` under `root`, in program order. A register layout that does not fit
    its tile (IR text can say anything) is a located error at the op that reads or writes the tile."""
    try:
        return _tile_uses(root, tile, options)
    except FactError:
        raise
    except ValueError as e:
        op = next((o for o, _ in uses_of(root, tile) if _misfit(o) is not None), None)
        why = _misfit(op) if op is not None else str(e)
        raise CompileError(op.loc if op is not None else None, f"shared tile '{tile.name}': {why}") from None


def _misfit(op: Operation) -> str | None:
    """Why a register operand or result of `op` does not fit its layout, or None."""
    for v in (*op.operands, *op.results):
        t = v.type
        lay = layout_of(t) if isinstance(t, (TileType, VectorType)) and is_register(t) else None
        if lay is None:
            continue
        try:
            fragment(lay, t.dtype, t.shape if isinstance(t, TileType) else (t.n,))
        except ValueError as e:
            return f"layout of {v.name or 'a value'} does not fit {t.bare()}: {e}"
    return None


def _tile_uses(root: Operation, tile: Value, options: Options) -> list[TileUse]:
    t = tile.type
    shape = t.shape if isinstance(t, TileType) else (t.n,)
    lay = shared_layout(t)
    rows, row_bytes = lay.rows, lay.row_bytes
    out: list[TileUse] = []
    for op, idx in uses_of(root, tile):
        name = op.name
        fill = name in ("tk.load", "tma.load") and not op.results and idx == 0
        drain = name in ("tk.store", "tma.store") and idx == 1 and isinstance(op.operands[0].type, GlobalType)
        if fill or drain:
            acc = tma_pattern(rows, row_bytes, lay.box_bytes)
            if options.no_tma or op.attrs.get("no_tma") or (fill and no_producer(root)):
                acc.op, acc.hardware = "cp.async", False
            out.append(TileUse(op, acc, "tma" if acc.hardware else "ldst"))
        elif name == "tk.load" and op.results and op.attrs.get("trans") is True:
            out.append(TileUse(op, transposed_load_access(reg_layout(op.result), t.dtype, shape), "ldst"))
        elif name == "tk.load" and op.results:
            acc = register_access(True, reg_layout(op.result), t.dtype, shape)
            out.append(TileUse(op, acc, "ldst"))
        elif name == "tk.store" and idx == 0:
            acc = register_access(False, reg_layout(op.operands[1]), t.dtype, shape)
            out.append(TileUse(op, acc, "ldst"))
        elif name == "tk.store_staged" and idx == 2 and isinstance(t, TileType):
            out += staged_store_uses(op, t)
        elif name == "tk.mma" and idx in (0, 1):
            trans = bool(op.attrs.get("trans_a" if idx == 0 else "trans_b"))
            if options.target == "sm_80":
                # A (M x K) and N x K B: ldmatrix.x4; K x N B: ldmatrix.x4.trans (HOPPER §6.3)
                op_name = "ldmatrix.x4.trans" if (idx == 1) != trans else "ldmatrix.x4"
                out.append(TileUse(op, ldmatrix_pattern(op_name, rows, row_bytes), "ldmatrix"))
            else:
                k_major = (idx == 0) != trans  # A plain and B transposed are K-major
                out.append(TileUse(op, core_matrix_pattern(rows, row_bytes), "wgmma", "K" if k_major else "MN"))
    return out


def staged_store_uses(op: Operation, stage: TileType) -> list[TileUse]:
    """`tk.store_staged %G, %v, %stage, ...`: the warpgroups write their accumulator rows into the stage as
    bf16 pairs (st.shared.b32), then TMA stores read it (a hardware path)."""
    lay = shared_layout(stage)
    return [TileUse(op, bf16_pair_pattern("st.shared.b32", lay.rows, lay.row_bytes), "staged"),
            TileUse(op, tma_pattern(lay.rows, lay.row_bytes, lay.box_bytes), "tma")]


def swizzle_problem(layout: SharedLayout, uses: list[TileUse]) -> str | None:
    """Why no consumer-compatible layout can use this swizzle (None: every consumer can)."""
    why = layout.problem()
    if why:
        return why
    for u in uses:
        if u.consumer == "wgmma" and layout.swizzle == 0 and layout.row_bytes != CHUNK_BYTES:
            return (f"wgmma reads an unswizzled operand only as 16-byte rows of core matrices, "
                    f"not {layout.row_bytes}-byte rows (HOPPER.md §2.3); the interleaved layout "
                    f"(16-byte panels) is the unswizzled form it reads")
        if u.consumer == "staged" and layout.swizzle != STAGED_SWIZZLE:
            return (f"tk.store_staged writes its staging tile as {STAGED_SWIZZLE}B-swizzled panels "
                    f"(the backend's staged epilogue)")
    return None


def choose_swizzle(alloc: Operation, t: TileType, uses: list[TileUse], options: Options) -> int:
    """select-swizzle's decision for the shared tile `alloc` defines (rules in passes/select_swizzle.py)."""
    if options.swizzle == "none":
        return unswizzled(t, uses)
    override = alloc.attrs.get("swizzle")
    if override == 0:
        return unswizzled(t, uses)
    if override is not None:
        lay = SharedLayout(t.dtype, t.rows, t.cols, override if isinstance(override, int) else -1)
        why = swizzle_problem(lay, uses)
        if why is not None:
            name = alloc.result.name or "tile"
            raise PassError(alloc.loc, f"@swizzle({override}) cannot be used for shared tile '{name}' "
                            f"({t.bare()}, rows of {lay.row_bytes} bytes): {why}",
                            hint="remove the annotation to let select-swizzle choose")
        return int(override)
    wide_first = any(u.consumer in ("tma", "wgmma") for u in uses)
    order = sorted(SWIZZLE_SPANS, reverse=wide_first)
    best, best_degree = None, None
    for span in order:
        lay = SharedLayout(t.dtype, t.rows, t.cols, span)
        if swizzle_problem(lay, uses) is not None:
            continue
        degree = max((conflict_degree(u.access, lay) for u in uses), default=1)
        if best_degree is None or degree < best_degree:
            best, best_degree = span, degree
    if best is None:  # no consumer-compatible span: leave it plain (the verifier-level fallback)
        return 0
    return best


def unswizzled(t: TileType, uses: list[TileUse]) -> int:
    """The unswizzled layout for a tile: interleaved (16-byte panels) when wgmma reads it and its
    rows are wider than one core-matrix row, else plain rows."""
    row_bytes = SharedLayout(t.dtype, t.rows, t.cols).row_bytes
    if row_bytes > CHUNK_BYTES and any(u.consumer == "wgmma" for u in uses):
        return INTERLEAVED
    return 0


def access_report(tile: Value, use: TileUse, layout: SharedLayout) -> AccessReport:
    """bank-conflicts' entry for one access: its degree under `layout` and under the plain layout."""
    plain = SharedLayout(layout.dtype, layout.rows, layout.cols)
    return AccessReport(use.access.op, tile.name or "", conflict_degree(use.access, layout),
                        conflict_degree(use.access, plain), use.access.hardware, use.major)


def shared_layout(t: TileType | VectorType) -> SharedLayout:
    """The physical layout a shared tile's or vector's type states (swizzle and padding)."""
    if isinstance(t, VectorType):
        return SharedLayout(t.dtype, 1, t.n)
    return SharedLayout(t.dtype, t.rows, t.cols, int(t.get("swizzle", 0) or 0), int(t.get("pad", 0) or 0))


def with_layout(t: TileType, layout: SharedLayout) -> TileType:
    """`t` with `layout`'s swizzle, its alignment and its padding (none when 0) in the type."""
    t = t.with_attr("swizzle", layout.swizzle).with_attr("align", SWIZZLE_ALIGN[layout.swizzle])
    return t.with_attr("pad", layout.pad or None)


def transposed_load_access(layout: RegisterLayout, dtype: str, src_shape: tuple[int, int]) -> Access:
    """`%x = tk.load %a {trans = true}`: element (r, c) of x comes from a[c, r].

    16-bit mma fragments use ldmatrix with the opposite `.trans` of a plain load (ldmatrix moves 8x8
    matrices of 16-byte rows of `a` either way, HOPPER §6.3), so the shared pattern is ldmatrix's over
    `a`. Any other layout reads element by element: register slot j of each lane is one access to the
    word holding a[c, r] (a row chunk of x is a column of a, so no vector access applies)."""
    rows, cols = src_shape
    eb = dtype_bytes(dtype)
    kind = layout.kind
    if kind in ("wgmma_acc", "wgmma_a", "mma_a", "mma_c") and eb == 2:
        return ldmatrix_pattern("ldmatrix.x4.trans", rows, cols * eb)
    if kind == "mma_b" and eb == 2:
        return ldmatrix_pattern("ldmatrix.x4", rows, cols * eb)
    frag = fragment(layout, dtype, (cols, rows))  # x is cols x rows
    rs, cs = [], []
    for w in range(frag.shape[0] // WARP):
        block = frag[w * WARP:(w + 1) * WARP]
        for j in range(block.shape[1]):
            idx = block[:, j]
            xr, xc = idx // rows, idx % rows  # x[xr, xc] = a[xc, xr]
            rs.append(np.where(idx >= 0, xc, -1))
            cs.append(np.where(idx >= 0, (xr * eb) // BANK_BYTES * BANK_BYTES, -1))
    op = f"ld.shared.b{8 * min(eb, BANK_BYTES)}"
    return Access(op, BANK_BYTES, np.stack(rs), np.stack(cs))


def reg_layout(v: Value) -> RegisterLayout:
    """The register layout of `v` (infer-layouts'), or the default `row` layout without one."""
    layout = layout_of(v.type) if is_register(v.type) else None
    if layout is not None:
        return layout
    t = v.type
    vec = max(CHUNK_BYTES // dtype_bytes(t.dtype), 1)
    if isinstance(t, TileType):
        return make_layout("row", warps=row_layout_warps(t.rows, t.cols, vec, DEFAULT_WARPS), vec=vec)
    return make_layout("row_vec", warps=1)
