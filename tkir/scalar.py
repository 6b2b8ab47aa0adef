"""What scalar arithmetic means, written once: the interpreter, canonicalize, the front end's
compile-time folding and `tkir.symexpr` all call these functions.

Values are Python numbers: integer scalars (`i32`, `u32`) are Python ints, float scalars (`f32`)
Python floats. Two meanings of integer arithmetic, each used where it belongs:

* compile time and the host (the front end's folding of consts, `tkir.symexpr`'s size expressions):
  exact, below; a folded value that must become an i32 constant is range-checked where it does;
* run time (a kernel's arith.* ops in the interpreter, and canonicalize folding them): the GPU's
  32-bit arithmetic, `runtime_binary` and friends further down (wrapping, truncating division).

The exact meaning:

* Integers are exact (unbounded Python ints: nothing here wraps at 2^32), `div` and `rem` floor
  (`-7 div 2 = -4`, `-7 rem 2 = 1`: the remainder has the divisor's sign), `cdiv` rounds up
  (`-(-a div b)`), `min`/`max` as usual.
* Floats are computed in Python floats (f64) with no rounding: `div` is true division, `rem` the
  floored remainder, `cdiv` the ceiling of the quotient. Rounding to the result's dtype is the
  caller's business: the interpreter rounds every op's result to f32; folded constants keep the
  exact value and the backend rounds it once when it writes the literal.
* A division (`div`, `rem`, `cdiv`) by zero raises ZeroDivisionError; each caller says what that is
  (the interpreter: an InterpError; canonicalize: leaves the op alone; the front end: a compile
  error; symexpr: a SymExprError).
* Comparisons (`pred` of arith.cmp / tk.cmp): signed integers, ordered floats; they also apply
  elementwise to numpy arrays.
* `convert` is arith.cast: toward zero to integers, exact to floats, nonzero to i1.

docs/ir.md states the same.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

Number = int | float
BinaryFn = Callable[[Number, Number], Number]

INT_DTYPES = ("i32", "u32")
# The range of each integer scalar dtype: what an `arith.const` of it may hold (LLVM i32 holds both, as bits)
INT_RANGES = {"i32": (-2**31, 2**31 - 1), "u32": (0, 2**32 - 1)}
I32_MIN, I32_MAX = INT_RANGES["i32"]
# The largest finite value of each float dtype (IEEE 754 binary32 and binary16; bfloat16 is binary32's
# exponent with 8 significand bits), and the magnitude from which a number rounds (to nearest even) to
# infinity in it: the largest finite value plus half its last place. A constant there would silently be inf.
FLOAT_MAX = {"f32": (2 - 2**-23) * 2**127, "bf16": (2 - 2**-7) * 2**127, "f16": 65504.0}
FLOAT_OVERFLOW = {"f32": 2**128 - 2**103, "bf16": 2**128 - 2**119, "f16": 65520.0}
FLOAT_DTYPES = ("f32",)


def _int_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _float_cdiv(a: float, b: float) -> float:
    q = a / b
    return float(math.ceil(q)) if math.isfinite(q) else q


INT_BINARY: dict[str, Callable[[int, int], int]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.floordiv,
    "rem": operator.mod,
    "min": min,
    "max": max,
    "cdiv": _int_cdiv,
    # the bit operators on integers (run-time i32/u32 scalars only: a float scalar is refused); exact here, the
    # GPU's 32-bit forms below (RUNTIME_INT_BINARY, runtime_binary)
    "and": operator.and_,
    "or": operator.or_,
    "xor": operator.xor,
    "shl": operator.lshift,
    "shr": operator.rshift,
}
BIT_NAMES = ("and", "or", "xor", "shl", "shr")  # integers only: FLOAT_BINARY has none of them
FLOAT_BINARY: dict[str, Callable[[float, float], float]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "rem": operator.mod,
    "min": min,
    "max": max,
    "cdiv": _float_cdiv,
}
BINARY_NAMES = tuple(INT_BINARY)  # the arith.<name> ops: add sub mul div rem min max cdiv, and or xor shl shr


def binary(name: str, a: Number, b: Number) -> Number:
    """`arith.<name>` of two scalars: integer semantics when both are ints, else float semantics."""
    both_int = isinstance(a, int) and isinstance(b, int)
    return INT_BINARY[name](a, b) if both_int else FLOAT_BINARY[name](a, b)


COMPARE: dict[str, Callable[[object, object], object]] = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt,
    "le": operator.le, "gt": operator.gt, "ge": operator.ge,
}


PREDICATE_DTYPE = "i1"


def convert(x: Number, dtype: str) -> Number:
    """arith.cast of `x` to `dtype`: float() to a float dtype, x != 0 to i1, int() (toward zero) else."""
    if dtype in FLOAT_DTYPES:
        return float(x)
    return bool(x) if dtype == PREDICATE_DTYPE else int(x)


# --- run-time integers: what the kernel computes on the GPU ----------------------------------------------
#
# The arithmetic above is exact: compile-time folding in the front end and size expressions on the host.
# A kernel's own `i32`/`u32` scalar ops (arith.*) run on 32-bit registers, as the backend lowers them
# (backend/rules_core.py): add, sub and mul wrap (two's complement), div and rem are `sdiv`/`srem`
# (truncating toward zero; `-7 div 2 = -3`, `-7 rem 2 = -1`), cdiv is `(a + b - 1) sdiv b` (its sum wraps
# too), min/max and comparisons are signed; and/or/xor act on the 32 bits, shl/shr read the count unsigned and
# give 0 from 32 on (shr of an i32: its sign in every bit; of a u32: logical, the one unsigned op); a u32
# value is computed on the same 32 bits as an i32 (the backend's other scalar ops are signed). The interpreter
# and canonicalize's folding compute exactly this, so the interpreter agrees with the GPU where a run-time value
# passes 2**31 - 1 (docs/ir.md, "Scalar arithmetic").

WORD = 2**32  # the values of 32 bits
# shl / shr read their count unsigned and clamp it from here on, as PTX's shl.b32 / shr clamp it: run-time scalars
# here, integer tiles in the interpreter and the backend (through tkir.ops.SHIFT_BITS, this value)
SHIFT_BITS = 32


def wrap(x: int, dtype: str = "i32") -> int:
    """`x` reduced to 32 bits: -2**31 .. 2**31 - 1 for i32 (two's complement), 0 .. 2**32 - 1 for u32."""
    x %= WORD
    return x - WORD if dtype != "u32" and x > I32_MAX else x


def _sdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)  # ZeroDivisionError for b = 0
    return q if (a < 0) == (b < 0) else -q


