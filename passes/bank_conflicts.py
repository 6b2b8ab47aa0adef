"""bank-conflicts: the conflict degree of every shared-memory access, and fixes for the excess.

For each shared tile (`tk.alloc` of an st or sv) it lists the warp-wide instructions that touch
it (passes/analysis.py `tile_uses`: ldmatrix/stmatrix, ld/st.shared vectors, the staged
epilogue's bf16 pairs, and the hardware paths `wgmma.desc` and `tma`). Each gets its degree
(wavefronts per 128-byte phase of the worst instruction, 32 banks x 4 bytes) under the tile's
layout, and under the plain unswizzled, unpadded layout as `degree_before` (analysis
`access_report`, recorded as tkir/access_report.py AccessReports).

Rewrites
* a column reduction (`tk.reduce {axis = col}`, which the backend lowers through a scratch tile whose
  row padding tkir/layout.py column_scratch_pad chooses) gets the same entries for its store and its
  column reads, `tile = "scratch"`;
* a row reduction (`tk.reduce {axis = row}`) over a `row` tile whose rows are split over warps gets the
  entries of its cross-warp step (each part's f32 values stored to a scratch vector and read back by
  every part: tkir/layout.py row_exchange_accesses), the one that lowers a fused mean and variance
  (`stats = N`) for the group; any row reduction whose result vector holds rows in other threads than
  the reduced tile's gets the gather's (row_gather_accesses), `tile = "scratch"`;
* a transpose (`tk.transpose`) or a layout conversion through shared memory (`tk.convert_layout {via !=
  none}`, but an fp8 accumulator's to the 8-bit A fragment, which moves by shuffles) gets its scratch tile's
  store and read (tkir/layout.py relayout_scratch, the backend's padding), `tile = "scratch"`; staging
  tiles made after this pass carry entries from the pass that makes them (create-tma, stage-epilogue);
* each op touching shared memory gets `access = [{op = "ldmatrix.x4", tile = "a", degree = 1,
  degree_before = 8}, ...]` (hardware paths also `hardware = true`);
* where an access exceeds 1 and `Options.swizzle != "none"`: another swizzle when the tile's swizzle
  is not pinned (`tk.alloc {swizzle = N}` from @swizzle, or a wgmma operand's canonical layout
  with a conflict-free fetch already), else row padding `pad=N` for tiles no TMA or wgmma reads
  (their boxes and descriptors need dense rows). The best layout minimises the worst degree, then
  the bytes added.
Assumes infer-layouts (register layouts) and select-swizzle (swizzle/align) have run; without
them, register tiles count as `row` tiles and shared tiles as unswizzled.
"""

from __future__ import annotations

from tkir.access_report import ACCESS_ATTR, AccessReport, add_report
from tkir.ir import Module, Operation
from tkir.layout import (
    SWIZZLE_SPANS,
    Access,
    SharedLayout,
    column_scratch_accesses,
    conflict_degree,
    layout_of,
    register_access,
    relayout_scratch,
    row_exchange_accesses,
    row_gather_accesses,
)
from tkir.ops import ARG_KINDS, STATS_ATTR
from tkir.passes.analysis import (
    TileUse,
    access_report,
    shared_layout,
    swizzle_problem,
    tile_uses,
    transposed_load_access,
    with_layout,
)
from tkir.passmanager import Options, Pass
from tkir.scalar import FP8_DTYPES
from tkir.types import TileType

PAD_CHOICES = (4, 8, 16, 32, 64)  # bytes of row padding tried, smallest first


class BankConflicts(Pass):
    name = "bank-conflicts"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            stale = [op for op in kernel.walk() if ACCESS_ATTR in op.attrs]
            for op in stale:  # a rerun rewrites the entries where they were (the IR text stays put)
                op.attrs[ACCESS_ATTR] = []
            stats_seen: set[object] = set()  # fused mean/var groups whose exchange is listed
            for op in kernel.walk():
                if op.name == "tk.alloc":
                    self._tile(kernel, op, options)
                elif op.name == "tk.reduce" and str(op.attrs.get("axis")) == "col":
                    _column_scratch(op)
                elif op.name == "tk.reduce" and str(op.attrs.get("axis")) == "row":
                    _row_scratch(op, stats_seen)
                elif op.name == "tk.transpose" or (op.name == "tk.convert_layout"
                                                   and str(op.attrs.get("via", "none")) != "none"):
                    _relayout_scratch(op)
            for op in stale:
                if not op.attrs[ACCESS_ATTR]:
                    del op.attrs[ACCESS_ATTR]

    def _tile(self, kernel: Operation, alloc: Operation, options: Options) -> None:
        tile = alloc.result
        uses = tile_uses(kernel, tile, options)
        layout = shared_layout(tile.type)
        degrees = [conflict_degree(u.access, layout) for u in uses]
        if options.swizzle != "none" and isinstance(tile.type, TileType) and max(degrees, default=1) > 1:
            better = best_fix(alloc, uses, layout, max(degrees))
            if better is not None:
                layout = better
                tile.type = with_layout(tile.type, layout)
        for u in uses:
            add_report(u.op.attrs, access_report(tile, u, layout))


