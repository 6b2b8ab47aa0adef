"""The name check of code a compile-time `if` does not take (issue 14).

A compile-time `if` is folded like `#if`: only the taken branch is lowered and type-checked. The
other branch is still read here, so a misspelt name does not wait for another `-D` to surface.
What it checks does not depend on the consts' values:

* every name is visible (a parameter, size, const or declaration before the `if`, one declared
  earlier in the branch, or one declared in an untaken branch of an earlier compile-time `if`);
* every called function exists and gets an argument count it takes;
* `block.x|y|z` and `.T` are the only attributes; types and dtypes are known kinds, and so are
  annotations;
* a `static_assert`'s condition is read for its names only: it does not fire in untaken code.

What depends on the consts (shapes, dtypes, whether a nested `if` is compile-time, duplicate names
that only collide under some consts) stays with the lowering of the taken branch. The check is
lenient where it cannot know: a nested `if`'s declarations stay visible after it, whichever branch
declared them. docs/language.md states the rule.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from tkir.diagnostics import CompileError
from tkir.frontend import ast
from tkir.ir import Loc


def close_matches(word: str, candidates: Collection[str], n: int = 1) -> list[str]:
    """difflib.get_close_matches, for "did you mean" hints; difflib is imported here, on the first
    error that needs it, not with the front end."""
    import difflib

    return difflib.get_close_matches(word, candidates, n=n)


@dataclass(frozen=True)
class Vocabulary:
    """What the language knows by name (the front end's tables: frontend/calls.py, annotations.py, type_exprs.py)."""

    functions: Mapping[str, tuple[int, int]]  # name: (least, most) arguments
    type_kinds: Collection[str]  # gl st sv rt rv and the scalar dtypes
    dtypes: Collection[str]
    annotations: Collection[str]
    block_dims: Collection[str]
    implicit: Collection[str]  # names usable without a declaration (inf)


def check_untaken(stmts: list[ast.Stmt], visible: Collection[str], if_loc: Loc, words: Vocabulary,
                  source: str) -> dict[str, Loc]:
    """Check the names of `stmts`, the branch not taken of the compile-time `if` at `if_loc`;
    `visible` are the names in scope before the `if`. Returns the names the branch declares at its
    top level (where they are declared), for later untaken branches that use them."""
    checker = _Checker(words, source, if_loc, visible)
    checker.stmts(stmts)
    return checker.scopes[0]


class _Checker:
    def __init__(self, words: Vocabulary, source: str, if_loc: Loc, visible: Collection[str]) -> None:
        self.words = words
        self.source = source
        self.if_loc = if_loc
        self.visible = visible  # the names in scope before the `if`
        self.scopes: list[dict[str, Loc]] = [{}]  # what the branch declares, one dict per nested block

    def error(self, loc: Loc, msg: str, close: str | None = None) -> CompileError:
        note = (f"the compile-time 'if' at line {self.if_loc.line} does not take this branch with these "
                "consts, but its names are checked")
        hint = f"did you mean '{close}'? ({note})" if close else note
        return CompileError(loc, msg, self.source, hint=hint)

    def known(self, name: str) -> bool:
        return name in self.visible or any(name in s for s in self.scopes)

    def declare(self, name: str, loc: Loc) -> None:
        self.scopes[-1][name] = loc

    def nested(self, stmts: list[ast.Stmt]) -> dict[str, Loc]:
        """Check a nested block in its own scope; what it declared."""
        self.scopes.append({})
        self.stmts(stmts)
        return self.scopes.pop()

    # --- statements ----------------------------------------------------------------------------

    def stmts(self, stmts: list[ast.Stmt]) -> None:
        for s in stmts:
            for a in s.annotations:
                if a.name not in self.words.annotations:
                    raise self.error(a.loc, f"unknown annotation '@{a.name}'")
            getattr(self, f"stmt_{type(s).__name__.lower()}")(s)

    def stmt_shareddecl(self, s: ast.SharedDecl) -> None:
        self.type(s.type)
        self.declare(s.name, s.loc)

    def stmt_regdecl(self, s: ast.RegDecl) -> None:
        self.type(s.type)
        if s.init is not None:
            self.expr(s.init)
        self.declare(s.name, s.loc)

    def stmt_let(self, s: ast.Let) -> None:
        self.expr(s.value)
        self.declare(s.name, s.loc)

    def stmt_assign(self, s: ast.Assign) -> None:
        if isinstance(s.target, ast.Name) and not self.known(s.target.id):
            what = "assignment to" if s.op == "=" else f"'{s.op}' on"
            raise self.error(s.target.loc, f"{what} undeclared variable '{s.target.id}'",
                             self.close(s.target.id))
        self.expr(s.target)
        self.expr(s.value)

    def stmt_for(self, s: ast.For) -> None:
        for e in (s.lo, s.hi, s.step):
            if e is not None:
                self.expr(e)
        self.scopes.append({s.var: s.loc})
        self.stmts(s.body)
        self.scopes.pop()

    def stmt_if(self, s: ast.If) -> None:
        # Whether a nested `if` is compile-time can depend on the consts: both branches are read,
        # and what either declares stays visible after it (lenient, never a false error).
        self.expr(s.cond)
        for body in (s.then, s.orelse or []):
            self.scopes[-1].update(self.nested(body))

    def stmt_staticassert(self, s: ast.StaticAssert) -> None:
        # its names only: whether it holds depends on the consts, and this branch is not compiled
        self.expr(s.cond)

    def type(self, t: ast.TypeExpr) -> None:
        if t.kind not in self.words.type_kinds:
            raise self.error(t.loc, f"unknown type '{t.kind}'", self.close(t.kind, self.words.type_kinds))
        if t.args and isinstance(t.args[0], ast.Name):
            dtype = t.args[0].id
            if dtype not in self.words.dtypes:
                raise self.error(t.args[0].loc, f"unknown dtype '{dtype}'", self.close(dtype, self.words.dtypes))
        for e in [*t.args[1:], *(t.dims or [])]:
            self.expr(e)

    # --- expressions ---------------------------------------------------------------------------

    def close(self, name: str, among: Collection[str] | None = None) -> str | None:
        pool = among if among is not None else [*self.visible, *(n for s in self.scopes for n in s)]
        found = close_matches(name, list(pool), n=1)
        return found[0] if found else None

    def expr(self, e: ast.Expr) -> None:
        if isinstance(e, ast.Name):
            if e.id == "block" and not self.known("block"):
                raise self.error(e.loc, "'block' needs .x, .y or .z")
            if not self.known(e.id) and e.id not in self.words.implicit:
                raise self.error(e.loc, f"unknown name '{e.id}'", self.close(e.id))
        elif isinstance(e, ast.Attr):
            if isinstance(e.base, ast.Name) and e.base.id == "block" and not self.known("block"):
                if e.name not in self.words.block_dims:
                    raise self.error(e.loc, f"unknown block index 'block.{e.name}'")
                return
            if e.name != "T":
                raise self.error(e.loc, f"unknown attribute '.{e.name}'")
            self.expr(e.base)
        elif isinstance(e, ast.Index):
            for x in (e.base, *e.indices):
                self.expr(x)
        elif isinstance(e, ast.Call):
            self.call(e)
        elif isinstance(e, ast.BinOp):  # a chain, in a loop (ast.left_spine)
            bottom, chain = ast.left_spine(e)
            self.expr(bottom)
            for link in chain:
                self.expr(link.rhs)
        elif isinstance(e, ast.Compare):
            self.expr(e.lhs)
            self.expr(e.rhs)
        elif isinstance(e, ast.Neg):
            self.expr(e.operand)

    def call(self, e: ast.Call) -> None:
        arity = self.words.functions.get(e.func)
        if arity is None:
            raise self.error(e.loc, f"unknown function '{e.func}'", self.close(e.func, self.words.functions))
        least, most = arity
        if not least <= len(e.args) <= most:
            takes = f"{least} or {most} arguments" if least != most else \
                f"{least} argument{'s' * (least > 1)}"
            raise self.error(e.loc, f"'{e.func}' takes {takes}, got {len(e.args)}")
        for x in e.args:
            self.expr(x)
