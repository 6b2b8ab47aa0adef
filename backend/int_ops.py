"""32-bit integer operations in LLVM IR text, shared by the integer tiles (backend/rules_registers.py, tk.*) and the
run-time scalars' bit operators (backend/rules_core.py, arith.and/or/xor/shl/shr): an i32 and a u32 are the same 32
bits; the u32 forms divide, take min/max and shift right unsigned."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tkir.ops import SHIFT_BITS

if TYPE_CHECKING:
    from tkir.backend.llvm_text import LLVMWriter

# op -> LLVM instruction on i32 and on u32 registers. div/rem truncate toward zero; by zero (or -2**31 sdiv -1)
# LLVM leaves the result undefined, as docs/language.md says of integer tiles.
INT_BINARY = {"add": ("add", "add"), "sub": ("sub", "sub"), "mul": ("mul", "mul"), "div": ("sdiv", "udiv"),
              "rem": ("srem", "urem"), "and": ("and", "and"), "or": ("or", "or"), "xor": ("xor", "xor")}
# shl and shr read the count unsigned and give 0 from a count of 32 on (shr of an i32: the sign in every bit), as
# PTX's shl.b32 / shr.s32 / shr.u32 clamp it; LLVM's shl/lshr/ashr are poison there, so the count is clamped first
# (tkir.ops.SHIFT_BITS)


def int_op(w: LLVMWriter, name: str, a: str, b: str, dtype: str) -> str:
    """`a name b` on 32-bit integers of `dtype` (i32 or u32), written with `w`; the result's LLVM value."""
    unsigned = dtype == "u32"
    if name in ("min", "max"):
        return w.call("i32", f"llvm.{'u' if unsigned else 's'}{name}.i32", [("i32", a), ("i32", b)], hint=name)
    if name in ("shl", "shr"):
        n = w.call("i32", "llvm.umin.i32", [("i32", b), ("i32", str(SHIFT_BITS - 1))], hint="shn")
        if name == "shr" and not unsigned:  # arithmetic: a count past 31 fills with the sign, as 31 does
            return w.op(f"ashr i32 {a}, {n}", "shr")
        shifted = w.op(f"{'shl' if name == 'shl' else 'lshr'} i32 {a}, {n}", name)
        past = w.op(f"icmp ugt i32 {b}, {SHIFT_BITS - 1}", "shpast")
        return w.op(f"select i1 {past}, i32 0, i32 {shifted}", name)
    return w.op(f"{INT_BINARY[name][unsigned]} i32 {a}, {b}", name)
