"""Parse the textual tile IR (tkir/ir_grammar.lark) back into tkir.ir structures.

Errors are `IRParseError`s carrying `file:line:col` of the offending token.
"""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path

import lark

from tkir.diagnostics import CompileError
from tkir.ir import Block, Loc, Module, Operation, Region, Value
from tkir.lark_tables import lalr_parser
from tkir.layout import SWIZZLE_MASK
from tkir.source_text import check_nesting
from tkir.target import REGISTER_FILE_BYTES, SMEM_PER_BLOCK
from tkir.types import (
    DTYPE_BYTES,
    GlobalType,
    Ident,
    ScalarType,
    Symbol,
    TileType,
    Type,
    VectorType,
    format_attr_value,
)

GRAMMAR = Path(__file__).with_name("ir_grammar.lark")
# Shared types are refused here only when absurd (plan-occupancy and the backend report real overflows,
# naming stages and totals): 2**31 mbarriers in one sv<i64, N> took the backend hours.
SHARED_OVERSIZE = 16
SHARED_TYPE_BYTES = SHARED_OVERSIZE * SMEM_PER_BLOCK
COUNT_TYPE_ATTRS = {"align": 1, "stages": 1, "pad": 0}  # integer type attributes -> least value (align: 2**k)


_RESULT_NAME = re.compile(r"%([A-Za-z0-9_.]+)")  # the names in an op's RESULTS token

class IRParseError(CompileError):
    pass


@cache
def ir_parser() -> lark.Lark:
    """The IR grammar's LALR parser, built once per process (the fuzzer builds it before forking)."""
    return lalr_parser(GRAMMAR)


def parse_module(text: str, filename: str = "<ir>") -> Module:
    check_nesting(text, filename)
    try:
        tree = ir_parser().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        raise IRParseError(Loc(filename, e.line, e.column), _describe(e), text) from None
    b = _Builder(filename, text)
    ops = [b.op(t, {}) for t in tree.children]
    return Module(ops=ops, source=filename)


def _describe(e: lark.exceptions.UnexpectedInput) -> str:
    if isinstance(e, lark.exceptions.UnexpectedToken):
        return f"unexpected '{e.token}' in IR text"
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        return f"unexpected character '{e.char}' in IR text"
    return "unexpected end of IR text"