RUNTIME_INT_BINARY: dict[str, Callable[[int, int], int]] = {  # on signed 32-bit operands; the caller wraps
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": _sdiv,
    "rem": lambda a, b: a - b * _sdiv(a, b),
    "min": min,
    "max": max,
    "cdiv": lambda a, b: _sdiv(wrap(a + b - 1), b),
    "and": operator.and_,
    "or": operator.or_,
    "xor": operator.xor,
    "shl": lambda a, b: 0 if b % WORD >= SHIFT_BITS else a << (b % WORD),
    "shr": lambda a, b: a >> min(b % WORD, SHIFT_BITS - 1),  # arithmetic (i32); a u32's: runtime_binary
}


def runtime_binary(name: str, a: Number, b: Number, dtype: str) -> Number:
    """`arith.<name>` of a kernel's run-time scalars of `dtype`, as the GPU computes it (above)."""
    if name == "shr" and dtype == "u32":  # logical: the u32's bits, 0 from a count of 32 on
        n = int(b) % WORD
        return 0 if n >= SHIFT_BITS else wrap(int(a), "u32") >> n
    if dtype in INT_DTYPES:
        return wrap(RUNTIME_INT_BINARY[name](wrap(int(a)), wrap(int(b))), dtype)
    return FLOAT_BINARY[name](float(a), float(b))


def runtime_wraps(name: str, a: int, b: int) -> bool:
    """Whether `runtime_binary(name, a, b, ...)` on integers passes the 32 bits (and wraps): the exact sum,
    difference or product, cdiv's `a + b - 1`, or `-2**31 div -1`."""
    a, b = wrap(int(a)), wrap(int(b))
    exact = {"add": a + b, "sub": a - b, "mul": a * b, "cdiv": a + b - 1}.get(name)
    if exact is None:
        return name in ("div", "rem") and a == I32_MIN and b == -1
    return not I32_MIN <= exact <= I32_MAX


