"""select-swizzle: choose none / 32B / 64B / 128B for every shared tile, with the alignment it needs.

Rewrites each `tk.alloc` of an st: its type gains `swizzle=S, align=A` (S in bytes, 0 = none;
A = 1024 / 512 / 256 for 128B / 64B / 32B, 128 for none: TMA's shared-address alignment,
HOPPER.md §3.2). A swizzled tile whose rows are wider than S bytes is stored as column panels
of S bytes (tkir/layout.py SharedLayout), so S must divide the row width in bytes.

Decision rule, per tile:
1. `Options.swizzle == "none"` (the research switch) -> unswizzled everywhere, overrides included:
   0 (plain rows), except for wgmma operands with rows wider than 16 B, which get 16, the
   interleaved layout (16-byte column panels of core matrices, tkir/layout.py), because that is
   the only unswizzled layout wgmma reads (HOPPER.md §2.3). TMA fills it one 16-byte-wide box per
   panel (create-tma), and the backend's descriptors use the no-swizzle LBO/SBO.
2. `tk.alloc {swizzle = N}` (from @swizzle(N)) -> N, unless a consumer cannot use it: then a
   located error at the allocation naming the reason. @swizzle(none) on a wgmma operand means
   the interleaved layout, as in rule 1.
3. Otherwise the candidates are the spans every consumer accepts: the row width in bytes must be
   a multiple of S; a wgmma operand reads an unswizzled tile only when its rows are 16 bytes.
   They are tried widest first when a wgmma or TMA consumer is present (fewest panels = fewest TMA
   boxes, HOPPER.md §3.4) and narrowest first otherwise; the first with the smallest worst
   bank-conflict degree over the tile's accesses (bank-conflicts' model) wins.
Assumes infer-layouts has run (register layouts decide the ld/st.shared patterns).
"""

from __future__ import annotations

from tkir.ir import Module, Operation
from tkir.layout import CHUNK_BYTES, INTERLEAVED, SWIZZLE_SPANS, SharedLayout, conflict_degree
from tkir.passes.bank_conflicts import TileUse, swizzle_problem, tile_uses, with_layout
from tkir.passmanager import Options, Pass, PassError
from tkir.types import TileType


class SelectSwizzle(Pass):
    name = "select-swizzle"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            for op in kernel.walk():
                if op.name == "tk.alloc" and isinstance(op.result.type, TileType):
                    t = op.result.type
                    uses = tile_uses(kernel, op.result, options)
                    span = choose_swizzle(op, t, uses, options)
                    op.result.type = with_layout(t, SharedLayout(t.dtype, t.rows, t.cols, span))


def choose_swizzle(alloc: Operation, t: TileType, uses: list[TileUse], options: Options) -> int:
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
        return override
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
