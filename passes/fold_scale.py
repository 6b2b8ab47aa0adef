"""fold-scale: a multiplication of a register tile by a positive constant is moved past the masks
and row max/min reductions that read it, so that it meets the subtraction after it as one fused
multiply-add per element (FlashAttention-3's softmax: exp2(s·c − m·c), the max taken on raw s).

Matches `%y = tk.mul %x, %c` with %c a compile-time f32 constant > 0 and %x an f32 register tile, in
one block, and rewrites in three steps:

1. masks: while %y's only reader is a mask whose fill is 0 or ±inf — `tk.select %cond, %y, fill`
   or `tk.mask_causal %y, r0, c0 {fill}` — the mask moves in front of the multiply (c · fill =
   fill; a `tk.index` of %y reads only its shape and is given %x instead):
   `select(cond, x, fill) · c` (the mask reads x, the multiply reads the mask);
2. reductions: each `tk.reduce %y {kind = max|min|sum, axis = row|col}` becomes the reduction of the
   unscaled tile times c (exact for max and min: multiplying by c > 0 is monotone and so is
   rounding; for sum, c·Σx equals Σ(c·x) up to rounding);
3. contraction: when the multiply is then read once, by `tk.sub %y, %v`, it moves right before it
   (the scaled tile is never live on its own) and both get `contract = true`:
   the backend emits `fmul contract` / `fsub contract` and LLVM fuses them into one `fma.rn.f32`
   (rounded once instead of twice).

Runs before infer-layouts (the new vector multiplies get layouts like any other). Tiles whose
multiply has other readers keep them (step 3 is then skipped). Ablation: leave `fold-scale` out
of `--passes`.
"""

from __future__ import annotations

import math

from tkir.ir import Block, Module, Operation, Value
from tkir.passmanager import Options, Pass
from tkir.types import TileType, VectorType

REDUCTIONS = frozenset({"max", "min", "sum"})


class FoldScale(Pass):
    name = "fold-scale"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            for op in list(kernel.walk()):
                for r in op.regions:
                    _fold_block(r.block)


def _fold_block(blk: Block) -> None:
    readers = _Readers(blk)
    for op in list(blk.ops):
        if op.parent is blk and op.name == "tk.mul" and _scale_of(op) is not None:
            _fold(blk, op, readers)


class _Readers:
    """The ops of a block that read each value (nested regions included; an op once per inner op that
    reads it), in block order. Built once per block and again only after a rewrite, so a block where
    nothing folds costs one walk: a scan of the block per candidate multiply made the pass quadratic
    (2,000 chained `v * c + x` statements took 5.5 s, 10,000 about two minutes)."""

    def __init__(self, blk: Block) -> None:
        self.blk = blk
        self._index: dict[Value, list[Operation]] | None = None

    def __call__(self, v: Value) -> list[Operation]:
        if self._index is None:
            self._index = {}
            for op in self.blk.ops:
                for x in op.walk():
                    for read in dict.fromkeys(x.operands):
                        self._index.setdefault(read, []).append(op)
        return list(self._index.get(v, ()))

    def changed(self) -> None:
        """The block was rewritten: the index is rebuilt on the next question."""
        self._index = None


def _scale_of(op: Operation) -> Value | None:
    """The positive compile-time f32 scalar of `tk.mul %x, %c` on an f32 register tile, or None."""
    x, c = op.operands
    t = x.type
    if not (isinstance(t, TileType) and t.space == "rt" and t.dtype == "f32" and op.result.type == t):
        return None
    d = c.owner
    if isinstance(d, Operation) and d.name == "arith.const" and isinstance(d.attrs.get("value"), float) \
            and math.isfinite(d.attrs["value"]) and d.attrs["value"] > 0 and "bcast" not in op.attrs:
        return c
    return None


def _neutral_fill(f: object) -> bool:
    return isinstance(f, float) and (f == 0.0 or math.isinf(f))


def _mask_fill(op: Operation, y: Value) -> bool:
    """A mask reading y as its data whose fill survives the scaling (0 or ±inf)."""
    if op.name == "tk.mask_causal":
        return op.operands[0] is y and _neutral_fill(op.attrs.get("fill"))
    if op.name == "tk.select":
        fill = op.operands[2].owner
        return (op.operands[1] is y and op.operands[2] is not y and isinstance(fill, Operation)
                and fill.name == "arith.const" and _neutral_fill(fill.attrs.get("value")))
    return False


def _fold(blk: Block, mul: Operation, readers_of: _Readers) -> None:
    c = mul.operands[1]
    # 1. masks move in front of the multiply
    while True:
        for r in readers_of(mul.result):
            if r.name == "tk.index":  # reads only the shape: the unscaled tile has the same
                r.operands = [mul.operands[0] if v is mul.result else v for v in r.operands]
                readers_of.changed()
        readers = readers_of(mul.result)
        if len(readers) != 1 or not _mask_fill(readers[0], mul.result):
            break
        mask = readers[0]
        x = mul.operands[0]
        masked = Operation(mask.name, [x if v is mul.result else v for v in mask.operands],
                           [mask.result.type], dict(mask.attrs), result_names=[mul.result.name], loc=mask.loc)
        scaled = Operation("tk.mul", [masked.result, c], [mask.result.type], dict(mul.attrs),
                           result_names=[mask.result.name], loc=mul.loc)
        blk.insert_before(mask, masked)
        blk.insert_after(mask, scaled)
        _replace_after(blk, scaled, mask.result, scaled.result)
        blk.remove(mask)
        blk.remove(mul)
        readers_of.changed()
        mul = scaled
    # 2. reductions read the unscaled tile and scale their (few) results
    for red in readers_of(mul.result):
        if red.name == "tk.reduce" and str(red.attrs.get("kind")) in REDUCTIONS and red.operands[0] is mul.result \
                and isinstance(red.result.type, VectorType):
            red.operands = [mul.operands[0]]
            scaled = Operation("tk.mul", [red.result, c], [red.result.type], result_names=[red.result.name])
            blk.insert_after(red, scaled)
            _replace_after(blk, scaled, red.result, scaled.result)
            readers_of.changed()
    # 3. one reader left, a subtraction: fused multiply-add
    readers = readers_of(mul.result)
    if len(readers) == 1 and readers[0].name == "tk.sub" and readers[0].operands[0] is mul.result:
        mul.attrs["contract"] = True
        readers[0].attrs["contract"] = True
        blk.remove(mul)  # right before the subtraction: the scaled tile is never live on its own
        blk.insert_before(readers[0], mul)
        readers_of.changed()


def _replace_after(blk: Block, anchor: Operation, old: Value, new: Value) -> None:
    """Every read of `old` after `anchor` in `blk` (nested regions included) reads `new`."""
    for op in blk.ops[blk.ops.index(anchor) + 1:]:
        for inner in op.walk():
            inner.operands = [new if v is old else v for v in inner.operands]
