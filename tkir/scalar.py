"""What scalar arithmetic means, written once: the interpreter, canonicalize, the front end's
compile-time folding and `tkir.symexpr` all call these functions.

Values are Python numbers: integer scalars (`i32`, `u32`) are Python ints, float scalars (`f32`)
Python floats.

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

docs/ir.md states the same; the PTX backend computes `div`/`rem` with sdiv/srem (truncation) on
wrapping i32, which agrees for the non-negative operands that sizes and indices are.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

Number = int | float
BinaryFn = Callable[[Number, Number], Number]

INT_DTYPES = ("i32", "u32")
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
}
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
BINARY_NAMES = tuple(INT_BINARY)  # the arith.<name> ops: add sub mul div rem min max cdiv


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
