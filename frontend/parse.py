"""Parse .tk source (frontend/grammar.lark) into the syntax tree of frontend/ast.py.

Lark's errors become `CompileError`s in the house style: `file:line:col: error: expected ':'
or '=', found 'x'`, naming tokens by their spelling rather than Lark's terminal names.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import lark
from lark.lexer import PatternStr

from tkir.diagnostics import CompileError
from tkir.frontend import ast
from tkir.ir import Loc
from tkir.lark_tables import lalr_parser
from tkir.source_text import MAX_NESTING

GRAMMAR = Path(__file__).with_name("grammar.lark")

# How regex terminals are named in messages (string terminals print as their spelling).
_TERMINAL_WORDS = {
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "ANNOT": "an annotation",
    "PASSES_ANN": "an annotation",
    "STRING": "a string",
    "$END": "end of file",
}
# A `// ...` comment inside @passes(...) (one line each; it ends the token at a ')' it holds).
_COMMENT = re.compile(r"//[^\n]*")
# Beyond this many alternatives a list of expected tokens stops helping.
_MAX_EXPECTED_SHOWN = 6


@cache
def _parser() -> lark.Lark:
    return lalr_parser(GRAMMAR)


def parse_source(text: str, filename: str = "<string>") -> ast.Kernel:
    """Parse one kernel; raises CompileError on a syntax error."""
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        raise _syntax_error(e, text, filename) from None
    return _Builder(filename, text).kernel(tree)


# --- friendly syntax errors -------------------------------------------------------------------


def _describe_terminal(name: str) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    try:
        pattern = _parser().get_terminal(name).pattern
    except KeyError:
        return name.lower()
    if isinstance(pattern, PatternStr):
        return f"'{pattern.value}'"
    return name.lower()


def _expected_text(expected: set[str]) -> str:
    words = sorted({_describe_terminal(t) for t in expected})
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _syntax_error(e: lark.exceptions.UnexpectedInput, text: str, filename: str) -> CompileError:
    line, col = max(e.line, 1), max(e.column, 1)
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        hint = "a string ends with '\"' on the line it starts" if e.char == '"' else None
        return CompileError(Loc(filename, line, col), f"unexpected character '{e.char}'", text, hint=hint)
    if isinstance(e, lark.exceptions.UnexpectedToken):
        tok = e.token
        found = "end of file" if tok.type == "$END" else f"'{tok}'"
        if tok.type == "$END":
            line, col = _end_position(text)
        expected = set(e.expected)
        if len(expected) <= _MAX_EXPECTED_SHOWN:
            msg = f"expected {_expected_text(expected)}, found {found}"
        elif "RBRACE" in expected:
            msg = f"expected a statement or '}}', found {found}"
        else:
            msg = f"unexpected {found}"
        hint = None
        if tok.type == "ANNOT":
            hint = "write the matrix product with a space after '@' (`a @ b`); `@name` is an annotation"
        return CompileError(Loc(filename, line, col), msg, text, hint=hint)
    line, col = _end_position(text)
    return CompileError(Loc(filename, line, col), "unexpected end of file", text)


def _end_position(text: str) -> tuple[int, int]:
    lines = text.rstrip("\n").split("\n")
    return len(lines), len(lines[-1]) + 1


# --- parse tree -> AST ------------------------------------------------------------------------


class _Builder:
    def __init__(self, filename: str, source: str = ""):
        self.filename = filename
        self.source = source

    def loc(self, node: lark.Tree | lark.Token) -> Loc:
        if isinstance(node, lark.Token):
            return Loc(self.filename, node.line, node.column)
        return Loc(self.filename, node.meta.line, node.meta.column)

    def kernel(self, t: lark.Tree) -> ast.Kernel:
        *anns, name, consts, params, grid, body = t.children
        grid_exprs = self.exprs(grid)
        grid_loc = grid_exprs[0].loc if grid_exprs else self.loc(name)
        return ast.Kernel(
            loc=self.loc(name),
            name=str(name),
            annotations=[self.annotation(a) for a in anns],
            consts=[self.const_param(c) for c in consts.children] if consts else [],
            params=[self.param(p) for p in params.children] if params else [],
            grid=grid_exprs,
            grid_loc=grid_loc,
            body=self.body(body),
        )

    def const_param(self, t: lark.Tree) -> ast.ConstParam:
        name, num = t.children
        if isinstance(num, lark.Token) and num.type == "AUTO":
            return ast.ConstParam(self.loc(name), str(name), ast.AUTO)
        minus, tok = num.children
        value: int | float = int(tok) if tok.type == "INT" else float(tok)
        return ast.ConstParam(self.loc(name), str(name), -value if minus else value)

    def param(self, t: lark.Tree) -> ast.Param:
        name, ty = t.children
        return ast.Param(self.loc(name), str(name), self.type(ty))

    def type(self, t: lark.Tree) -> ast.TypeExpr:
        kind, args, dims = t.children
        return ast.TypeExpr(
            loc=self.loc(kind),
            kind=str(kind),
            args=[self.expr(a) for a in args.children] if args else [],
            dims=[self.expr(d) for d in dims.children] if dims else None,
        )

    def annotation(self, t: lark.Tree) -> ast.Annotation:
        if len(t.children) == 1:  # @passes(...): the text between the parentheses, kept as written
            return self.passes_annotation(t.children[0])
        tok, args = t.children
        ann = ast.Annotation(self.loc(tok), str(tok)[1:])
        for a in args.children if args else []:
            key, value = a.children
            value = self.ann_value(value)
            if key is None:
                ann.args.append(value)
            else:
                ann.kwargs.append((str(key), value))
        return ann

    def passes_annotation(self, tok: lark.Token) -> ast.Annotation:
        raw = str(tok)
        head = raw.index("(") + 1  # `@passes (` may hold blanks, never a newline
        text = _COMMENT.sub(lambda m: " " * len(m.group()), raw[head:-1])  # columns stay where they were
        return ast.Annotation(self.loc(tok), "passes", text=text,
                              text_loc=Loc(self.filename, tok.line, tok.column + head))

    def ann_value(self, t: lark.Tree | lark.Token) -> ast.Expr:
        if isinstance(t, lark.Tree) and t.data == "ann_list":
            (items,) = t.children
            return ast.ListLit(self.loc(t), [self.expr(c) for c in items.children] if items else [])
        return self.expr(t)

    def body(self, t: lark.Tree) -> list[ast.Stmt]:
        return [self.stmt(s) for s in t.children]

    def stmt(self, t: lark.Tree) -> ast.Stmt:
        *anns, s = t.children
        annotations = [self.annotation(a) for a in anns]
        return self.simple(s, annotations)

    def simple(self, s: lark.Tree, annotations: list[ast.Annotation]) -> ast.Stmt:
        loc = self.loc(s)
        kind = s.data
        c = s.children
        if kind == "shared_decl":
            return ast.SharedDecl(self.loc(c[0]), annotations, str(c[0]), self.type(c[1]))
        if kind == "reg_decl":
            init = self.expr(c[2]) if c[2] is not None else None
            return ast.RegDecl(self.loc(c[0]), annotations, str(c[0]), self.type(c[1]), init)
        if kind == "let_stmt":
            return ast.Let(self.loc(c[0]), annotations, str(c[0]), self.expr(c[1]))
        if kind == "assign":
            target, op, value = c
            return ast.Assign(self.loc(op), annotations, self.expr(target), str(op.children[0]),
                              self.expr(value))
        if kind == "for_stmt":
            var, lo, hi, step, body = c
            step_expr = self.expr(step.children[0]) if step is not None else None
            return ast.For(loc, annotations, str(var), self.expr(lo), self.expr(hi), self.body(body), step_expr)
        if kind == "if_stmt":
            cond, then, clause = c
            orelse = clause.children[0] if clause is not None else None
            if orelse is None:
                other = None
            elif orelse.data == "body":
                other = self.body(orelse)
            else:
                other = [self.simple(orelse, [])]
            return ast.If(loc, annotations, self.expr(cond), self.body(then), other)
        if kind == "static_assert":
            cond, message = c
            if message is None:
                raise CompileError(loc, "static_assert needs a message", self.source,
                                   hint='write static_assert(COND, "what must hold"): the message is what a '
                                        "compile with bad consts prints")
            return ast.StaticAssert(loc, annotations, self.expr(cond), str(message)[1:-1])
        raise AssertionError(f"unhandled statement {kind}")  # the grammar has no other kinds

    def exprs(self, t: lark.Tree | None, depth: int = 0) -> list[ast.Expr]:
        return [self.expr(x, depth) for x in t.children] if t is not None else []

    def expr(self, t: lark.Tree | lark.Token, depth: int = 0) -> ast.Expr:
        """The expression's syntax tree. A chain of binary operators is built in a loop and counts as one
        level, however long; other nesting (operands of a comparison, negation, a call, an index or
        `.T`, and a parenthesized right operand) is refused past MAX_NESTING levels, at the node that
        passes it, so that no walker of the tree recurses deeper than that."""
        if depth > MAX_NESTING:
            raise CompileError(self.loc(t), f"expression nested too deeply: more than {MAX_NESTING} levels of "
                                            "calls, indices, '.T', negations and parentheses", self.source,
                               hint="name the parts with `let`")
        loc = self.loc(t)
        kind = t.data
        c = t.children
        if kind == "name":
            return ast.Name(loc, str(c[0]))
        if kind == "int":
            return ast.Num(loc, int(c[0]))
        if kind == "float":
            return ast.Num(loc, float(c[0]))
        if kind == "binop":
            chain: list[lark.Tree] = []
            while isinstance(t, lark.Tree) and t.data == "binop":
                chain.append(t)
                t = t.children[0]
            e = self.expr(t, depth + 1)
            for link in reversed(chain):
                _, op, rhs = link.children
                e = ast.BinOp(self.loc(op), str(op.children[0]), e, self.expr(rhs, depth + 1))
            return e
        if kind == "compare":
            lhs, op, rhs = c
            return ast.Compare(self.loc(op), str(op.children[0]), self.expr(lhs, depth + 1),
                               self.expr(rhs, depth + 1))
        if kind == "neg":
            return ast.Neg(loc, self.expr(c[1], depth + 1))
        if kind == "bnot":  # `~x` is `x ^ (all ones)`, as Python's ~ on integers (operands.py: the u32 word)
            return ast.BinOp(loc, "~", self.expr(c[0], depth + 1), ast.Num(loc, -1))
        if kind == "attr":
            base, name = c
            return ast.Attr(self.loc(name), self.expr(base, depth + 1), str(name))
        if kind == "index":
            base, idx = c
            return ast.Index(loc, self.expr(base, depth + 1), self.exprs(idx, depth + 1))
        if kind == "call":
            name, args = c
            return ast.Call(loc, str(name), self.exprs(args, depth + 1))
        raise AssertionError(f"unhandled expression {kind}")  # the grammar has no other kinds
