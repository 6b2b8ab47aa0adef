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
   A consumer that accepts one span only leaves that one: the staged epilogue (`tk.store_staged`)
   writes its staging tile as 128B-swizzled panels.
The rule is passes/analysis.py `choose_swizzle`: create-tma applies it to the epilogue staging
tile it creates after this pass ran, so every shared tile's swizzle is this rule's decision.
Assumes infer-layouts has run (register layouts decide the ld/st.shared patterns).
"""

from __future__ import annotations

from tkir.ir import Module
from tkir.layout import SharedLayout
from tkir.passes.analysis import choose_swizzle, tile_uses, with_layout
from tkir.passmanager import Options, Pass
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
