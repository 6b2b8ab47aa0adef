"""Element values in f32: the conversions between a tile's dtype and f32, and one f32 operation.

The register rules compute every element in f32 and round once to the result's dtype (as the
interpreter does); the exchanges through shared memory move f32 partials. Both use these.

fp8 elements (e4m3, e5m2) are i8 values. On sm_90a they convert in pairs with PTX's fp8 `cvt`s (sm_89+):
`cvt.rn.f16x2.{e4m3x2|e5m2x2}` up (exact: every fp8 value is an f16), `cvt.rn.satfinite.{e4m3x2|e5m2x2}.f32`
down (round to nearest even, saturating to the largest finite value, NaN kept: tkir/scalar.py's rule). sm_80
has neither instruction: there the same conversions are integer arithmetic on the bits (below), exact up,
round to nearest even with saturation down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tkir.backend.llvm_text import f32_literal
from tkir.backend.values import LLVM_TYPE
from tkir.scalar import FP8_DTYPES, FP8_MANTISSA_BITS, FP8_MAX, FP8_MIN_NORMAL_EXP

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
    if dtype in FP8_DTYPES:
        return fp8_pair_to_f32(cx, v, None, dtype)[0]
    if dtype == "bf16":
        w = cx.w
        bits = w.op(f"zext i16 {w.op(f'bitcast bfloat {v} to i16', 'bb')} to i32", "bz")
        return w.op(f"bitcast i32 {w.op(f'shl i32 {bits}, 16', 'bs')} to float", "up")
    return cx.w.op(f"fpext {LLVM_TYPE[dtype]} {v} to float", "up")


def from_f32(cx: LoweringContext, v: str, dtype: str) -> str:
    if dtype == "f32":
        return v
    if dtype in FP8_DTYPES:
        return f32_pair_to_fp8(cx, v, None, dtype)[0]
    return cx.w.op(f"fptrunc float {v} to {LLVM_TYPE[dtype]}", "dn")


# --- fp8 ----------------------------------------------------------------------------------------------
F32_EXP_BIAS = 127
F32_MANTISSA_BITS = 23
FP8_EXP_BIAS = {"e4m3": 7, "e5m2": 15}
FP8_NAN = 0x7F  # e4m3's NaN (S.1111.111) and a quiet e5m2 NaN (S.11111.11); sign in bit 7
SIGN_BIT_8 = 0x80


def fp8_pair_to_f32(cx: LoweringContext, lo: str, hi: str | None, dtype: str) -> list[str]:
    """The f32 values of one or two fp8 bytes (exact)."""
    if cx.target != "sm_90a":
        return [_fp8_to_f32_bits(cx, v, dtype) for v in (lo, hi) if v is not None]
    w = cx.w
    word = w.op(f"zext i8 {lo} to i16", "f8w")
    if hi is not None:
        h16 = w.op(f"shl i16 {w.op(f'zext i8 {hi} to i16', 'f8h')}, 8", "f8h")
        word = w.op(f"or i16 {word}, {h16}", "f8w")
    h2 = w.asm("i32", [f"cvt.rn.f16x2.{dtype}x2 $0, $1;"], ["=r", "h"], [("i16", word)], "f8up")
    v2 = w.op(f"bitcast i32 {h2} to <2 x half>", "f8h2")
    halves = [w.op(f"extractelement <2 x half> {v2}, i32 {i}", "f8e") for i in range(1 if hi is None else 2)]
    return [w.op(f"fpext half {h} to float", "up") for h in halves]


def f32_pair_to_fp8(cx: LoweringContext, lo: str, hi: str | None, dtype: str) -> list[str]:
    """One or two f32 values rounded to fp8 bytes (nearest even, satfinite)."""
    if cx.target != "sm_90a":
        return [_f32_to_fp8_bits(cx, v, dtype) for v in (lo, hi) if v is not None]
    w = cx.w
    # cvt ... d, a, b: a's byte is the upper one of d, b's the lower one (PTX ISA, cvt)
    word = w.asm("i16", [f"cvt.rn.satfinite.{dtype}x2.f32 $0, $1, $2;"], ["=h", "f", "f"],
                 [("float", hi if hi is not None else f32_literal(0.0)), ("float", lo)], "f8dn")
    out = [w.op(f"trunc i16 {word} to i8", "f8")]
    if hi is not None:
        out.append(w.op(f"trunc i16 {w.op(f'lshr i16 {word}, 8', 'f8s')} to i8", "f8"))
    for k, b in enumerate(out):
        w.pairs_of[b] = (word, k)  # LLVMWriter.pack_bytes joins two pairs into a word without unpacking them
    return out


def _fp8_to_f32_bits(cx: LoweringContext, v: str, dtype: str) -> str:
    """Exact fp8 -> f32 in integer arithmetic: the byte's exponent and mantissa moved into an f16's fields
    (e5m2 is the top byte of an f16; e4m3's 7 bits land at f16 bits 13..7 and the f16 is scaled by 2^(15-7),
    which also makes its subnormals right), e4m3's NaN pattern kept a NaN."""
    w = cx.w
    x16 = w.op(f"zext i8 {v} to i16", "f8w")
    if dtype == "e5m2":
        h = w.op(f"bitcast i16 {w.op(f'shl i16 {x16}, 8', 'f8s')} to half", "f8h")
        return w.op(f"fpext half {h} to float", "up")
    sign = w.op(f"shl i16 {w.op(f'and i16 {x16}, {SIGN_BIT_8}', 'f8sg')}, 8", "f8sg")
    mag = w.op(f"and i16 {x16}, {0x7F}", "f8m")
    shifted = w.op(f"shl i16 {mag}, 7", "f8m")
    h = w.op(f"bitcast i16 {w.op(f'or i16 {sign}, {shifted}', 'f8b')} to half", "f8h")
    scale = 2.0 ** (15 - FP8_EXP_BIAS["e4m3"])
    f = w.op(f"fmul float {w.op(f'fpext half {h} to float', 'f8f')}, {f32_literal(scale)}", "f8f")
    nan = w.op(f"icmp eq i16 {mag}, {FP8_NAN}", "f8n")
    return w.op(f"select i1 {nan}, float 0x7FF8000000000000, float {f}", "up")


