"""Expressions: each is type-checked as it is lowered, and compile-time ones fold in Python.

`ExpressionLowering.expr` first tries `const_eval` (consts, literals, `let`s of them and the
builtins that fold); what is left is lowered by the node's entry of EXPRESSIONS: names (sizes and
block ids become prologue ops), `.T`, global tile accesses `A[i, j]` (kept pending until an
assignment loads or stores them), comparisons, negation, the binary operators and `@`, and calls
(frontend/calls.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tkir import scalar
from tkir.frontend import ast
from tkir.frontend.calls import check_call, folds
from tkir.frontend.names import close_matches
from tkir.frontend.operands import PREDICATE_DTYPE, OperandLowering, bit_fold_error, fold
from tkir.frontend.scope import Lowered, Symbol
from tkir.ir import Loc, Value
from tkir.types import FLOAT_DTYPES, I32, GlobalType, Ident, ScalarType, TileType, VectorType, is_register, is_shared

BLOCK_DIMS = {"x": 0, "y": 1, "z": 2}
BLOCK_ID_NAMES = ("bx", "by", "bz")
CMP_PREDS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
MMA_OPERAND_DTYPES = ("bf16", "f16")  # what both targets' tensor-core rules lower
INT_TILE_DTYPES = ("i32", "u32")  # the dtypes of a gather's row indices
FP8_MMA_DTYPES = ("e4m3", "e5m2")  # sm_90a's wgmma k32 forms (legalize-mma refuses them on sm_80)
FP8_MMA_K = 32  # K of one 8-bit wgmma (PTX ISA, wgmma.mma_async: .m64nNk32 for .e4m3/.e5m2)


class ExpressionLowering(OperandLowering):
    """Compile-time evaluation and the lowering of every kind of expression."""

    def const_eval(self, e: ast.Expr) -> int | float | None:
        """The value of a compile-time expression, or None if any part is known only at run time."""
        if isinstance(e, ast.Num):
            return e.value
        if isinstance(e, ast.Name):
            if e.id == "inf" and self.lookup("inf") is None:
                return math.inf
            sym = self.lookup(e.id)
            return sym.const if sym is not None and sym.kind == "const" else None
        if isinstance(e, ast.Neg):
            c = self.const_eval(e.operand)
            return None if c is None else -c
        if isinstance(e, ast.BinOp):  # up the chain in a loop (every operand is evaluated, as written)
            bottom, chain = ast.left_spine(e)
            value = self.const_eval(bottom)
            for link in chain:
                value = self.fold_link(link, value, self.const_eval(link.rhs))
            return value
        if isinstance(e, ast.Compare):
            a, b = self.const_eval(e.lhs), self.const_eval(e.rhs)
            if a is None or b is None:
                return None
            return int(scalar.COMPARE[CMP_PREDS[e.op]](a, b))
        if isinstance(e, ast.Call) and (builtin := folds(e)) is not None:
            values = [self.const_eval(x) for x in e.args]
            if any(v is None for v in values):
                return None
            return builtin.fold(self, e.func, values, e.loc)
        return None

    def fold_link(self, link: ast.BinOp, a: int | float | None, b: int | float | None) -> int | float | None:
        """`a op b` of one link of a chain, folded: None if either side is known only at run time."""
        if a is None or b is None or link.op == "@":
            return None
        why = bit_fold_error(link.op, a, b)
        if why is not None:
            raise self.error(link.loc, why)
        r = fold(link.op, a, b)
        if r is None:
            raise self.error(link.loc, "division by zero in a compile-time expression")
        return r

    def expr(self, e: ast.Expr) -> Lowered:
        c = self.const_eval(e)
        if c is not None:
            return Lowered(e.loc, const=c, name=e.id if isinstance(e, ast.Name) else None)
        return EXPRESSIONS[type(e)](self, e)

    def expr_num(self, e: ast.Num) -> Lowered:  # pragma: no cover - Num is always folded by const_eval
        return Lowered(e.loc, const=e.value)

    def expr_name(self, e: ast.Name) -> Lowered:
        sym = self.lookup(e.id)
        if sym is None:
            if e.id == "block":
                raise self.error(e.loc, "'block' needs .x, .y or .z")
            close = close_matches(e.id, [n for s in self.scopes for n in s], n=1)
            untaken = self.untaken_names().get(e.id)
            if untaken is not None:
                raise self.error(e.loc, f"unknown name '{e.id}'", hint=f"'{e.id}' is declared at line "
                                 f"{untaken.line}, in a compile-time branch these consts do not take")
            raise self.error(e.loc, f"unknown name '{e.id}'",
                             hint=f"did you mean '{close[0]}'?" if close else None)
        if sym.kind == "size":
            return Lowered(e.loc, value=self.size_value(sym.name, e.loc))
        if sym.kind == "reg":
            v = self.read_reg(sym, e.loc)
            return Lowered(e.loc, value=v, axis=sym.axis or self.axis_of.get(id(v)))
        return Lowered(e.loc, value=sym.value, axis=self.axis_of.get(id(sym.value)))

    def read_reg(self, sym: Symbol, loc: Loc) -> Value:
        if sym.current is None:
            raise self.error(loc, f"register variable '{sym.name}' is used before it is initialized",
                             hint=f"give it a value first, e.g. `reg {sym.name}: {sym.type} = 0`")
        return sym.current

    def expr_attr(self, e: ast.Attr) -> Lowered:
        if isinstance(e.base, ast.Name) and e.base.id == "block" and self.lookup("block") is None:
            if e.name not in BLOCK_DIMS:
                raise self.error(e.loc, f"unknown block index 'block.{e.name}'", hint="use block.x, .y or .z")
            dim = BLOCK_DIMS[e.name]
            v = self.emit_prologue(("block", dim), "tk.block_id", I32, e.loc, {"dim": dim},
                                   BLOCK_ID_NAMES[dim])
            return Lowered(e.loc, value=v)
        base = self.expr(e.base)
        if e.name != "T":
            raise self.error(e.loc, f"unknown attribute '.{e.name}'", hint="tiles have .T (transpose)")
        if base.is_const or base.gref is not None or not isinstance(base.value.type, TileType):
            raise self.error(e.loc, f"'.T' transposes tiles, not {self.type_text(base)}")
        return Lowered(e.loc, value=base.value, trans=not base.trans)

    def expr_index(self, e: ast.Index) -> Lowered:
        base = self.use(self.expr(e.base))
        if base.is_const or not isinstance(base.value.type, GlobalType):
            raise self.error(e.loc, f"only global tensors can be indexed, not {self.type_text(base)}")
        g = base.value.type
        if len(e.indices) != g.rank:
            raise self.error(e.loc, f"wrong number of coordinates: '{base.value.name}' is {g} "
                             f"({g.rank} dims), got {len(e.indices)}",
                             hint="give one coordinate per dim; the last two (a tile) or last one (a "
                                  "vector) count in tiles")
        exprs: list[Lowered] = []
        coords: list[Value] = []
        for k, i in enumerate(e.indices):  # one at a time: the order of the prologue's constants stays the source's
            exprs.append(self.expr(i))
            gather = self.gather_coordinate(exprs[-1], k, g, base.value.name)
            coords.append(gather if gather is not None else self.tile_coordinate(exprs[-1]))
        return Lowered(e.loc, gref=(base.value, coords), coords=exprs)

    def gather_coordinate(self, e: Lowered, k: int, g: GlobalType, name: str) -> Value | None:
        """A register vector of integers as coordinate k of `name` (a gather: one row index per row of the
        tile, `A[idx, c]`), or None for any other coordinate. It must stand in the row position (dim rank-2)."""
        if e.is_const or e.gref is not None or not is_register(e.value.type):
            return None
        t = e.value.type
        if not isinstance(t, VectorType) or t.dtype not in INT_TILE_DTYPES:
            raise self.error(e.loc, f"a coordinate is an integer scalar, or (a gather) a register vector of row "
                                    f"indices; got {t.bare()}",
                             hint="an rv<i32, R> picks R rows: x = A[idx, c]" if isinstance(t, VectorType) else None)
        if g.rank < 2 or k != g.rank - 2:
            raise self.error(e.loc, f"a vector of row indices ({t.bare()}) goes in the row coordinate of '{name}' "
                                    f"(dim {max(g.rank - 2, 0)} of {g}), not dim {k}",
                             hint="a gather picks whole rows of a tile: x = A[idx, c] (c counts column tiles)")
        return e.value

    def tile_coordinate(self, e: Lowered) -> Value:
        """One coordinate of a global access; a compile-time one must not be negative (the
        interpreter dropped such a store, the GPU would write before the tensor)."""
        if e.is_const and isinstance(e.const, int) and e.const < 0:
            raise self.error(e.loc, f"coordinate {e.const} is negative", hint="coordinates count from 0")
        return self.index_value(e, "a coordinate")

    def expr_compare(self, e: ast.Compare) -> Lowered:
        """`a < b` with a register tile/vector on one side -> tk.cmp (an i1 tile)."""
        a, b = self.use(self.expr(e.lhs)), self.use(self.expr(e.rhs))
        ka, kb = self.shaped_kind(a, e.op), self.shaped_kind(b, e.op)
        if ka == kb == "scalar":
            raise self.error(e.loc, "run-time scalar comparisons are not supported yet",
                             hint="compare compile-time constants, or tiles elementwise (`s < x`)")
        operands, attrs, ref, _ = self.elementwise(e.op, a, b, ka, kb, e.loc)
        if ref.dtype == PREDICATE_DTYPE:
            raise self.error(e.loc, f"'{e.op}' compares values, not predicates ({ref})",
                             hint="combine conditions with where(c, ...)")
        v = self.emit("tk.cmp", operands, [ref.bare().with_dtype(PREDICATE_DTYPE)], e.loc,
                      {"pred": Ident(CMP_PREDS[e.op]), **attrs}).result
        return Lowered(e.loc, value=v)

    def expr_neg(self, e: ast.Neg) -> Lowered:
        x = self.use(self.expr(e.operand))
        t = x.value.type
        if isinstance(t, GlobalType) or is_shared(t):
            raise self.error(e.loc, f"cannot negate {t}", hint="load it into a `reg` first")
        if isinstance(t, ScalarType) and t.dtype in ("i32", "u32"):
            zero = self.const_value(0, t.dtype, e.loc)
            return Lowered(e.loc, value=self.emit("arith.sub", [zero, x.value], [t], e.loc).result)
        if t.dtype not in FLOAT_DTYPES:  # i32 tiles: 0 - x (tk.neg is float-only)
            self.check_tile_arith("-", t, e.loc)
            zero = self.const_value(0, t.dtype, e.loc)
            return Lowered(e.loc, value=self.emit("tk.sub", [zero, x.value], [t.bare()], e.loc).result,
                           axis=x.axis)
        return Lowered(e.loc, value=self.emit("tk.neg", [x.value], [t], e.loc).result, axis=x.axis)

    def expr_binop(self, e: ast.BinOp) -> Lowered:
        """A chain `a + b * c - ...`, lowered up from its bottom operand in a loop: each link folds while
        both sides are compile-time, else becomes an op (`@`: tk.mma), left to right as written."""
        bottom, chain = ast.left_spine(e)
        acc = self.expr(bottom)
        value = self.const_eval(bottom)
        for link in chain:
            value = self.fold_link(link, value, self.const_eval(link.rhs))
            if value is not None:
                acc = Lowered(link.loc, const=value)
            elif link.op == "@":
                acc = self.mma(acc, self.expr(link.rhs), link.loc, None)
            else:
                acc = self.arith(link.op, acc, self.expr(link.rhs), link.loc)
        return acc

    def expr_call(self, e: ast.Call) -> Lowered:
        """A builtin function (frontend/calls.py): its arguments lowered in order, then its row's lowering."""
        builtin = check_call(self, e)
        args = [self.expr(x) for x in e.args]
        return builtin.lower(self, e.func, args, e.loc)

    def mma(self, a: Lowered, b: Lowered, loc: Loc, acc: Value | None) -> Lowered:
        """`a @ b` (zero accumulator) or `acc += a @ b` -> tk.mma, transposes as attributes."""
        for x in (a, b):
            if x.gref is not None:
                raise self.error(x.loc, f"'@' needs a loaded tile; '{x.gref[0].name}[...]' is not loaded",
                                 hint="assign it to a `shared` variable first")
            if x.is_const or not isinstance(x.value.type, TileType):
                raise self.error(loc, f"'@' multiplies tiles, got {self.type_text(x)}",
                                 hint="use '*' for elementwise or scalar products")
        ta, tb = a.value.type, b.value.type
        if ta.dtype not in FLOAT_DTYPES:
            raise self.error(loc, f"'@' multiplies float tiles, got {ta}", hint="cast it: bf16(...)")
        if ta.dtype in FP8_MMA_DTYPES or tb.dtype in FP8_MMA_DTYPES:
            self.check_fp8_mma(a, b, loc)
        elif ta.dtype != tb.dtype:
            raise self.error(loc, f"dtype mismatch in '@': {ta} @ {tb}",
                             hint="cast both operands to one dtype")
        elif ta.dtype not in MMA_OPERAND_DTYPES:  # wgmma/mma.sync k16 forms (tf32 and fp8 are not lowered)
            raise self.error(loc, f"'@' multiplies bf16 or f16 tiles (f32 accumulation), got {ta} @ {tb}",
                             hint="cast the operands first: bf16(x)")
        m, ka = (ta.cols, ta.rows) if a.trans else (ta.rows, ta.cols)
        kb, n = (tb.cols, tb.rows) if b.trans else (tb.rows, tb.cols)
        if ka != kb:
            raise self.error(loc, f"shape mismatch in '@': {m}x{ka} @ {kb}x{n} "
                             f"(inner dims {ka} and {kb} differ)")
        ctype = TileType("rt", "f32", m, n)
        if acc is None:
            acc = self.emit("tk.fill", [], [ctype], loc, {"value": 0.0}).result
        elif acc.type.bare() != ctype:
            raise self.error(loc, f"accumulator mismatch: {acc.type} += {m}x{n} product",
                             hint=f"the accumulator of this '@' must be {ctype}")
        attrs: dict[str, object] = {}
        if a.trans:
            attrs["trans_a"] = True
        if b.trans:
            attrs["trans_b"] = True
        return Lowered(loc, value=self.emit("tk.mma", [a.value, b.value, acc], [acc.type], loc, attrs).result)

    def check_fp8_mma(self, a: Lowered, b: Lowered, loc: Loc) -> None:
        """`a @ b.T` of fp8 tiles: both operands e4m3 or e5m2 (either pairing), both K-major. wgmma's 8-bit
        forms (m64nNk32) have no transpose bits (PTX ISA, wgmma.mma_async: imm-trans-a and imm-trans-b exist
        for .f16/.bf16 only), so A is stored M x K and B N x K. A may be a register tile; infer-layouts takes
        it only as a product's result (its accumulator fragment shuffles into the 8-bit A fragment) and
        refuses any other at the `@`."""
        ta, tb = a.value.type, b.value.type
        if ta.dtype not in FP8_MMA_DTYPES or tb.dtype not in FP8_MMA_DTYPES:
            raise self.error(loc, f"dtype mismatch in '@': {ta} @ {tb}: an fp8 '@' takes two fp8 operands",
                             hint="cast the other operand: e4m3(x) or e5m2(x)")
        if a.trans:
            raise self.error(a.loc, f"an fp8 '@' needs A stored M x K (K-major): wgmma has no transposed "
                                    f"8-bit A, and '{a.value.name}.T' would be one",
                             hint="load A as [M, K] (e.g. from a gl<e4m3>[M, K]) and write `a @ b.T`")
        if not b.trans:
            raise self.error(b.loc, f"an fp8 '@' needs B stored N x K (K-major) and written `a @ b.T`: "
                                    f"wgmma has no transposed 8-bit B, and {tb} is K x N here",
                             hint=f"store B as st<{tb.dtype}, N, K> (rows along N, e.g. from a gl<{tb.dtype}>[N, K] "
                                  "as torch._scaled_mm's column-major B) and write `a @ b.T`")
        if ta.cols % FP8_MMA_K:
            raise self.error(loc, f"an fp8 '@' steps K by {FP8_MMA_K} (wgmma m64nNk{FP8_MMA_K}): K = {ta.cols} "
                                  f"in {ta} is not a multiple", hint=f"make K a multiple of {FP8_MMA_K}")


# the lowering of each kind of expression node that const_eval leaves (ast.ListLit is an annotation argument)
EXPRESSIONS: dict[type, Callable[[ExpressionLowering, ast.Expr], Lowered]] = {
    ast.Num: ExpressionLowering.expr_num,
    ast.Name: ExpressionLowering.expr_name,
    ast.Attr: ExpressionLowering.expr_attr,
    ast.Index: ExpressionLowering.expr_index,
    ast.Compare: ExpressionLowering.expr_compare,
    ast.Neg: ExpressionLowering.expr_neg,
    ast.BinOp: ExpressionLowering.expr_binop,
    ast.Call: ExpressionLowering.expr_call,
}
