"""The .tk syntax tree: what frontend/parse.py builds and frontend/lower.py checks and lowers.

Plain dataclasses, one per construct, each with the `Loc` of its source. Binary operators carry
the location of the operator token, so a shape error points at the `@` or `+` that caused it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tkir.ir import Loc

# --- expressions ------------------------------------------------------------------------------


@dataclass
class Expr:
    loc: Loc


@dataclass
class Num(Expr):
    value: int | float


@dataclass
class Name(Expr):
    id: str


@dataclass
class ListLit(Expr):
    """`[a, b, ...]`: a list of values, written only as an annotation argument (`@tune(BM=[64, 128])`)."""

    items: list[Expr]


@dataclass
class Attr(Expr):
    """`base.name`: `block.x`, `t.T`."""

    base: Expr
    name: str


@dataclass
class Index(Expr):
    """`A[i, j]`: a tile of a global tensor."""

    base: Expr
    indices: list[Expr]


@dataclass
class Call(Expr):
    func: str
    args: list[Expr]


@dataclass
class BinOp(Expr):
    op: str  # + - * / % @
    lhs: Expr
    rhs: Expr


@dataclass
class Neg(Expr):
    operand: Expr


@dataclass
class Compare(Expr):
    op: str  # == != < <= > >=
    lhs: Expr
    rhs: Expr


# --- types, annotations -----------------------------------------------------------------------


@dataclass
class TypeExpr:
    """`gl<bf16>[M, K]`, `st<bf16, BM, BK>`, `f32`: kind, <args> and [dims] as written."""

    loc: Loc
    kind: str
    args: list[Expr] = field(default_factory=list)
    dims: list[Expr] | None = None


@dataclass
class Annotation:
    """`@name`, `@name(arg, ...)`, `@name(key=arg, ...)`."""

    loc: Loc
    name: str
    args: list[Expr] = field(default_factory=list)
    kwargs: list[tuple[str, Expr]] = field(default_factory=list)


# --- statements -------------------------------------------------------------------------------


@dataclass
class Stmt:
    loc: Loc
    annotations: list[Annotation]


@dataclass
class SharedDecl(Stmt):
    name: str
    type: TypeExpr


@dataclass
class RegDecl(Stmt):
    name: str
    type: TypeExpr
    init: Expr | None


@dataclass
class Let(Stmt):
    name: str
    value: Expr


@dataclass
class Assign(Stmt):
    target: Expr
    op: str  # = += -= *= /=
    value: Expr


@dataclass
class For(Stmt):
    var: str
    lo: Expr
    hi: Expr
    body: list[Stmt]
    step: Expr | None = None  # `step s`; None: 1


@dataclass
class If(Stmt):
    cond: Expr
    then: list[Stmt]
    orelse: list[Stmt] | None


@dataclass
class StaticAssert(Stmt):
    """`static_assert(cond, "message")`: a compile-time condition checked where the statement is
    compiled (not in an untaken compile-time branch); nothing in the IR."""

    cond: Expr
    message: str


# --- the kernel -------------------------------------------------------------------------------

AUTO = "auto"  # a const's value the compiler chooses (`<BQ=auto>`, `-D BQ=auto`; tkir/auto_consts.py)


@dataclass
class ConstParam:
    loc: Loc
    name: str
    value: int | float | str  # AUTO: chosen by the compiler from the kernel's @tune candidates


@dataclass
class Param:
    loc: Loc
    name: str
    type: TypeExpr


@dataclass
class Kernel:
    loc: Loc  # the kernel's name
    name: str
    annotations: list[Annotation]
    consts: list[ConstParam]
    params: list[Param]
    grid: list[Expr]
    grid_loc: Loc
    body: list[Stmt]