def _f32_to_fp8_bits(cx: LoweringContext, v: str, dtype: str) -> str:
    """f32 -> fp8 in integer arithmetic, as cvt.rn.satfinite rounds: the magnitude clamped to the largest
    finite value (inf too); below the smallest normal number, the integer nearest (even) to |x| / quantum
    (cvt.rni) is the byte; above, the f32's mantissa rounded to nearest even at the fp8's width and the
    exponent rebiased; NaN gives the NaN byte. The sign is the f32's."""
    w = cx.w
    mbits, bias = FP8_MANTISSA_BITS[dtype], FP8_EXP_BIAS[dtype]
    shift = F32_MANTISSA_BITS - mbits
    bits = w.op(f"bitcast float {v} to i32", "fb")
    sign = w.op(f"trunc i32 {w.op(f'lshr i32 {bits}, 24', 'fs')} to i8", "fs")
    sign = w.op(f"and i8 {sign}, {SIGN_BIT_8 - 256}", "fs")
    mag = w.op(f"and i32 {bits}, {0x7FFFFFFF}", "fm")
    nan = w.op(f"icmp ugt i32 {mag}, {0x7F800000}", "fn")
    max_bits = _f32_bits(FP8_MAX[dtype])
    mag = w.call("i32", "llvm.umin.i32", [("i32", mag), ("i32", str(max_bits))], hint="fm")
    # normal: round the mantissa to `mbits` bits (ties to even), rebias the exponent
    odd = w.op(f"and i32 {w.op(f'lshr i32 {mag}, {shift}', 'fo')}, 1", "fo")
    up = w.op(f"add i32 {w.op(f'add i32 {mag}, {(1 << (shift - 1)) - 1}', 'fr')}, {odd}", "fr")
    normal = w.op(f"sub i32 {w.op(f'lshr i32 {up}, {shift}', 'fr')}, {(F32_EXP_BIAS - bias) << mbits}", "fr")
    # subnormal: |x| / 2^(min_exp - mbits), to the nearest integer (ties to even)
    quantum_inv = 2.0 ** (mbits - FP8_MIN_NORMAL_EXP[dtype])
    ax = w.op(f"bitcast i32 {mag} to float", "fa")
    q = w.call("float", "llvm.rint.f32", [("float", w.op(f"fmul float {ax}, {f32_literal(quantum_inv)}", "fq"))],
               hint="fq")
    sub = w.op(f"fptoui float {q} to i32", "fq")
    is_sub = w.op(f"icmp ult i32 {mag}, {_f32_bits(2.0 ** FP8_MIN_NORMAL_EXP[dtype])}", "fsb")
    r = w.op(f"select i1 {is_sub}, i32 {sub}, i32 {normal}", "fr")
    r = w.op(f"select i1 {nan}, i32 {FP8_NAN}, i32 {r}", "fr")
    return w.op(f"or i8 {w.op(f'trunc i32 {r} to i8', 'fr')}, {sign}", "f8")


def _f32_bits(x: float) -> int:
    return int(np.float32(x).view(np.uint32))
