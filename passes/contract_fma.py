"""contract-fma: an f32 element-wise multiply read only by an addition or subtraction is marked for
contraction into one fused multiply-add per element (`fma.rn.f32`: one rounding instead of two, one
instruction instead of two), as nvcc's default `--fmad=true` and Triton's `enable_fp_fusion` do.

Matches `%y = tk.mul %a, %b` with an f32 register tile or vector result whose only reader is a
`tk.add` or `tk.sub` of the same f32 type in the same block (either operand; broadcasts and scalar
operands are fine: contraction is per element). Both ops get `contract = true`, and the multiply
moves right before its reader where that lengthens no register tile's life (every tile it reads is
read again at or after the add): the product is then never live on its own. Where an operand would
live longer, the multiply stays (LLVM fuses the pair all the same; only the order of the tk ops, and
so plan-occupancy's count of live registers, would change). The backend emits `fmul contract` /
`fadd contract` and LLVM's NVPTX backend fuses each pair. bf16/f16 tiles are left alone: their element-wise math
rounds to the tile's dtype after each op (docs/ir.md), so the pair is not one expression.

fold-scale contracts its own multiply-subtract pairs (attention's `s * c - m`); this pass is the
general rule. Ablation: leave `contract-fma` out of `--passes`.
"""

from __future__ import annotations

from tkir.ir import Block, Module, Operation
from tkir.passmanager import Options, Pass
from tkir.types import TileType, VectorType

ADDS = ("tk.add", "tk.sub")


class ContractFma(Pass):
    name = "contract-fma"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            for op in list(kernel.walk()):
                for r in op.regions:
                    _contract_block(r.block)


def _f32_register(t: object) -> bool:
    return isinstance(t, TileType | VectorType) and t.space in ("rt", "rv") and t.dtype == "f32"


def _contract_block(blk: Block) -> None:
    readers: dict[int, list[Operation]] = {}
    holder: dict[int, Operation] = {}  # reader -> the op of blk that holds it
    pos: dict[int, int] = {}           # op of blk -> its position
    for i, op in enumerate(blk.ops):
        pos[id(op)] = i
        for inner in op.walk():
            holder[id(inner)] = op
            for v in inner.operands:
                readers.setdefault(id(v), []).append(inner)
    top = _Positions(holder, pos)
    for mul in list(blk.ops):
        if mul.name != "tk.mul" or not mul.results or not _f32_register(mul.result.type):
            continue
        users = readers.get(id(mul.result), [])
        if len(users) != 1:
            continue
        add = users[0]
        if add.name not in ADDS or add.parent is not blk or add.result.type != mul.result.type:
            continue
        if sum(v is mul.result for v in add.operands) != 1:
            continue
        mul.attrs["contract"] = True
        add.attrs["contract"] = True
        if _move_is_free(mul, top[id(add)], readers, top):
            first = pos[id(mul)]
            blk.remove(mul)
            blk.insert_before(add, mul)
            for k in range(first, pos[id(add)] + 1):  # only the ops between moved
                pos[id(blk.ops[k])] = k


class _Positions:
    """Position in the block of the op that holds a reader (kept current as multiplies move)."""

    def __init__(self, holder: dict[int, Operation], pos: dict[int, int]):
        self._holder, self._pos = holder, pos

    def __getitem__(self, reader_id: int) -> int:
        return self._pos[id(self._holder[reader_id])]


def _move_is_free(mul: Operation, at: int, readers: dict[int, list[Operation]], top: _Positions) -> bool:
    """Moving `mul` down to position `at` (its add) lengthens no register tile's life: every register
    tile it reads is read again at or after `at`. (Moving shortens the product's life by as much as it
    lengthens an operand's that dies at the multiply: no gain, and plan-occupancy would count the
    operand longer; conformance wide_rows2 on sm_80 went over 255 registers that way.)"""
    for v in mul.operands:
        t = v.type
        if isinstance(t, TileType) and t.space == "rt" and not any(
                top[id(r)] >= at for r in readers.get(id(v), []) if r is not mul):
            return False
    return True
