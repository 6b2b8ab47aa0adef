"""The tile IR's data structures: values, operations, blocks, regions and the module.

An operation has a name (`dialect.op`), operands, results, an ordered attribute dict, an
optional symbol (`@name`) and regions. A region holds one block; a block has arguments (loop
induction variables, loop-carried values, kernel parameters) and a list of operations.
Values carry a readable name taken from the source (`acc`, `a`); the printer makes names
unique per kernel, so parsed names survive a round trip unchanged.

The same structures serve every level of the pipeline: the tk level the front end builds, and
the annotated levels the passes produce (tile types gain `swizzle`, `layout`, ...; copies
become `tma.load`; loops become producer/consumer roles).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tkir.types import Type


@dataclass(frozen=True)
class Loc:
    """A source location: file, 1-based line and column."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Value:
    """An SSA value: the result of an operation or the argument of a block."""

    __slots__ = ("name", "type", "owner")

    def __init__(self, type: Type, name: str | None = None, owner: object = None):
        self.type = type
        self.name = name
        self.owner = owner  # Operation (result) or Block (argument)

    def __repr__(self) -> str:
        return f"<Value %{self.name}: {self.type}>"


class Operation:
    """One operation of the IR."""

    def __init__(
        self,
        name: str,
        operands: list[Value] | None = None,
        result_types: list[Type] | None = None,
        attrs: dict[str, object] | None = None,
        regions: list[Region] | None = None,
        symbol: str | None = None,
        result_names: list[str | None] | None = None,
        loc: Loc | None = None,
    ):
        self.name = name
        self.operands: list[Value] = list(operands or [])
        rtypes = list(result_types or [])
        names = list(result_names or [None] * len(rtypes))
        self.results: list[Value] = [Value(t, n, self) for t, n in zip(rtypes, names, strict=True)]
        self.attrs: dict[str, object] = dict(attrs or {})
        self.regions: list[Region] = list(regions or [])
        for r in self.regions:
            r.parent = self
        self.symbol = symbol
        self.loc = loc
        self.parent: Block | None = None
        # what the source asked for by annotation (`@stages(4)` -> {"stages": 4}), beside the attrs a pass may
        # also set or change, not printed: a pass that cannot honour a request says so at `loc`
        self.requested: dict[str, object] = {}

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]

    @property
    def body(self) -> Block:
        """The block of the op's first region (loops, kernels)."""
        return self.regions[0].block

    def walk(self) -> Iterator[Operation]:
        """This op and every op nested in its regions, in program order (pre-order)."""
        yield self
        yield from _walk_regions(self)

    def __repr__(self) -> str:
        return f"<Operation {self.name}>"


def _walk_regions(op: Operation) -> Iterator[Operation]:
    """The ops nested in `op`'s regions, pre-order; a block's op list is copied when the walk enters it and
    an op's regions are read after it is yielded (the caller may rewrite what it was given), as a walk per
    op did; only an op with regions costs a generator (the verifier walks every kernel after every pass)."""
    for r in op.regions:
        for inner in list(r.block.ops):
            yield inner
            if inner.regions:
                yield from _walk_regions(inner)


class Block:
    """A straight-line list of operations with typed arguments."""

    def __init__(self, args: list[Value] | None = None, ops: list[Operation] | None = None):
        self.args: list[Value] = []
        for a in args or []:
            self.add_arg(a)
        self.ops: list[Operation] = []
        for op in ops or []:
            self.append(op)
        self.parent: Region | None = None

    def add_arg(self, v: Value) -> Value:
        v.owner = self
        self.args.append(v)
        return v

    def append(self, op: Operation) -> Operation:
        return self.insert(len(self.ops), op)

    def insert(self, index: int, op: Operation) -> Operation:
        """Put `op` (not in any block) at position `index` of this block and make this block its parent."""
        if op.parent is not None:
            raise ValueError(f"{op.name} is already in a block; remove it from there first")
        self.ops.insert(index, op)
        op.parent = self
        return op

    def insert_before(self, anchor: Operation, op: Operation) -> Operation:
        return self.insert(self._index(anchor), op)

    def insert_after(self, anchor: Operation, op: Operation) -> Operation:
        return self.insert(self._index(anchor) + 1, op)

    def remove(self, op: Operation) -> None:
        self.ops.remove(op)
        op.parent = None

    def _index(self, anchor: Operation) -> int:
        if anchor.parent is not self:
            raise ValueError(f"anchor {anchor.name} is not in this block")
        return self.ops.index(anchor)

    @property
    def terminator(self) -> Operation | None:
        return self.ops[-1] if self.ops else None


class Region:
    """A region with a single block."""

    def __init__(self, block: Block | None = None):
        self.block = block or Block()
        self.block.parent = self
        self.parent: Operation | None = None


@dataclass
class Module:
    """The top level: kernels (`tk.kernel`) and module-level entities (`tma.desc`, ...)."""

    ops: list[Operation] = field(default_factory=list)
    source: str | None = None  # the file it came from, for diagnostics

    def walk(self) -> Iterator[Operation]:
        for op in list(self.ops):
            yield from op.walk()

    def kernels(self) -> list[Operation]:
        return [op for op in self.ops if op.name == "tk.kernel"]

    @property
    def kernel(self) -> Operation:
        ks = self.kernels()
        if len(ks) != 1:
            raise ValueError(f"expected one tk.kernel in the module, found {len(ks)}")
        return ks[0]

    def insert_before(self, anchor: Operation, op: Operation) -> Operation:
        """Put module-level `op` (a `tma.desc`, ...) right before the top-level op `anchor`."""
        if not any(o is anchor for o in self.ops):
            raise ValueError(f"anchor {anchor.name} is not in this module")
        self.ops.insert(self.ops.index(anchor), op)
        return op

    def lookup(self, symbol: str) -> Operation | None:
        for op in self.ops:
            if op.symbol == symbol:
                return op
        return None


# ---------------------------------------------------------------------------------------------
# Rewriting helpers used by passes.


def uses_of(root: Operation | Module, value: Value) -> list[tuple[Operation, int]]:
    """Every (op, operand index) under `root` that reads `value`."""
    out = []
    for op in root.walk():
        for i, v in enumerate(op.operands):
            if v is value:
                out.append((op, i))
    return out


def replace_all_uses(root: Operation | Module, old: Value, new: Value) -> None:
    for op in root.walk():
        op.operands = [new if v is old else v for v in op.operands]


def parent_op(op: Operation) -> Operation | None:
    blk = op.parent
    if blk is None or blk.parent is None:
        return None
    return blk.parent.parent


def clone_op(op: Operation, mapping: dict[Value, Value]) -> Operation:
    """Deep-copy `op` (and its regions), remapping operands through `mapping` (updated in place)."""
    new = Operation(
        op.name,
        [mapping.get(v, v) for v in op.operands],
        [r.type for r in op.results],
        dict(op.attrs),
        [],
        op.symbol,
        [r.name for r in op.results],
        op.loc,
    )
    new.requested = dict(op.requested)
    for old_r, new_r in zip(op.results, new.results, strict=True):
        mapping[old_r] = new_r
    for region in op.regions:
        blk = Block()
        for a in region.block.args:
            na = blk.add_arg(Value(a.type, a.name))
            mapping[a] = na
        for inner in region.block.ops:
            blk.append(clone_op(inner, mapping))
        r = Region(blk)
        r.parent = new
        new.regions.append(r)
    return new
