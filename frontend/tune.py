"""A kernel's search space: the `@tune(...)` annotation, checked, and the points it spans.

    @tune(BM=[64, 128], BN=[128, 256], STAGES=[3, 4, 5], where=BM * BN <= 128 * 256)
    kernel gemm<BM=128, BN=256, BK=64, STAGES=4>(...)

Each named argument lists the values one const may take (numbers: compile-time expressions of
literals); `where=` (repeatable) is a compile-time condition on the consts that every point must
satisfy. The space is the product of the lists, in the order written, each point filling the
other consts from the kernel header. `-D` overrides (tkir.compile's keywords) pin a const: its list
collapses to that value.

The compiler reads the space here, before lowering: `read_space(path)` -> TuneSpace | None, and
`TuneSpace.points(fixed)` -> [Point(consts, dropped)], `dropped` naming the `where` that failed.
Compiling one point ignores the annotation (the IR has no trace of it), but every compile checks it
(`check_tune`, called by the lowering), so a misspelt const or a list of non-numbers is a located
error at once, not at tuning time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from tkir import scalar
from tkir.diagnostics import CompileError
from tkir.frontend import ast
from tkir.ir import Loc

WHERE = "where"
MAX_POINTS = 4096  # a space this large is a mistake (each point is a compile and a timing)
_BINARY = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "rem"}
_COMPARE = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}


@dataclass
class Point:
    consts: dict[str, int | float]   # every const of the kernel
    dropped: str | None = None       # why the space's own constraints drop it, or None


@dataclass
class TuneSpace:
    kernel: str
    defaults: dict[str, int | float]                 # the header's consts
    values: dict[str, list[int | float]]             # the tuned consts, in the order written
    where: list[tuple[str, ast.Expr]] = field(default_factory=list)  # (source text, condition)
    loc: Loc | None = None

    def points(self, fixed: dict[str, int | float] | None = None) -> list[Point]:
        """Every point of the space (fixed consts pinned), each marked with the `where` it fails."""
        fixed = dict(fixed or {})
        axes = {n: ([fixed[n]] if n in fixed else vs) for n, vs in self.values.items()}
        out = []
        for combo in itertools.product(*axes.values()):
            consts = {**self.defaults, **fixed, **dict(zip(axes, combo, strict=True))}
            dropped = None
            for text, cond in self.where:
                try:
                    holds = _eval(cond, consts)
                except ZeroDivisionError:
                    dropped = f"where {text} divides by zero"
                    break
                if not holds:
                    dropped = f"where {text} is false"
                    break
            out.append(Point(consts, dropped))
        return out


def read_space(text: str, filename: str = "<string>") -> TuneSpace | None:
    """The checked search space of the kernel in `text`, or None when it has no `@tune`."""
    from tkir.frontend.parse import parse_source

    kernel = parse_source(text, filename)
    ann = next((a for a in kernel.annotations if a.name == "tune"), None)
    return None if ann is None else check_tune(kernel, ann, text)


def check_tune(kernel: ast.Kernel, a: ast.Annotation, source: str) -> TuneSpace:
    """Check `@tune(...)` against the kernel's consts; the space it describes."""
    def error(loc: Loc, msg: str, hint: str | None = None) -> CompileError:
        return CompileError(loc, msg, source, hint=hint)

    defaults = {c.name: c.value for c in kernel.consts}
    if a.args or not a.kwargs:
        raise error(a.loc, "'@tune' takes named arguments: the values of each const to try",
                    hint="write @tune(BM=[64, 128], STAGES=[3, 4])")
    space = TuneSpace(kernel.name, defaults, {}, [], a.loc)
    for key, e in a.kwargs:
        if key == WHERE:
            if isinstance(e, ast.ListLit):
                raise error(e.loc, "'where' takes one condition", hint="write where=BM * BN <= 32768")
            _check_const_expr(e, defaults, error, "a 'where' condition")
            space.where.append((_text(e, source), e))
            continue
        if key not in defaults:
            raise error(e.loc, f"'@tune' names '{key}', which is not a const of kernel '{kernel.name}'",
                        hint=f"consts: {', '.join(defaults) or 'none'} (declare it in <...> with a default)")
        if key in space.values:
            raise error(e.loc, f"'@tune' lists const '{key}' twice")
        if not isinstance(e, ast.ListLit) or not e.items:
            raise error(e.loc, f"'@tune' needs a non-empty list of values for '{key}'",
                        hint=f"write {key}=[{defaults[key]}, ...]")
        vals: list[int | float] = []
        for item in e.items:
            _check_const_expr(item, {}, error, "a value to try")
            try:
                v = _eval(item, {})
            except ZeroDivisionError:
                raise error(item.loc, f"division by zero in a value of '{key}' to try") from None
            if (defaults[key] == ast.AUTO or isinstance(defaults[key], int)) and not isinstance(v, int):
                raise error(item.loc, f"'{key}' is an integer const: its values must be integers, got {v}")
            if v in vals:
                raise error(item.loc, f"value {v} of '{key}' is listed twice")
            vals.append(v)
        space.values[key] = vals
    n = 1
    for vs in space.values.values():
        n *= len(vs)
    if n > MAX_POINTS:
        raise error(a.loc, f"'@tune' spans {n} points, more than {MAX_POINTS}",
                    hint="narrow the lists or pin consts with -D")
    return space


