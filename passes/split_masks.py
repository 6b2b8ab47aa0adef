"""split-masks: split a loop so that element masks run only on the iterations that can mask anything.

Attention masks two kinds of score elements: keys past the end of the sequence (`where(col_index(s)
+ j * BKV < N, s, -inf)`) and, when causal, keys after the query (`mask_causal(s, row0, j * BKV)`).
Both depend on the loop index j only through an affine offset a*j + b (a a positive compile-time
integer, b loop-invariant), and both are all-true (mask nothing) on a prefix of the iterations:

* `tk.select %c, %x, %fill` with %c = `tk.cmp (tk.index %t {axis = col|row}) + (a*j + b), %bound
  {pred = lt|le}`, %bound loop-invariant: every element passes iff (extent - 1) + a*j + b < bound
  (<= for le), i.e. for j < t = floor((bound - b - extent [+ 1 for le] + a) / a);
* `tk.mask_causal %x, %row0, %col0` with col0 = a*j + b, row0 loop-invariant: nothing is masked
  iff col0 + cols - 1 <= row0, i.e. for j < t = floor((row0 - b - cols + 1 + a) / a).

The loop `for j in lo .. hi` (step 1) becomes `for j in lo .. t'` without those masks (each select
gives its unmasked operand, each mask_causal its input) followed by `for j in t' .. hi` with them,
t' = min(max(min over the masks of t, lo), hi); the second loop starts from the first one's
results. The numerators are clamped at 0 before dividing (the backend's division truncates).
FlashAttention-3 does the same for causal attention (§3.3: the masked blocks are the diagonal
ones). Loops whose masks do not match these forms, or with another step, are left unchanged.
Runs after `pipeline` (consumer loops keep their stage arithmetic: it follows j) and before
`overlap-mma`, which then rotates both loops. Ablation: leave `split-masks` out of `--passes`.

`suffix=true` (research, off until timed) also splits a loop whose masks pass everything on a *suffix* of the
iterations, the masked ones first: attention's backward over query blocks for one key block
(examples/attention_bwd.tk, causal: `where(row_index(s) + kb * BKV <= col_index(s) + i * BQ, s, -inf)` masks
only the query blocks on the diagonal, the first ones of the loop), where every iteration computed the mask:

* `tk.select %c, %x, %fill` with %c = `tk.cmp (tk.index %t) [+ off], (tk.index %u) + (a*j + b) {pred = lt|le}`,
  off and b loop-invariant, a > 0: every element passes iff (extent - 1) + off < a*j + b (<= for le; the
  right index's least value is 0), i.e. for j >= t = ceil((off + extent - 1 [+ 1 for lt] - b) / a).

The loop `for j in lo .. hi` becomes `for j in lo .. t'` with the masks, then `for j in t' .. hi` without them,
t' = min(max(max over the masks of t, lo), hi), the second starting from the first's results. A loop with masks
of both kinds is split at the prefix only.
"""

from __future__ import annotations

from collections.abc import Callable

from tkir.ir import Module, Operation, Value, clone_op, replace_all_uses
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, Pass, param
from tkir.types import TileType


class SplitMasks(Pass):
    name = "split-masks"
    suffix: bool = param(False, "research (off until timed): also split a loop whose masks pass everything on a "
                                "suffix of its iterations (the causal backward's loop over query blocks), the "
                                "masked iterations first")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            for op in list(kernel.walk()):
                if op.name == "scf.for" and _unit_step(op):
                    _hoist_invariant_scalars(op)
                    masks = [m for m in op.body.ops if _mask_bound(m, op) is not None]
                    if masks:
                        _split(op, masks)
                    elif self.suffix:
                        later = [m for m in op.body.ops if _suffix_bound(m, op) is not None]
                        if later:
                            _split_suffix(kernel, op, later)


def _hoist_invariant_scalars(loop: Operation) -> None:
    """Move scalar `arith.*` ops of the body whose operands are all loop-invariant in front of the
    loop (`block.x * BQ` written inside the loop), so the masks' bounds can be computed there."""
    blk = loop.body
    moved = True
    while moved:
        moved = False
        for op in list(blk.ops):
            if op.name.startswith("arith.") and not op.regions and op.results \
                    and all(_invariant(v, loop) for v in op.operands) and not op.attrs.get("iteration"):
                blk.remove(op)
                loop.parent.insert_before(loop, op)
                moved = True


def _unit_step(loop: Operation) -> bool:
    d = loop.operands[2].owner
    return isinstance(d, Operation) and d.name == "arith.const" and d.attrs.get("value") == 1


