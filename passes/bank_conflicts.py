"""bank-conflicts: the conflict degree of every shared-memory access, and fixes for the excess.

For each shared tile (`tk.alloc` of an st or sv) it lists the warp-wide instructions that touch
it (tkir/layout.py patterns): `ldmatrix.x4`/`stmatrix.x4` for 16-bit mma fragments, `ld/st.shared.v2`
for f32 accumulators, `ld/st.shared.v4` (or .v2/.b32) for `row` tiles, 4-byte accesses for
vectors, and the hardware paths `wgmma.desc` (core matrices: 8 rows x 16 B) and `tma`. Each gets
its degree (wavefronts per 128-byte phase of the worst instruction, 32 banks x 4 bytes) under the
tile's layout, and under the plain unswizzled, unpadded layout as `degree_before`.

Rewrites
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

from dataclasses import dataclass, field

import numpy as np

from tkir.ir import Module, Operation, Value, uses_of
from tkir.layout import (
    BANK_BYTES,
    CHUNK_BYTES,
    SWIZZLE_ALIGN,
    SWIZZLE_SPANS,
    WARP,
    Access,
    RegisterLayout,
    SharedLayout,
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
from tkir.passmanager import Options, Pass
from tkir.types import GlobalType, TileType, VectorType, is_register

PAD_CHOICES = (4, 8, 16, 32, 64)  # bytes of row padding tried, smallest first
DEFAULT_WARPS = 4                 # register tiles without a layout: one warpgroup of `row`


@dataclass
class TileUse:
    """One op's access to a shared tile: the instruction pattern and what the consumer is."""

    op: Operation
    access: Access
    consumer: str  # "tma", "wgmma", "ldmatrix" (mma.sync operand) or "ldst" (register tile/vector)
    extra: dict[str, object] = field(default_factory=dict)


class BankConflicts(Pass):
    name = "bank-conflicts"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            for op in kernel.walk():
                op.attrs.pop("access", None)
            for op in kernel.walk():
                if op.name == "tk.alloc":
                    self._tile(kernel, op, options)

    def _tile(self, kernel: Operation, alloc: Operation, options: Options) -> None:
        tile = alloc.result
        uses = tile_uses(kernel, tile, options)
        layout = shared_layout(tile.type)
        plain = SharedLayout(layout.dtype, layout.rows, layout.cols)
        before = [conflict_degree(u.access, plain) for u in uses]
        degrees = [conflict_degree(u.access, layout) for u in uses]
        if options.swizzle != "none" and isinstance(tile.type, TileType) and max(degrees, default=1) > 1:
            better = best_fix(alloc, uses, layout, max(degrees))
            if better is not None:
                layout = better
                tile.type = with_layout(tile.type, layout)
                degrees = [conflict_degree(u.access, layout) for u in uses]
        for u, d, b in zip(uses, degrees, before, strict=True):
            entry: dict[str, object] = {"op": u.access.op, "tile": tile.name or "", "degree": d,
                                        "degree_before": b}
            if u.access.hardware:
                entry["hardware"] = True
            entry.update(u.extra)
            u.op.attrs.setdefault("access", []).append(entry)


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
    return None


def shared_layout(t: TileType | VectorType) -> SharedLayout:
    if isinstance(t, VectorType):
        return SharedLayout(t.dtype, 1, t.n)
    return SharedLayout(t.dtype, t.rows, t.cols, int(t.get("swizzle", 0) or 0), int(t.get("pad", 0) or 0))


def with_layout(t: TileType, layout: SharedLayout) -> TileType:
    t = t.with_attr("swizzle", layout.swizzle).with_attr("align", SWIZZLE_ALIGN[layout.swizzle])
    return t.with_attr("pad", layout.pad or None)


def tile_uses(root: Operation, tile: Value, options: Options) -> list[TileUse]:
    """Every access to shared `tile` under `root`, in program order."""
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
            if options.no_tma or op.attrs.get("no_tma"):
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
        elif name == "tk.mma" and idx in (0, 1):
            trans = bool(op.attrs.get("trans_a" if idx == 0 else "trans_b"))
            if options.target == "sm_80":
                # A (M x K) and N x K B: ldmatrix.x4; K x N B: ldmatrix.x4.trans (HOPPER §6.3)
                op_name = "ldmatrix.x4.trans" if (idx == 1) != trans else "ldmatrix.x4"
                out.append(TileUse(op, ldmatrix_pattern(op_name, rows, row_bytes), "ldmatrix"))
            else:
                k_major = (idx == 0) != trans  # A plain and B transposed are K-major
                out.append(TileUse(op, core_matrix_pattern(rows, row_bytes), "wgmma",
                                   {"major": "K" if k_major else "MN"}))
    return out


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
