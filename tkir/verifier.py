"""The verifier: structure (SSA dominance, terminators, known ops), each op's type rules, and the
rules across ops: size expressions and launch limits of the grid, TMA descriptors against the
tensors and tiles they copy, the mbarrier pipeline's protocol (tkir/verify_pipeline.py).

It runs after every pass; a failure names the op's location and the pass that broke it.
"""

from __future__ import annotations

from tkir.diagnostics import CompileError
from tkir.ir import Module, Operation, Region, Value
from tkir.ops import OPS, OpDef, OpError
from tkir.types import Ident, Symbol, TileType, VectorType
from tkir.verify_pipeline import verify_pipeline
from tkir.verify_sizes import verify_sizes
from tkir.verify_tma import verify_tma


class VerifyError(CompileError):
    pass


def verify(module: Module) -> None:
    seen_syms: set[str] = set()
    for op in module.ops:
        if op.symbol is not None:
            if op.symbol in seen_syms:
                raise VerifyError(op.loc, f"duplicate symbol '@{op.symbol}'")
            seen_syms.add(op.symbol)
        _verify_op(op, set(), [])
    # rules across ops and symbols (tkir/verify_sizes.py, tkir/verify_tma.py, tkir/verify_pipeline.py)
    for kernel in module.kernels():
        verify_sizes(kernel, VerifyError)
        _check_reuses(kernel)
    verify_tma(module, VerifyError)
    for kernel in module.kernels():
        verify_pipeline(kernel, VerifyError)


def _verify_op(op: Operation, visible: set[int], scope: list[int], d: OpDef | None = None) -> None:
    """Check `op` (`d`: its OpDef, when the caller has looked it up) given the ids of the values defined
    before it (`visible`); its results join `visible` and are recorded in `scope`, the ids its enclosing
    region takes back when it ends."""
    if d is None:
        d = OPS.get(op.name)
        if d is None:
            raise VerifyError(op.loc, f"unknown op '{op.name}'")
    for v in op.operands:
        if id(v) not in visible:
            raise VerifyError(op.loc, f"'{op.name}' uses %{v.name}, which is not defined before it")
    key = None
    if d.local:  # what the check depends on (CHECKED, below); None when an attribute value is mutable
        attrs = op.attrs
        key = (op.name, len(op.operands), *[v.type for v in op.operands], *[r.type for r in op.results],
               *attrs.items())
        for v in attrs.values():
            if type(v) not in _IMMUTABLE_ATTRS:
                key = None
                break
    if key is None or op.__dict__.get(CHECKED) != key:
        _check_ring_buffer_uses(op)
        try:
            d.check(op)
        except OpError as e:
            raise VerifyError(op.loc, str(e)) from None
        if key is not None:
            op.__dict__[CHECKED] = key
    for region in op.regions:
        _verify_region(region, visible)
    for r in op.results:  # _see, inlined: this runs for every op after every pass
        if id(r) not in visible:
            visible.add(id(r))
            scope.append(id(r))


# The verifier runs after every pass, and most ops come through most passes unchanged. An op whose
# checker is local (OpDef.local: it reads only the op's name, operand and result types and attributes)
# keeps, under this name, what it was last checked with; while that is equal the checks are not run again.
# Types are frozen (equal by content); attributes are compared by value, so an op whose attributes hold a
# mutable value (a list, a dict: it could change in place) is checked every time.
CHECKED = "_verified_as"
_IMMUTABLE_ATTRS = frozenset((bool, int, float, str, Ident, Symbol, type(None)))


def _see(v: Value, visible: set[int], scope: list[int]) -> None:
    if id(v) not in visible:
        visible.add(id(v))
        scope.append(id(v))


def _check_ring_buffer_uses(op: Operation) -> None:
    """A ring buffer (`stages=N`, N > 1) is only addressed through its stages: pipe.* ops take it, and
    anything else reads a `pipe.stage` view (a whole-buffer use would mean no stage in particular)."""
    if op.name.startswith("pipe."):
        return
    for v in op.operands:
        stages = v.type.get("stages") if isinstance(v.type, (TileType, VectorType)) else None
        if isinstance(stages, int) and stages > 1:
            raise VerifyError(op.loc, f"'{op.name}' uses ring buffer %{v.name} ({v.type}) directly",
                              hint="read one stage through `pipe.stage %buf, %s`")


def _check_reuses(kernel: Operation) -> None:
    """A shared tile whose memory a `tk.reuse` gives to another tile (reuse-smem) is not read or written after
    the reuse: no op after it in program order uses the donor, nor does any op of a loop around the reuse
    (the loop's next iteration would run it after the reuse)."""
    order = list(kernel.walk())
    pos = {id(op): i for i, op in enumerate(order)}
    for op in order:
        if op.name != "tk.reuse":
            continue
        donor = op.operands[0]
        after = [u for u in order[pos[id(op)] + 1:] if donor in u.operands]
        loop = op.parent.parent.parent if op.parent is not None and op.parent.parent is not None else None
        while loop is not None and loop is not kernel and not after:
            if loop.name == "scf.for":
                after = [u for u in loop.walk() if u is not op and donor in u.operands]
            blk = loop.parent
            loop = blk.parent.parent if blk is not None and blk.parent is not None else None
        if after:
            u = after[0]
            raise VerifyError(u.loc or op.loc, f"'{u.name}' uses %{donor.name} after its memory was given to "
                              f"%{op.result.name} ('tk.reuse'{f' at {op.loc}' if op.loc else ''})",
                              hint="a tile is placed in another's memory only after that tile's last use")


def _verify_region(region: Region, visible: set[int]) -> None:
    """Verify a region's block; what it defines is visible inside it only, so it is taken out of
    `visible` again at the end (one shared set rather than a copy per region: linear time)."""
    blk = region.block
    scope: list[int] = []
    for a in blk.args:
        _see(a, visible, scope)
    last = len(blk.ops) - 1
    for i, op in enumerate(blk.ops):
        d = OPS.get(op.name)
        if d is None:
            raise VerifyError(op.loc, f"unknown op '{op.name}'")
        if d.terminator and i != last:
            raise VerifyError(op.loc, f"'{op.name}' must be the last op of its block")
        _verify_op(op, visible, scope, d)
    visible.difference_update(scope)


def defined_values(module: Module) -> list[Value]:
    out = []
    for op in module.walk():
        out.extend(op.results)
        for r in op.regions:
            out.extend(r.block.args)
    return out
