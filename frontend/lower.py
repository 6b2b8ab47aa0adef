"""Check a .tk syntax tree (names, shapes, dtypes, annotations) and lower it to tk-level tile IR.

One pass over the tree does both: every expression is type-checked as it is lowered, so each
error points at the construct that caused it. What it produces:

* compile-time values (const params, literals, `let`s of them) fold in Python and become
  `arith.const` only where run-time code reads them; sizes, block ids and constants are emitted
  once, at the top of the kernel (so they dominate every use);
* register variables (`reg`) are SSA-renamed (mem2reg style): an assignment makes a new value; a
  `for` loop carries every register variable that its body assigns and that has a value before
  the loop (iter_args / scf.yield / results);
* shared tiles are memory: `a = A[i, j]` is `tk.load %a, %A, ...`, no renaming;
* compile-time `if` is folded like `#if`; a run-time `if` (a comparison of scalars) is an scf.if
  that carries register variables as a loop does.

The lowering is a stack of classes, each in its own module and each built on the one below:
frontend/scope.py (names in scope, emission, the kernel's prologue), operands.py (operands and the
arithmetic operators), exprs.py (expressions; the builtin functions are the table of calls.py),
stmts.py (statements; the annotations are the table of annotations.py, declared types are resolved
by type_exprs.py), and this module's `Lowerer`, the driver: the kernel's header (consts,
parameters, grid, kernel annotations), then its body.
"""

from __future__ import annotations

import ast as pyast
import re

from tkir import symexpr
from tkir.frontend import ast
from tkir.frontend.annotations import PASSES_ATTR, kernel_attrs, pass_edits
from tkir.frontend.scope import KIND_WORDS, Symbol
from tkir.frontend.stmts import StatementLowering
from tkir.frontend.type_exprs import DeferredDim, resolve_type
from tkir.ir import Loc, Module, Operation, Region, Value
from tkir.types import GlobalType, ScalarType
from tkir.verifier import verify
from tkir.verify_sizes import grid_limit_problem

MAX_GRID_DIMS = 3  # CUDA grids have x, y, z
# Operators in one grid expression: its text is read by Python's parser (tkir/symexpr.py), which refuses
# expressions nested more than 3 x the recursion limit deep (CPython 3.11 Python/ast.c,
# COMPILER_STACK_FRAME_SCALE; 3000 at the default limit of 1000): a sum of 3000 terms is that deep
MAX_GRID_OPERATORS = 1000
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "%": 2}


_UNIT = re.compile(r"(?<![\w.])[01](?![\w.])")  # a number 0 or 1 standing alone in a size expression


class _UnitFactors(pyast.NodeTransformer):
    """Drops factors and divisors of 1, and terms that are 0 or a product with 0 (`D * (1 + DET * (cdiv(N, BKV)
    - 1))` at DET = 0 is D: a const switches a dim's size term off, as attention_bwd.tk's deterministic mode)."""

    def visit_BinOp(self, node: pyast.BinOp) -> pyast.AST:  # noqa: N802 - the NodeTransformer protocol
        self.generic_visit(node)
        one, zero = pyast.dump(pyast.Constant(1)), pyast.dump(pyast.Constant(0))
        left, right = pyast.dump(node.left), pyast.dump(node.right)
        if isinstance(node.op, (pyast.Mult, pyast.Div, pyast.FloorDiv)) and right == one:
            return node.left
        if isinstance(node.op, pyast.Mult) and left == one:
            return node.right
        if isinstance(node.op, pyast.Mult) and zero in (left, right):
            return pyast.Constant(0)
        if isinstance(node.op, (pyast.Add, pyast.Sub)) and right == zero:
            return node.left
        if isinstance(node.op, pyast.Add) and left == zero:
            return node.right
        return node


def _without_unit_factors(text: str) -> str:
    """A size expression (a tensor dim's or the grid's) without its factors and divisors of 1 (`H / G` at
    G = 1 is the size H itself, so a kernel's default G = 1 declares exactly what it did before it had G);
    else `text` as it was."""
    if not _UNIT.search(text):  # nothing to drop (and long chains are left to symexpr, not walked here)
        return text
    try:
        tree = pyast.parse(text, mode="eval")
        simpler = pyast.unparse(_UnitFactors().visit(pyast.parse(text, mode="eval")))
    except RecursionError:  # nested too deeply for Python's own walkers: kept as written
        return text
    return text if simpler == pyast.unparse(tree) else simpler


def _noun(what: str, article: str = "") -> str:
    """'grid' or 'tensor dim' from size_expr's `what` ("the grid", "a tensor dim"), with `article` if given."""
    noun = what.split(" ", 1)[1]
    return f"{'an' if article and noun[0] in 'aeiou' else article} {noun}".strip()