def _const(v: Value) -> int | None:
    d = v.owner
    if isinstance(d, Operation) and d.name == "arith.const" and isinstance(d.attrs.get("value"), int):
        return int(d.attrs["value"])
    return None


def _invariant(v: Value, loop: Operation) -> bool:
    """Defined outside the loop (or a constant)."""
    inside = {id(o) for o in loop.walk()}
    return not (isinstance(v.owner, Operation) and id(v.owner) in inside) and v not in loop.body.args


def _affine(v: Value, loop: Operation) -> tuple[int, Value | int] | None:
    """v = a * j + b with a a compile-time integer and b loop-invariant (a Value or an int)."""
    iv = loop.body.args[0]
    if v is iv:
        return 1, 0
    c = _const(v)
    if c is not None:
        return 0, c
    if _invariant(v, loop):
        return 0, v
    d = v.owner
    if not isinstance(d, Operation) or d.name not in ("arith.add", "arith.mul"):
        return None
    x, y = (_affine(o, loop) for o in d.operands)
    if x is None or y is None:
        return None
    if d.name == "arith.mul":
        for (a1, b1), (a2, b2) in ((x, y), (y, x)):
            if a2 == 0 and isinstance(b2, int) and isinstance(b1, int):
                return a1 * b2, b1 * b2
            if a2 == 0 and isinstance(b2, int) and b2 >= 0 and a1 != 0 and b1 == 0:
                return a1 * b2, 0
        return None
    if isinstance(x[1], int) and isinstance(y[1], int):
        return x[0] + y[0], x[1] + y[1]
    if x[1] == 0 or y[1] == 0:
        return x[0] + y[0], y[1] if x[1] == 0 else x[1]
    return None


class _Bound:
    """The mask passes everything for j < (num + a) / a, num = sign * inv + k (inv a Value or None)."""

    def __init__(self, a: int, inv: Value | None, k: int, b: Value | int):
        self.a, self.inv, self.k, self.b = a, inv, k, b


def _mask_bound(m: Operation, loop: Operation) -> _Bound | None:
    if m.name == "tk.mask_causal":
        t = m.operands[0].type
        if not isinstance(t, TileType) or not _invariant(m.operands[1], loop):
            return None
        aff = _affine(m.operands[2], loop)
        if aff is None or aff[0] <= 0:
            return None
        a, b = aff
        return _Bound(a, m.operands[1], 1 - t.cols, b)  # row0 - b - cols + 1
    if m.name != "tk.select":
        return None
    c = m.operands[0]
    cmp = c.owner
    if not isinstance(cmp, Operation) or cmp.name != "tk.cmp" or str(cmp.attrs.get("pred")) not in ("lt", "le"):
        return None
    lhs, bound = cmp.operands
    if not _invariant(bound, loop) or isinstance(bound.type, TileType):
        return None
    left = _index_plus(lhs)
    if left is None or isinstance(left[1], int):  # a bare index has no j in it
        return None
    idx, off = left
    aff = _affine(off, loop)
    if aff is None or aff[0] <= 0:
        return None
    t = idx.result.type
    extent = t.cols if str(idx.attrs.get("axis")) == "col" else t.rows
    le = 1 if str(cmp.attrs.get("pred")) == "le" else 0
    return _Bound(aff[0], bound, le - extent, aff[1])  # bound - b - extent (+1 for le)


def _split_point(loop: Operation, masks: list[Operation], bound: Callable[[OpBuilder, Operation, Value], Value],
                 combine: str, name: str) -> Value:
    """In front of `loop`: the iteration where its masks change, `combine` (arith.min / arith.max) of `bound` over
    the masks, clamped to the loop's range [lo, hi]."""
    b = OpBuilder(loop.parent, loop)
    lo, hi = loop.operands[0], loop.operands[1]
    zero = b.const(0, "c0")
    t: Value | None = None
    for m in masks:
        ti = bound(b, m, zero)
        t = ti if t is None else b.op(combine, [t, ti], name)
    return b.op("arith.min", [b.op("arith.max", [t, lo], "split"), hi], "split")


