"""exp-base2: `exp(a − v)` on an f32 register tile becomes `exp2(a·log2(e) − v·log2(e))`, the factor folded
into `a`'s own compile-time scale and applied to `v` once per row.

PTX has only `ex2.approx`: the backend lowers `tk.exp x` as `ex2(x · log2(e))` (backend/rules_registers.py
LOG2E), one multiply per element on top of whatever computed x. An online softmax written the way a user
writes it, `p = exp(s·c − m)` (examples/user/gqa_attention.tk), leaves fold-scale's fma `s·c − m` followed by
that multiply; written with exp2 and a scale premultiplied by log2(e) (examples/attention_fwd.tk, FA3), it is
one fma and the ex2. This pass gives the first form the second's code:

Matches `%e = tk.exp %d` where `%d = tk.sub %a, %v` is an f32 register tile, read only by %e, in the same
block; %a is `tk.mul %x, %c` with %c a compile-time f32 constant (fold-scale's form), read only by %d; and %v
is a vector broadcast along rows or columns (`bcast`) or an f32 scalar (so that scaling it costs one multiply
per row, not per element). Rewrites:
* %c is replaced by the constant c·log2(e), and %v by `tk.mul %v, log2(e)` (inserted right before %d);
* the multiply and %d get `contract = true` (they fuse into one `fma.rn.f32`), and %e becomes `tk.exp2 %d`.
A bare `exp(x − m)` (softmax.tk) is left alone: there the rewrite would trade the backend's multiply for one
of its own on a whole tile (fused, but a new tile value the register plan counts, which moved a wide softmax
into spilling at its planned occupancy), for no measured gain.
The values are those of the exp up to rounding: (c·log2 e)·s − (log2 e)·m against log2 e·(c·s − m), each
rounded once more or less; ex2.approx's own error (2 ulp) is larger. `exp` of anything else (a tile minus a
tile, a bare tile) is left as it is. Runs after fold-scale (whose contraction it extends), before
infer-layouts (the new vector multiplies get layouts like any other). Ablation: `--pass-edits=-exp-base2`.
"""

from __future__ import annotations

import math

from tkir.ir import Block, Module, Operation, Value
from tkir.passmanager import Options, Pass
from tkir.types import F32, TileType, VectorType

LOG2E = math.log2(math.e)  # exp(x) = 2^(x log2 e) (backend/rules_registers.py LOG2E, the same constant)


class ExpBase2(Pass):
    name = "exp-base2"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            for op in list(kernel.walk()):
                for r in op.regions:
                    _rewrite_block(r.block)


def _rewrite_block(blk: Block) -> None:
    readers: dict[Value, int] = {}
    for op in blk.ops:
        for inner in op.walk():
            for v in dict.fromkeys(inner.operands):
                readers[v] = readers.get(v, 0) + 1
    for e in list(blk.ops):
        if e.parent is blk and e.name == "tk.exp":
            d = e.operands[0].owner
            if isinstance(d, Operation) and d.parent is blk and _matches(d, readers):
                _rewrite(blk, e, d, readers)


def _is_f32_tile(v: Value) -> bool:
    t = v.type
    return isinstance(t, TileType) and t.space == "rt" and t.dtype == "f32"


def _matches(d: Operation, readers: dict[Value, int]) -> bool:
    if d.name != "tk.sub" or not _is_f32_tile(d.result) or readers.get(d.result) != 1:
        return False
    a, v = d.operands
    if not _is_f32_tile(a) or a.type != d.result.type or readers.get(a) != 1:
        return False
    mul = a.owner
    if not (isinstance(mul, Operation) and mul.name == "tk.mul" and mul.parent is d.parent
            and "bcast" not in mul.attrs and _const_of(mul.operands[1]) is not None):
        return False  # a bare `exp(x - m)`: left to the backend (see the module docstring)
    vt = v.type
    row_vector = isinstance(vt, VectorType) and vt.dtype == "f32" and "bcast" in d.attrs
    return row_vector or vt == F32


def _const_of(v: Value) -> float | None:
    c = v.owner
    if isinstance(c, Operation) and c.name == "arith.const" and isinstance(c.attrs.get("value"), float) \
            and math.isfinite(c.attrs["value"]):
        return c.attrs["value"]
    return None


def _rewrite(blk: Block, e: Operation, d: Operation, readers: dict[Value, int]) -> None:
    a, v = d.operands
    log2e = Operation("arith.const", [], [F32], {"value": LOG2E}, result_names=["log2e"], loc=d.loc)
    blk.insert_before(d, log2e)
    v2 = Operation("tk.mul", [v, log2e.result], [v.type], result_names=[f"{v.name or 'v'}_log2e"], loc=d.loc)
    blk.insert_before(d, v2)
    mul = a.owner
    scale = _const_of(mul.operands[1])
    folded = Operation("arith.const", [], [F32], {"value": scale * LOG2E}, result_names=["scale_log2e"], loc=mul.loc)
    blk.insert_before(mul, folded)
    mul.operands = [mul.operands[0], folded.result]
    mul.attrs["contract"] = True
    d.operands = [a, v2.result]
    d.attrs["contract"] = True
    e.name = "tk.exp2"