def lower_kernel(kernel: ast.Kernel, source: str, consts: dict[str, int | float] | None = None) -> Module:
    """Lower one parsed kernel; `consts` override its compile-time parameters (-D NAME=VALUE)."""
    module = Lowerer(source).kernel(kernel, dict(consts or {}))
    verify(module)
    return module


class Lowerer(StatementLowering):
    """The driver: a kernel's header, then its body."""

    def kernel(self, k: ast.Kernel, overrides: dict[str, int | float]) -> Module:
        self.kernel_ast = k
        names = [c.name for c in k.consts]
        for name in overrides:
            if name not in names:
                raise self.error(k.loc, f"unknown const '{name}' in -D {name}=...",
                                 hint=f"kernel '{k.name}' has consts: {', '.join(names) or 'none'}")
        consts: dict[str, int | float] = {}
        for c in k.consts:
            value = overrides.get(c.name, c.value)
            if isinstance(value, bool) or not isinstance(value, (int, float, str)) or \
                    (isinstance(value, str) and value != ast.AUTO):
                raise self.error(c.loc, f"const '{c.name}' = {value!r}: a const is an integer or a number",
                                 hint=f"pass -D {c.name}=<number> (tkir.compile: {c.name}=<int or float>)")
            if value == ast.AUTO:
                raise self.error(c.loc, f"const '{c.name}' is auto: the compiler chooses it (tkir.compile, tkc), "
                                        "and this entry point needs its value",
                                 hint=f"pass -D {c.name}=<value>, or compile with tkir.compile / tkc")
            self.declare(Symbol("const", c.name, c.loc, const=value))
            consts[c.name] = value
        params = self.params(k.params)
        grid = self.grid(k)
        attrs: dict[str, object] = {}
        if consts:
            attrs["consts"] = consts
        attrs["grid"] = grid
        attrs.update(kernel_attrs(self, k.annotations))
        for p in params:
            self.kblock.add_arg(p)
        op = Operation("tk.kernel", [], [], attrs, [Region(self.kblock)], symbol=k.name, loc=k.loc)
        for a in k.annotations:  # @passes: its edits, located in the source, for the errors of applying them
            if a.name == "passes":
                op.requested[PASSES_ATTR] = pass_edits(a, self.source)
        self.stmts(k.body)
        return Module(ops=[op], source=k.loc.file)

    def params(self, params: list[ast.Param]) -> list[Value]:
        values = []
        sizes: dict[str, Loc] = {}
        for p in params:
            t = resolve_type(self, p.type, sizes)
            if not isinstance(t, (GlobalType, ScalarType)):
                raise self.error(p.type.loc, f"kernel parameter '{p.name}' has type {t}",
                                 hint="parameters are global tensors (gl<...>[...]) or scalars (f32, i32)")
            v = Value(t, p.name)
            kind = "global" if isinstance(t, GlobalType) else "scalar"
            self.declare(Symbol(kind, p.name, p.loc, value=v))
            values.append(v)
        for name, loc in sizes.items():
            self.declare(Symbol("size", name, loc))
        for v in values:  # dims that are expressions of the sizes (`H / G`), now that every size is declared
            if isinstance(v.type, GlobalType) and any(isinstance(d, DeferredDim) for d in v.type.dims):
                v.type = GlobalType(v.type.dtype, tuple(self.size_dim(d.expr) if isinstance(d, DeferredDim) else d
                                                        for d in v.type.dims))
        return values

    def size_dim(self, e: ast.Expr) -> str | int:
        """A tensor dim that is an expression of sizes and consts, in tkir.symexpr syntax (bound at launch
        from the sizes that other dims name plainly, and checked against the tensor's shape there)."""
        if ast.operator_count(e) > MAX_GRID_OPERATORS:
            raise self.error(ast.left_spine(e)[0].loc, f"this dim expression has more than {MAX_GRID_OPERATORS} "
                             "operators", hint="fold its terms into fewer (a const, or a multiple of a size)")
        text = self.size_expr(e, "a tensor dim")
        try:
            symexpr.check(text)
        except symexpr.SymExprError as why:
            raise self.error(ast.left_spine(e)[0].loc, f"this dim expression cannot be evaluated: {why}") from None
        simpler = _without_unit_factors(text)
        return int(simpler) if simpler.isdigit() else simpler  # folded to a number: a number dim

    def grid(self, k: ast.Kernel) -> list[str]:
        if not k.grid:
            raise self.error(k.loc, "the grid needs at least one dimension")
        if len(k.grid) > MAX_GRID_DIMS:
            raise self.error(k.grid[MAX_GRID_DIMS].loc,
                             f"the grid has {len(k.grid)} dimensions; at most {MAX_GRID_DIMS} (x, y, z)")
        for e in k.grid:
            if ast.operator_count(e) > MAX_GRID_OPERATORS:
                raise self.error(ast.left_spine(e)[0].loc, f"this grid expression has more than {MAX_GRID_OPERATORS} "
                                 "operators", hint="fold its terms into fewer (a const, or a multiple of a size)")
        exprs = [_without_unit_factors(self.size_expr(e)) for e in k.grid]
        for axis, (e, text) in enumerate(zip(k.grid, exprs, strict=True)):
            try:
                symexpr.check(text)
            except symexpr.SymExprError as why:  # Python's parser of size expressions refuses it (too deep)
                raise self.error(ast.left_spine(e)[0].loc, f"this grid expression cannot be evaluated: {why}",
                                 hint="fold its terms into fewer (a const, or a multiple of a size)") from None
            if not symexpr.names(text):  # a number of blocks: within CUDA's limits (tkir/target.py)
                problem = grid_limit_problem(axis, symexpr.evaluate(text, {}))
                if problem:
                    raise self.error(e.loc, problem)
        return exprs

    def size_expr(self, e: ast.Expr, what: str = "the grid") -> str:
        """A grid expression (or, with `what`, a tensor dim's) in tkir.symexpr syntax, consts substituted
        and folded."""
        c = self.const_eval(e)
        if c is not None:
            if not isinstance(c, int):
                raise self.error(e.loc, f"{_noun(what)} sizes are integers, got {c}")
            return str(c)
        if isinstance(e, ast.Name):
            sym = self.lookup(e.id)
            if sym is None or sym.kind != "size":
                raise self.error(e.loc, f"{what} uses sizes and consts; '{e.id}' is "
                                 + ("unknown" if sym is None else f"a {KIND_WORDS[sym.kind]}"),
                                 hint=None if what == "the grid" else "a size is a name another dim binds plainly")
            return e.id
        if isinstance(e, ast.BinOp):
            return self.size_chain(e, what)
        if isinstance(e, ast.Call) and e.func in ("cdiv", "min", "max") and len(e.args) == 2:
            if e.func == "cdiv" and self.const_eval(e.args[1]) == 0:
                raise self.error(e.args[1].loc, f"division by zero in {_noun(what, 'a')} expression")
            return f"{e.func}({self.size_expr(e.args[0], what)}, {self.size_expr(e.args[1], what)})"
        raise self.error(e.loc, f"unsupported {_noun(what)} expression",
                         hint="use sizes, consts, + - * / % and cdiv/min/max")

    def size_chain(self, e: ast.BinOp, what: str = "the grid") -> str:
        """A chain of operators (ast.left_spine) in a loop: the folded prefix as its number, each link whose
        value is known only at launch as `lhs op rhs`, the lhs in parentheses where precedence needs them."""
        bottom, chain = ast.left_spine(e)
        parts = [self.size_expr(bottom, what)]
        value = self.const_eval(bottom)
        prev: ast.BinOp | None = None  # the link whose text `parts` holds, when it is not a number
        for link in chain:
            value = self.fold_link(link, value, self.const_eval(link.rhs))
            if value is not None:  # a number, as size_expr gives it
                if not isinstance(value, int):
                    raise self.error(link.loc, f"{_noun(what)} sizes are integers, got {value}")
                parts, prev = [str(value)], None
                continue
            if link.op not in _PRECEDENCE:
                raise self.error(link.loc, f"unsupported {_noun(what)} expression",
                                 hint="use sizes, consts, + - * / % and cdiv/min/max")
            if link.op in "/%" and self.const_eval(link.rhs) == 0:  # whatever the sizes: not left to the launch
                raise self.error(link.loc, f"division by zero in {_noun(what, 'a')} expression")
            if prev is not None and _PRECEDENCE.get(prev.op, 3) < _PRECEDENCE[link.op]:
                parts = ["(", *parts, ")"]
            parts += [f" {link.op} ", self.size_operand(link.rhs, link.op, True, what)]
            prev = link
        return "".join(parts)

    def size_operand(self, e: ast.Expr, parent: str, right: bool, what: str = "the grid") -> str:
        text = self.size_expr(e, what)
        if isinstance(e, ast.BinOp) and self.const_eval(e) is None:
            p, q = _PRECEDENCE[parent], _PRECEDENCE.get(e.op, 3)
            if q < p or (right and q == p):
                return f"({text})"
        return text
