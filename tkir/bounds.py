"""Which edge tests of a register tile's global copy can never fail, proven from the tile IR.

A `row`-layout tile copied to or from global memory tests each lane chunk against the tensor's rows
and columns (backend/rules_registers.py: loads read zeros outside, stores are skipped). Where the index
of a dim provably stays inside it, the test is left out: no compare, no select of zeros, no predicate
on the store. Such chunks cost fewer integer instructions (the row kernels' loops: a compare, a select
per loaded word and a predicated store per chunk; docs/experiments.md, "Row kernels: instructions, not
bytes in flight"), and ptxas unrolls loops whose stores are unpredicated.

Proofs are small and exact, no heuristics:

* `largest(v)`: the largest value an i32 index can take, where it is also never negative: an integer
  constant; a loop's induction variable with constant bounds and a positive step (its last value);
  a block index along a grid dim of constant extent (extent - 1); sums and products of such values.
  Anything else (sizes, divisions, remainders, subtractions, persistent tile indices) is unknown.
* A tile dim of extent E indexed by tile coordinate v covers E * v .. E * v + E - 1; it stays inside
  a static dim of D elements when E * (largest(v) + 1) <= D.
* A tile of one row indexed by the block index along a grid dim whose extent is the tensor's size
  itself (`grid(N)`, `grid(cdiv(N, 1))`) reads row block.x < N.

Nothing else changes: the chunk's offset computation is the same, and every unproven test stays.
`why_in_bounds` says which proof holds, in words; `tkc report` lists it for every such copy
(tkir/tools/report.py, "register copies").
"""

from __future__ import annotations

from tkir import symexpr
from tkir.ir import Block, Operation, Value
from tkir.types import TileType

MAX_TERMS = 64  # sums and products deeper than this are not followed (hand-written IR)


def largest(v: Value, kernel: Operation, depth: int = 0) -> int | None:
    """The largest value index `v` takes, if it is provably an integer in 0 .. that value."""
    if depth > MAX_TERMS:
        return None
    owner = v.owner
    if isinstance(owner, Block):
        loop = _owning_op(owner)
        if loop is None or loop.name != "scf.for" or owner.args[0] is not v:
            return None
        lo, hi, step = (_const(x) for x in loop.operands[:3])
        if lo is None or hi is None or step is None or lo < 0 or step <= 0:
            return None
        if hi <= lo:
            return lo  # the body never runs: any in-range answer is sound
        return lo + (hi - 1 - lo) // step * step
    if not isinstance(owner, Operation):
        return None
    if owner.name == "arith.const":
        c = _const(v)
        return c if c is not None and c >= 0 else None
    if owner.name == "tk.block_id":
        extent = _static_grid(kernel, int(owner.attrs["dim"]))
        return None if extent is None else extent - 1
    if owner.name in ("arith.add", "arith.mul"):
        a, b = (largest(x, kernel, depth + 1) for x in owner.operands[:2])
        if a is None or b is None:
            return None
        return a + b if owner.name == "arith.add" else a * b
    return None


def copy_edge_proofs(op: Operation, kernel: Operation) -> list[str | None]:
    """Per dim of the register tile (rows, cols) or vector (its one dim) that a tk.load / tk.store
    copies from or to global memory: the proof that the dim's edge test cannot fail, else None."""
    tile = op.result.type if op.name == "tk.load" else op.operands[1].type
    idx = op.operands[2:] if op.name == "tk.store" else op.operands[1:]
    extents = (tile.rows, tile.cols) if isinstance(tile, TileType) else (tile.n,)
    dims = op.operands[0].type.dims[-len(extents):]
    coords = idx[len(idx) - len(extents):]
    return [why_in_bounds(c, e, d, kernel) for c, e, d in zip(coords, extents, dims, strict=True)]


def dim_in_bounds(coord: Value, extent: int, dim: int | str, kernel: Operation) -> bool:
    """Whether a tile dim of `extent` elements at tile coordinate `coord` (elements extent * coord ..)
    stays inside a tensor dim of `dim` elements (an int, or a size name)."""
    return why_in_bounds(coord, extent, dim, kernel) is not None


def why_in_bounds(coord: Value, extent: int, dim: int | str, kernel: Operation) -> str | None:
    """The proof that `dim_in_bounds` holds, in words (None when it does not)."""
    if isinstance(dim, int):
        top = largest(coord, kernel)
        if top is None or extent * (top + 1) > dim:
            return None
        return f"index <= {top}: {extent} x {top + 1} <= {dim}"
    if extent != 1 or not isinstance(coord.owner, Operation) or coord.owner.name != "tk.block_id":
        return None
    grid = kernel.attrs.get("grid") or []
    d = int(coord.owner.attrs["dim"])
    if d < len(grid) and _same_size(str(grid[d]), dim):
        return f"one row at block.{'xyz'[d]} of grid {grid[d]}"
    return None


def _same_size(expr: str, name: str) -> bool:
    """`expr` is the size `name` itself: `N`, `cdiv(N, 1)`, `N / 1`, `N // 1`."""
    try:
        if symexpr.names(expr) != {name}:
            return False
    except (SyntaxError, ValueError, RecursionError):
        return False
    text = expr.replace(" ", "")
    return text in (name, f"cdiv({name},1)", f"{name}/1", f"{name}//1", f"({name})")


def _static_grid(kernel: Operation, dim: int) -> int | None:
    grid = kernel.attrs.get("grid") or []
    if dim >= len(grid):
        return 1  # a grid given in fewer dims is 1 along the others (the launch pads it)
    g = grid[dim]
    if isinstance(g, int):
        return g if g >= 1 else None
    try:
        if symexpr.names(str(g)):
            return None
        n = symexpr.evaluate(str(g), {})
    except (SyntaxError, ValueError, KeyError, ZeroDivisionError, RecursionError):
        return None
    return n if n >= 1 else None


def _const(v: Value) -> int | None:
    op = v.owner
    if isinstance(op, Operation) and op.name == "arith.const":
        val = op.attrs.get("value")
        if isinstance(val, int) and not isinstance(val, bool):
            return val
    return None


def _owning_op(blk: Block) -> Operation | None:
    region = blk.parent
    return None if region is None else region.parent