def runtime_compare(pred: str, a: Number, b: Number, dtype: str) -> bool:
    """`arith.cmp` of run-time scalars of `dtype`: integers signed on their 32 bits, floats ordered."""
    if dtype in INT_DTYPES:
        a, b = wrap(int(a)), wrap(int(b))
    return bool(COMPARE[pred](a, b))


def runtime_convert(x: Number, dtype: str) -> Number:
    """arith.cast of a run-time scalar, as the GPU computes it: a float to an integer truncates toward zero
    and saturates at the integer's range (i32: -2**31 .. 2**31 - 1, u32: 0 .. 2**32 - 1), NaN giving 0 (PTX
    cvt.rzi.s32.f32 / cvt.rzi.u32.f32); an integer to an integer keeps the 32 bits; to a float, to i1 as
    `convert` (a u32 is read unsigned)."""
    if dtype in INT_DTYPES and isinstance(x, float):
        if math.isnan(x):
            return 0
        lo, hi = INT_RANGES[dtype]
        return int(max(min(x, hi), lo))
    if dtype in INT_DTYPES:
        return wrap(int(x), dtype)
    return convert(x, dtype)


# --- fp8: e4m3 (PTX's e4m3, OCP's E4M3FN: finite, NaN only) and e5m2 ----------------------------------------
#
# A value rounds to fp8 as PTX `cvt.rn.satfinite.{e4m3x2|e5m2x2}.f32` rounds it: to nearest even, a
# magnitude past the largest finite value (inf included) becomes that value with its sign, NaN stays NaN.
# Clamping first and rounding second gives the same numbers: the largest finite value is representable and
# rounding is monotone. The interpreter rounds arrays with ml_dtypes after `saturate_fp8` (tkir/interp/frame.py);
# `round_fp8` is the same rule on one Python number (the front end's folding, and the tests' reference).

FP8_DTYPES = ("e4m3", "e5m2")
# The largest finite magnitude of each (OCP 8-bit floating point specification, table 1: E4M3 1.75 * 2^8,
# E5M2 1.75 * 2^15), its mantissa bits and the exponent of its smallest normal number.
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
FP8_MANTISSA_BITS = {"e4m3": 3, "e5m2": 2}
FP8_MIN_NORMAL_EXP = {"e4m3": -6, "e5m2": -14}


def saturate_fp8(x: object, dtype: str) -> object:
    """`x` (a number or a numpy array) with magnitudes past fp8 `dtype`'s largest finite value clamped to it
    (satfinite); NaN stays NaN. Any other dtype: `x` unchanged."""
    m = FP8_MAX.get(dtype)
    if m is None:
        return x
    if isinstance(x, (int, float)):
        return x if math.isnan(x) else max(-m, min(m, float(x)))
    return x.clip(-m, m)  # numpy: NaN passes through clip


def round_fp8(x: float, dtype: str) -> float:
    """`x` rounded to fp8 `dtype` as cvt.rn.satfinite does: saturate, then round to nearest even (with
    subnormals below the smallest normal number)."""
    x = saturate_fp8(float(x), dtype)
    if x == 0 or math.isnan(x):
        return x
    exp = max(math.frexp(abs(x))[1] - 1, FP8_MIN_NORMAL_EXP[dtype])
    quantum = 2.0 ** (exp - FP8_MANTISSA_BITS[dtype])
    return math.copysign(round(abs(x) / quantum) * quantum, x)  # round(): half to even, exact on these


def sigmoid(x: float) -> float:
    """1 / (1 + exp(-x)), written so that neither branch overflows."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    return math.exp(x) / (1.0 + math.exp(x))


# Float math on compile-time numbers (the front end's folding, canonicalize's); may raise ValueError,
# OverflowError or ZeroDivisionError outside its domain (log(-1), rsqrt(0), ...).
FLOAT_UNARY: dict[str, Callable[[float], float]] = {
    "exp": math.exp, "exp2": lambda x: 2.0 ** x, "log": math.log, "log2": math.log2,
    "sqrt": math.sqrt, "rsqrt": lambda x: 1.0 / math.sqrt(x), "abs": abs,
    "tanh": math.tanh, "sigmoid": sigmoid, "erf": math.erf, "neg": operator.neg,
}
