"""vector-red: add a register tile's f32 values into global memory four at a time (sm_90a).

Matches every reducing `tk.store` (`reduce = "add"`, the front end's `G[i] += t`) of an f32 register tile or
vector whose layout gives each lane whole chunks of a multiple of four consecutive elements (`row` / `col_vec`
layouts with `vec` 4, 8, ...), into a tensor whose last dim is a size or a multiple of four, on sm_90a, and sets
`red_vec = 4` on it. The backend then adds each four elements with one `red.global.add.v4.f32` (PTX ISA 8.1,
"red": vector types need sm_90 and the .global space) instead of four `red.global.add.f32`; sm_80 has no vector
red, so the pass leaves its kernels alone. The launch asks, as for a vector load or store, that the tensor's rows
and base start 16-byte aligned (tkir/requires.py); the variant with narrower pieces (infer-layouts{max_vec_bytes})
has lane chunks under four f32, so this pass leaves its stores scalar and it adds at any alignment.

Why: every block of a coarsened row kernel (coarsen-rows: the layernorm backward's DW, DB) adds its column sums
once at the end, all blocks at about the same time, so the adds are the kernel's tail; four times fewer red
instructions and L2 atomic operations shorten it: the user layernorm backward ran 1.50x / 1.26x / 1.12x faster at
N = 4096 / 8192 / 16384 on an H100, on against off in one call (docs/experiments.md, "Vector red").

`enabled=false` is the ablation (every reducing store stays element by element, as without the pass).
"""

from __future__ import annotations

from tkir.ir import Module
from tkir.layout import layout_of
from tkir.opdef import RED_VEC_ATTR, RED_VEC_ELEMS, REDUCE_ATTR
from tkir.passmanager import Options, Pass, param
from tkir.types import GlobalType, TileType, VectorType

VECTOR_RED_TARGETS = ("sm_90a",)  # red.global.add.v4.f32: sm_90 and later (PTX ISA, "red")


class VectorRed(Pass):
    name = "vector-red"
    enabled: bool = param(True, "add f32 register values four at a time with red.global.add.v4.f32 (sm_90a; "
                                "false: one red per element, the ablation)")

    def run(self, module: Module, options: Options) -> None:
        if not self.enabled or options.target not in VECTOR_RED_TARGETS:
            return
        for kernel in module.kernels():
            for op in kernel.walk():
                if _vectorizable(op):
                    op.attrs[RED_VEC_ATTR] = RED_VEC_ELEMS


def _vectorizable(op: object) -> bool:
    """A reducing tk.store of an f32 register value in lane chunks of a multiple of RED_VEC_ELEMS elements, into a
    global tensor whose last dim is a size or a multiple of RED_VEC_ELEMS."""
    if op.name != "tk.store" or str(op.attrs.get(REDUCE_ATTR)) != "add" or RED_VEC_ATTR in op.attrs:
        return False
    dst, val = op.operands[0].type, op.operands[1].type
    if not isinstance(dst, GlobalType) or not isinstance(val, (TileType, VectorType)) or val.dtype != "f32":
        return False
    if val.space not in ("rt", "rv") or not isinstance(val.get("layout"), dict):
        return False
    lay = layout_of(val)
    if lay.kind not in ("row", "col_vec") or not lay.vec or lay.vec % RED_VEC_ELEMS:
        return False
    last = dst.dims[-1]
    return isinstance(last, str) or last % RED_VEC_ELEMS == 0