def _check_const_expr(e: ast.Expr, consts: dict, error, what: str) -> None:
    """A compile-time expression of numbers and these consts (no sizes, no run-time values)."""
    if isinstance(e, ast.Num):
        return
    if isinstance(e, ast.Name):
        if e.id not in consts:
            raise error(e.loc, f"'{e.id}' in {what} is not a const"
                        + (f" (consts: {', '.join(consts)})" if consts else " (write a number)"))
        return
    if isinstance(e, ast.Neg):
        return _check_const_expr(e.operand, consts, error, what)
    if isinstance(e, ast.BinOp):  # a chain, in a loop (ast.left_spine); its outermost `@` is the error
        bottom, chain = ast.left_spine(e)
        bad = [link for link in chain if link.op not in _BINARY]
        if not bad:
            _check_const_expr(bottom, consts, error, what)
            for link in chain:
                _check_const_expr(link.rhs, consts, error, what)
            return
        e = bad[-1]
    if isinstance(e, ast.Compare):
        _check_const_expr(e.lhs, consts, error, what)
        _check_const_expr(e.rhs, consts, error, what)
        return
    if isinstance(e, ast.Call) and e.func in ("min", "max", "cdiv") and len(e.args) == 2:
        for x in e.args:
            _check_const_expr(x, consts, error, what)
        return
    raise error(e.loc, f"{what} must be compile-time arithmetic or a comparison of consts and numbers")


def _eval(e: ast.Expr, consts: dict[str, int | float]) -> int | float:
    if isinstance(e, ast.Num):
        return e.value
    if isinstance(e, ast.Name):
        return consts[e.id]
    if isinstance(e, ast.Neg):
        return -_eval(e.operand, consts)
    if isinstance(e, ast.Compare):
        return int(scalar.COMPARE[_COMPARE[e.op]](_eval(e.lhs, consts), _eval(e.rhs, consts)))
    if isinstance(e, ast.BinOp):
        bottom, chain = ast.left_spine(e)
        value = _eval(bottom, consts)
        for link in chain:
            value = scalar.binary(_BINARY[link.op], value, _eval(link.rhs, consts))
        return value
    assert isinstance(e, ast.Call)
    return scalar.binary(e.func, _eval(e.args[0], consts), _eval(e.args[1], consts))


def _text(e: ast.Expr, source: str) -> str:
    """The condition as written (reconstructed: the tree keeps start positions only)."""
    if isinstance(e, ast.Num):
        return str(e.value)
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Neg):
        return f"-{_text(e.operand, source)}"
    if isinstance(e, ast.BinOp):
        bottom, chain = ast.left_spine(e)
        return " ".join([_text(bottom, source), *(f"{link.op} {_text(link.rhs, source)}" for link in chain)])
    if isinstance(e, ast.Compare):
        return f"{_text(e.lhs, source)} {e.op} {_text(e.rhs, source)}"
    if isinstance(e, ast.Call):
        return f"{e.func}({', '.join(_text(x, source) for x in e.args)})"
    return "?"
