"""Element values in f32: the conversions between a tile's dtype and f32, and one f32 operation.

The register rules compute every element in f32 and round once to the result's dtype (as the
interpreter does); the exchanges through shared memory move f32 partials. Both use these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tkir.backend.values import LLVM_TYPE

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext


def combine(cx: LoweringContext, op: str, a: str, b: str, contract: bool = False) -> str:
    """One f32 element-wise operation; `contract`: LLVM may fuse it with a neighbouring contractable
    multiply or add (fold-scale's `contract = true`: x * c - m becomes one fma.rn.f32)."""
    w = cx.w
    if op == "max":
        return w.call("float", "llvm.maxnum.f32", [("float", a), ("float", b)], hint="mx")
    if op == "min":
        return w.call("float", "llvm.minnum.f32", [("float", a), ("float", b)], hint="mn")
    llvm_op = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv"}[op]
    flags = "contract " if contract else ""
    return w.op(f"{llvm_op} {flags}float {a}, {b}", op)


def to_f32(cx: LoweringContext, v: str, dtype: str) -> str:
    if dtype == "f32":
        return v
    if dtype == "bf16":
        w = cx.w
        bits = w.op(f"zext i16 {w.op(f'bitcast bfloat {v} to i16', 'bb')} to i32", "bz")
        return w.op(f"bitcast i32 {w.op(f'shl i32 {bits}, 16', 'bs')} to float", "up")
    return cx.w.op(f"fpext {LLVM_TYPE[dtype]} {v} to float", "up")


def from_f32(cx: LoweringContext, v: str, dtype: str) -> str:
    if dtype == "f32":
        return v
    return cx.w.op(f"fptrunc float {v} to {LLVM_TYPE[dtype]}", "dn")