SCRATCH_TILE = "scratch"  # the tile name the report gives the backend's scratch area


def _column_scratch(op: Operation) -> None:
    """A column reduction's accesses to the scratch tile the backend stores its f32 tile in (the same
    tkir.layout functions choose its padding there): `degree` under that padding, `degree_before` unpadded."""
    t = op.operands[0].type
    lay, result = layout_of(t), layout_of(op.result.type)
    if lay is None or result is None or not isinstance(t, TileType):
        return  # before infer-layouts: nothing to predict
    _add_scratch(op, column_scratch_accesses(lay, t.rows, t.cols, result))


def _row_scratch(op: Operation, stats_seen: set[object]) -> None:
    """A row reduction's accesses to the backend's scratch vectors (backend/exchange.py): its cross-warp step
    (k = 2 values a row for a variance, a fused mean/var group, which one exchange serves, and an
    argmax/argmin; else 1) and the gather of its results into another layout."""
    t = op.operands[0].type
    lay, result = layout_of(t), layout_of(op.result.type)
    if lay is None or result is None or not isinstance(t, TileType):
        return  # before infer-layouts: nothing to predict
    kind, group = str(op.attrs["kind"]), op.attrs.get(STATS_ATTR)
    if group is None or group not in stats_seen:
        k = 2 if kind in ARG_KINDS or kind == "var" or group is not None else 1
        _add_scratch(op, row_exchange_accesses(lay, t.rows, t.cols, k))
        if group is not None:
            stats_seen.add(group)
    _add_scratch(op, row_gather_accesses(lay, t.rows, t.cols, result))


def _relayout_scratch(op: Operation) -> None:
    """A transpose's or a layout conversion's accesses to the scratch tile the backend moves the register tile
    through (backend/rules_memory.py relayout; tkir/layout.py relayout_scratch): the source tile stored in its
    layout, then read in the result's layout (transposed: element by element, or ldmatrix for 16-bit mma
    fragments). An fp8 accumulator's conversion to the 8-bit wgmma A fragment moves by shuffles (none)."""
    src, dst = op.operands[0].type, op.result.type
    have, want = layout_of(src), layout_of(dst)
    if have is None or want is None or not isinstance(src, TileType) or not isinstance(dst, TileType):
        return  # before infer-layouts, or a vector (a one-row scratch the report does not model yet)
    if have.kind == "wgmma_acc" and want.kind == "wgmma_a" and dst.dtype in FP8_DTYPES:
        return
    shape = (src.rows, src.cols)
    tile = relayout_scratch(src.dtype, *shape)
    load = (transposed_load_access(want, src.dtype, shape) if op.name == "tk.transpose"
            else register_access(True, want, src.dtype, shape))
    _add_scratch(op, [(register_access(False, have, src.dtype, shape), tile), (load, tile)])


def _add_scratch(op: Operation, accesses: list[tuple[Access, SharedLayout]]) -> None:
    """Report entries for accesses to a backend scratch area: `degree` in the layout the backend uses,
    `degree_before` in the same shape unpadded."""
    for access, tile in accesses:
        plain = SharedLayout(tile.dtype, tile.rows, tile.cols)
        add_report(op.attrs, AccessReport(access.op, SCRATCH_TILE, conflict_degree(access, tile),
                                          conflict_degree(access, plain)))


def best_fix(alloc: Operation, uses: list[TileUse], layout: SharedLayout, worst: int) -> SharedLayout | None:
    """A layout with a smaller worst degree, or None (see the module docstring for the rules)."""
    cands: list[SharedLayout] = []
    pinned = "swizzle" in alloc.attrs
    if not pinned:
        for span in SWIZZLE_SPANS:
            lay = SharedLayout(layout.dtype, layout.rows, layout.cols, span)
            if swizzle_problem(lay, uses) is None:
                cands.append(lay)
    dense = any(u.consumer in ("tma", "wgmma") for u in uses)
    if not dense and (layout.swizzle == 0 or not pinned):
        width = max(u.access.width for u in uses)
        for pad in PAD_CHOICES:
            if pad % width == 0:  # every lane's address stays aligned to its access width
                cands.append(SharedLayout(layout.dtype, layout.rows, layout.cols, 0, pad))
    best, best_key = None, (worst, 0)
    for lay in cands:
        key = (max(conflict_degree(u.access, lay) for u in uses), lay.size_bytes - layout.size_bytes)
        if key < best_key:
            best, best_key = lay, key
    return best
