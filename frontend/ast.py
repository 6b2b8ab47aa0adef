"""The .tk syntax tree: what frontend/parse.py builds and frontend/lower.py checks and lowers.

Plain record classes, one per construct, each with the `Loc` of its source. Binary operators carry
the location of the operator token, so a shape error points at the `@` or `+` that caused it.

The classes behave as dataclasses do (fields from the annotations, base classes' first; construction
by position or keyword; `==` field by field; a repr; not hashable) but are not made by
`dataclasses.dataclass`: its code generation cost about 7 ms at every start of tkc for these 23
classes, `Node.__init_subclass__` about 0.3 ms (docs/experiments.md, "Compile time").
"""

from __future__ import annotations

from typing import Any, ClassVar, dataclass_transform

from tkir.ir import Loc

NEW_LIST: Any = object()  # a field's default: a new empty list for each node (dataclasses' default_factory=list)


@dataclass_transform(eq_default=True)
class Node:
    """Base of the syntax tree's classes: their annotated fields make the constructor, == and repr."""

    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, object]] = {}
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value: as a dataclass with eq

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own = [n for n, t in cls.__dict__.get("__annotations__", {}).items() if not str(t).startswith("ClassVar")]
        cls._fields = cls._fields + tuple(n for n in own if n not in cls._fields)
        cls._defaults = {**cls._defaults, **{n: cls.__dict__[n] for n in own if n in cls.__dict__}}
        cls.__match_args__ = cls._fields

    def __init__(self, *args: object, **kwargs: object) -> None:
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} arguments, got {len(args)}")
        for name, value in zip(fields, args, strict=False):  # fewer args than fields: the rest below
            setattr(self, name, value)
        for name in fields[len(args):]:
            if name in kwargs:
                value = kwargs.pop(name)
            elif name in self._defaults:
                value = self._defaults[name]
                value = [] if value is NEW_LIST else value
            else:
                raise TypeError(f"{type(self).__name__}() missing argument '{name}'")
            setattr(self, name, value)
        if kwargs:
            raise TypeError(f"{type(self).__name__}() got an unexpected argument '{next(iter(kwargs))}'")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._fields)

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{f}={getattr(self, f)!r}' for f in self._fields)})"

# --- expressions ------------------------------------------------------------------------------


class Expr(Node):
    loc: Loc


class Num(Expr):
    value: int | float


class Name(Expr):
    id: str


class ListLit(Expr):
    """`[a, b, ...]`: a list of values, written only as an annotation argument (`@tune(BM=[64, 128])`)."""

    items: list[Expr]


class Attr(Expr):
    """`base.name`: `block.x`, `t.T`."""

    base: Expr
    name: str


class Index(Expr):
    """`A[i, j]`: a tile of a global tensor."""

    base: Expr
    indices: list[Expr]


class Call(Expr):
    func: str
    args: list[Expr]


class BinOp(Expr):
    op: str  # + - * / % @ and the bit operators & | ^ << >>
    lhs: Expr
    rhs: Expr


class Neg(Expr):
    operand: Expr


def left_spine(e: Expr) -> tuple[Expr, list[BinOp]]:
    """A chain of binary operators `a + b - c + ...` (left-associative: each BinOp's lhs is the chain so
    far) as the operand at its bottom and its BinOps from the innermost up. The walkers of the front end
    go up such chains in a loop, so a long sum is as deep as one `+` (parse.py limits the rest)."""
    spine: list[BinOp] = []
    while isinstance(e, BinOp):
        spine.append(e)
        e = e.lhs
    spine.reverse()
    return e, spine


def operator_count(e: Expr) -> int:
    """The binary operators, comparisons, negations and calls in `e` (counted with a stack, not recursion)."""
    count, todo = 0, [e]
    while todo:
        e = todo.pop()
        if isinstance(e, (BinOp, Compare)):
            todo += [e.lhs, e.rhs]
        elif isinstance(e, Neg):
            todo.append(e.operand)
        elif isinstance(e, Call):
            todo += e.args
        elif isinstance(e, Attr):
            todo.append(e.base)
            continue
        elif isinstance(e, Index):
            todo += [e.base, *e.indices]
            continue
        else:
            continue
        count += 1
    return count


class Compare(Expr):
    op: str  # == != < <= > >=
    lhs: Expr
    rhs: Expr


# --- types, annotations -----------------------------------------------------------------------


class TypeExpr(Node):
    """`gl<bf16>[M, K]`, `st<bf16, BM, BK>`, `f32`: kind, <args> and [dims] as written."""

    loc: Loc
    kind: str
    args: list[Expr] = NEW_LIST
    dims: list[Expr] | None = None


class Annotation(Node):
    """`@name`, `@name(arg, ...)`, `@name(key=arg, ...)`; `@passes(...)` keeps its text as written (pipeline
    edits, not expressions) and where that text starts."""

    loc: Loc
    name: str
    args: list[Expr] = NEW_LIST
    kwargs: list[tuple[str, Expr]] = NEW_LIST
    text: str | None = None
    text_loc: Loc | None = None


# --- statements -------------------------------------------------------------------------------


class Stmt(Node):
    loc: Loc
    annotations: list[Annotation]


class SharedDecl(Stmt):
    name: str
    type: TypeExpr


class RegDecl(Stmt):
    name: str
    type: TypeExpr
    init: Expr | None


class Let(Stmt):
    name: str
    value: Expr


class Assign(Stmt):
    target: Expr
    op: str  # = += -= *= /=
    value: Expr


class For(Stmt):
    var: str
    lo: Expr
    hi: Expr
    body: list[Stmt]
    step: Expr | None = None  # `step s`; None: 1


class If(Stmt):
    cond: Expr
    then: list[Stmt]
    orelse: list[Stmt] | None


class StaticAssert(Stmt):
    """`static_assert(cond, "message")`: a compile-time condition checked where the statement is
    compiled (not in an untaken compile-time branch); nothing in the IR."""

    cond: Expr
    message: str


# --- the kernel -------------------------------------------------------------------------------

AUTO = "auto"  # a const's value the compiler chooses (`<BQ=auto>`, `-D BQ=auto`; tkir/tools/auto_consts.py)


class ConstParam(Node):
    loc: Loc
    name: str
    value: int | float | str  # AUTO: chosen by the compiler from the kernel's @tune candidates


class Param(Node):
    loc: Loc
    name: str
    type: TypeExpr


class Kernel(Node):
    loc: Loc  # the kernel's name
    name: str
    annotations: list[Annotation]
    consts: list[ConstParam]
    params: list[Param]
    grid: list[Expr]
    grid_loc: Loc
    body: list[Stmt]