class _Builder:
    def __init__(self, filename: str, text: str):
        self.filename = filename
        self.text = text

    def loc(self, node: lark.Tree | lark.Token) -> Loc:
        if isinstance(node, lark.Token):
            return Loc(self.filename, node.line, node.column)
        return Loc(self.filename, node.meta.line, node.meta.column)

    def error(self, node: lark.Tree | lark.Token, msg: str) -> IRParseError:
        return IRParseError(self.loc(node), msg, self.text)

    def op(self, t: lark.Tree, scope: dict[str, Value]) -> Operation:
        results, name, sym, operands, attrs, types, *regions = t.children
        opnds = []
        for tok in operands.children if operands else []:
            key = tok[1:]
            if key not in scope:
                raise self.error(tok, f"use of undefined value '{tok}'")
            opnds.append(scope[key])
        rtypes = [self.type(x) for x in types.children] if types else []
        rnames = _RESULT_NAME.findall(str(results)) if results else []
        if len(rnames) != len(rtypes):
            raise self.error(t, f"'{name}' names {len(rnames)} results but gives {len(rtypes)} types")
        op = Operation(
            str(name),
            opnds,
            rtypes,
            self.attrdict(attrs) if attrs else {},
            symbol=str(sym)[1:] if sym else None,
            result_names=rnames,
            loc=self.loc(name),
        )
        inner = dict(scope)
        for r in regions:
            op.regions.append(self.region(r, inner))
            op.regions[-1].parent = op
        for rname, v in zip(rnames, op.results, strict=True):
            if rname in scope:
                raise self.error(results, f"redefinition of value '%{rname}'")
            scope[rname] = v
        return op

    def region(self, t: lark.Tree, scope: dict[str, Value]) -> Region:
        args, *ops = t.children
        blk = Block()
        if args is not None:
            for a in args.children:
                if a is None:
                    continue
                tok, ty = a.children
                if tok[1:] in scope:
                    raise self.error(tok, f"redefinition of value '{tok}'")
                scope[tok[1:]] = blk.add_arg(Value(self.type(ty), tok[1:]))
        for o in ops:
            blk.append(self.op(o, scope))
        return Region(blk)

    def attrdict(self, t: lark.Tree) -> dict[str, object]:
        out: dict[str, object] = {}
        for a in t.children:  # attrdict or opattrs
            if a is None:
                continue
            key, val = a.children
            if str(key) in out:
                raise self.error(key, f"duplicate attribute '{key}'")
            out[str(key)] = self.value(val)
        return out

    def value(self, t: lark.Tree | lark.Token) -> object:
        kind = t.data if isinstance(t, lark.Tree) else None
        if kind == "int":
            return int(t.children[0])
        if kind == "float":
            return float(t.children[0])
        if kind == "true":
            return True
        if kind == "false":
            return False
        if kind == "string":
            s = str(t.children[0])[1:-1]
            return s.replace('\\"', '"').replace("\\\\", "\\")
        if kind == "symref":
            return Symbol(str(t.children[0])[1:])
        if kind == "ident":
            return Ident(str(t.children[0]))
        if kind == "list":
            return [self.value(x) for x in t.children if x is not None]
        if kind == "attrdict":
            return self.attrdict(t)
        return self.type(t)

    def type(self, t: lark.Tree) -> Type:
        kind = t.data
        if kind == "scalar_type":
            return ScalarType(str(t.children[0]))
        if kind == "gl_type":
            dtype, *dims = t.children
            return GlobalType(str(dtype), tuple(self.value(d) if d.data in ("int", "string") else str(d.children[0])
                                                for d in dims))
        if kind == "tile_type":
            space, dtype, rows, cols, *attrs = t.children
            return self.sized(t, TileType(str(space), str(dtype), int(rows), int(cols), self.typeattrs(attrs)))
        if kind == "vec_type":
            space, dtype, n, *attrs = t.children
            return self.sized(t, VectorType(str(space), str(dtype), int(n), self.typeattrs(attrs)))
        raise self.error(t, f"not a type: {kind}")

    def sized(self, node: lark.Tree, t: TileType | VectorType) -> TileType | VectorType:
        """Refuse a tile or vector larger than its memory space (shared memory per block, an SM's
        registers): passes and the backend walk their elements, and 2**31 of them never finish."""
        if t.dtype not in DTYPE_BYTES:
            raise self.error(node, f"unknown dtype '{t.dtype}' in {t.space}<...> (dtypes: {', '.join(DTYPE_BYTES)})")
        swizzle = t.get("swizzle")
        if swizzle is not None and swizzle not in SWIZZLE_MASK:
            raise self.error(node, f"{t}: swizzle={swizzle} is not a swizzle span "
                                   f"({', '.join(map(str, SWIZZLE_MASK))} bytes)")
        for key, least in COUNT_TYPE_ATTRS.items():
            v = t.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < least
                                  or (key == "align" and v & (v - 1))):
                raise self.error(node, f"{t}: {key}={format_attr_value(v)} is not "
                                       + ("a power of two" if key == "align" else f"an integer >= {least}"))
        shape = (t.rows, t.cols) if isinstance(t, TileType) else (t.n,)
        stages = t.get("stages")
        nbytes = math.prod(shape) * DTYPE_BYTES[t.dtype] * (stages if isinstance(stages, int) else 1)
        shared = t.space in ("st", "sv")
        limit = SHARED_TYPE_BYTES if shared else REGISTER_FILE_BYTES
        if min(shape) < 1 or nbytes > limit:
            where = f"{SHARED_OVERSIZE} times a block's shared memory" if shared else "an SM's register file"
            raise self.error(node, f"{t} holds {nbytes} bytes: a type must be non-empty and within {where} "
                                   f"({limit} bytes)")
        return t

    def typeattrs(self, attrs: list[lark.Tree]) -> tuple[tuple[str, object], ...]:
        return tuple((str(a.children[0]), self.value(a.children[1])) for a in attrs)