def _split(loop: Operation, masks: list[Operation]) -> None:
    def unmasked_end(b: OpBuilder, m: Operation, zero: Value) -> Value:
        bd = _mask_bound(m, loop)
        num = b.op("arith.add", [bd.inv, b.const(bd.k + bd.a)], "num")   # inv + k + a
        num = b.op("arith.max", [_minus(b, num, bd.b), zero], "num")
        return b.op("arith.div", [num, b.const(bd.a)], "unmasked")

    t = _split_point(loop, masks, unmasked_end, "arith.min", "unmasked")
    # the first loop: a copy without the masks
    first = _copy_without(loop, masks)
    first.operands[1] = t
    loop.parent.insert_before(loop, first)
    loop.operands[0] = t
    loop.operands[3:] = list(first.results)


def _minus(b: OpBuilder, num: Value, off: Value | int) -> Value:
    """num - off (off a loop-invariant Value or a compile-time integer; 0 adds nothing)."""
    if isinstance(off, Value):
        return b.op("arith.sub", [num, off], "num")
    return b.op("arith.sub", [num, b.const(off)], "num") if off else num


def _copy_without(loop: Operation, masks: list[Operation]) -> Operation:
    """A copy of `loop` in which each mask gives its unmasked operand (a select its value, a mask_causal its
    input)."""
    mapping: dict[Value, Value] = {}
    copy = clone_op(loop, mapping)
    for m in masks:
        new_m = mapping[m.result].owner
        keep = new_m.operands[0] if new_m.name == "tk.mask_causal" else new_m.operands[1]
        for op in copy.walk():
            op.operands = [keep if v is new_m.result else v for v in op.operands]
        copy.body.remove(new_m)
    return copy


class _SuffixBound:
    """The mask passes everything for j >= ceil((off + k - b) / a) (off, b a Value or an int)."""

    def __init__(self, a: int, off: Value | int, k: int, b: Value | int):
        self.a, self.off, self.k, self.b = a, off, k, b


def _index_plus(v: Value) -> tuple[Operation, Value | int] | None:
    """v = tk.index [+ a scalar offset] -> (the tk.index op, the offset Value or 0)."""
    d = v.owner
    if isinstance(d, Operation) and d.name == "tk.index":
        return d, 0
    if not isinstance(d, Operation) or d.name != "tk.add":
        return None
    idx, off = d.operands
    if not (isinstance(idx.owner, Operation) and idx.owner.name == "tk.index"):
        idx, off = off, idx
    if not (isinstance(idx.owner, Operation) and idx.owner.name == "tk.index") or isinstance(off.type, TileType):
        return None
    return idx.owner, off


def _suffix_bound(m: Operation, loop: Operation) -> _SuffixBound | None:
    """`m` a select on `index + off <(=) index + (a*j + b)`, off and b loop-invariant, a > 0 (the module doc)."""
    if m.name != "tk.select":
        return None
    cmp = m.operands[0].owner
    if not isinstance(cmp, Operation) or cmp.name != "tk.cmp" or str(cmp.attrs.get("pred")) not in ("lt", "le"):
        return None
    left, right = (_index_plus(v) for v in cmp.operands)
    if left is None or right is None or isinstance(right[1], int):
        return None
    lidx, off = left
    if isinstance(off, Value) and not _invariant(off, loop):
        return None
    aff = _affine(right[1], loop)
    if aff is None or aff[0] <= 0:
        return None
    t = lidx.result.type
    extent = t.cols if str(lidx.attrs.get("axis")) == "col" else t.rows
    lt = 1 if str(cmp.attrs.get("pred")) == "lt" else 0
    return _SuffixBound(aff[0], off, extent - 1 + lt, aff[1])


def _split_suffix(kernel: Operation, loop: Operation, masks: list[Operation]) -> None:
    """`for j in lo..hi` -> `for j in lo..t'` (the masks) then `for j in t'..hi` (none), the module doc's t'."""
    def masked_end(b: OpBuilder, m: Operation, zero: Value) -> Value:
        bd = _suffix_bound(m, loop)
        if isinstance(bd.off, Value):
            num = b.op("arith.add", [bd.off, b.const(bd.k)], "num")
        else:
            num = b.const(bd.k + bd.off)
        num = b.op("arith.max", [_minus(b, num, bd.b), zero], "num")
        return b.op("arith.div", [b.op("arith.add", [num, b.const(bd.a - 1)], "num"), b.const(bd.a)], "masked_end")

    t = _split_point(loop, masks, masked_end, "arith.max", "masked_end")
    # the second loop: a copy without the masks, continuing from the first one's results
    second = _copy_without(loop, masks)
    for old, new in zip(loop.results, second.results, strict=True):
        replace_all_uses(kernel, old, new)
    loop.parent.insert_after(loop, second)
    loop.operands[1] = t
    second.operands[0] = t
    second.operands[3:] = list(loop.results)

