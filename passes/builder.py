"""OpBuilder: how passes add ops to a block: appended, or inserted before an anchor op.

`op` adds an op with one result (i32 unless given), `void` one without results, `const` and `expr`
scalar constants and size expressions. Shared by pipeline (barriers, stage/phase arithmetic, the
roles' waits and copies), persistent (tile coordinates, the grid's size expressions) and stream-k
(its schedule).
"""

from __future__ import annotations

import ast

from tkir.diagnostics import CompileError
from tkir.ir import Block, Operation, Value
from tkir.types import I32, Type


class OpBuilder:
    def __init__(self, blk: Block, anchor: Operation | None = None):
        self.blk, self.anchor = blk, anchor

    def add(self, op: Operation) -> Operation:
        if self.anchor is None:
            self.blk.append(op)
        else:
            self.blk.insert_before(self.anchor, op)
        return op

    def op(self, name: str, operands: list[Value], rname: str | None = None, attrs: dict | None = None,
           rtype: Type = I32) -> Value:
        """Add one op with one result (`rtype`, i32 unless given) and return the result."""
        return self.add(Operation(name, operands, [rtype], attrs or {}, result_names=[rname])).result

    def void(self, name: str, operands: list[Value], attrs: dict | None = None) -> Operation:
        """Add one op without results (barrier waits, copies, terminators) and return it."""
        return self.add(Operation(name, operands, [], attrs or {}))

    def const(self, v: int, name: str | None = None) -> Value:
        return self.op("arith.const", [], name, {"value": v})

    def expr(self, text: str, sizes: dict[str, Value]) -> Value:
        """Arithmetic ops computing a size expression (tkir.symexpr syntax)."""
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as e:  # a grid or dims attribute of hand-written IR
            raise CompileError(None, f"bad size expression '{text}': {e.msg}") from None
        return self._node(tree.body, sizes)

    def _node(self, n: ast.AST, sizes: dict[str, Value]) -> Value:
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return self.const(n.value)
        if isinstance(n, ast.Name):
            if n.id not in sizes:
                sizes[n.id] = self.op("tk.size", [], n.id, {"name": n.id})
            return sizes[n.id]
        ops = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "div", ast.Mod: "rem"}
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            return self.op(f"arith.{ops[type(n.op)]}", [self._node(n.left, sizes), self._node(n.right, sizes)])
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("cdiv", "min", "max")
                and len(n.args) == 2 and not n.keywords):
            a, b = (self._node(x, sizes) for x in n.args)
            return self.op(f"arith.{n.func.id}", [a, b])
        raise CompileError(None, f"cannot compute size expression {ast.unparse(n)}")
