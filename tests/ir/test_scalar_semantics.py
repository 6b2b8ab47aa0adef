"""Scalar arithmetic means one thing in each of its two places (tkir/scalar.py, docs/ir.md).

For random operands, negative ones included, four places compute `arith.<op>`: the interpreter's
handler (a kernel's frame running `arith.const`s and the op), canonicalize's folding (the pass on the
same IR), the front end's compile-time folding (a .tk kernel with const parameters) and tkir.symexpr
(integers only). Each must equal its documented meaning, written here independently with exact
fractions. Compile time and the host (the front end, symexpr): integer `div` floors, `rem` has the
divisor's sign, `cdiv` rounds up, nothing wraps at 2^32. Run time (the interpreter, and canonicalize,
which folds run-time ops): what the backend's LLVM computes on the GPU, 32-bit two's complement that
wraps, `div`/`rem` truncating (sdiv/srem), `cdiv` as `(a + b - 1) sdiv b`, a cast of a float to i32
saturating (cvt.rzi). f32 results are the exact result rounded to f32; a division by zero is refused
by all four.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tkir import symexpr
from tkir.diagnostics import CompileError
from tkir.frontend import compile_source
from tkir.interp import Frame, InterpError
from tkir.ir import Module, Operation
from tkir.parser import parse_module
from tkir.passes.registry import load_registry
from tkir.passmanager import Options, PassManager
from tkir.types import format_attr_value

I32_MIN, I32_MAX = -(2 ** 31), 2 ** 31 - 1  # operands in i32 range; results may leave it (no wraparound)
INTS = st.integers(I32_MIN, I32_MAX) | st.integers(-9, 9)
F32S = st.floats(width=32, allow_nan=False, allow_infinity=False)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REFUSED = "refused"  # what a division by zero gives, everywhere
OUT_OF_RANGE = "out of range"  # what the front end gives for an i32 result outside i32


# --- the documented meaning (docs/ir.md), independent of tkir/scalar.py ----------------------------


def _floor_q(a: Fraction, b: Fraction) -> int:
    return math.floor(a / b)


EXACT = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": None,  # int: floor; float: exact quotient (below)
    "rem": lambda a, b: a - b * _floor_q(a, b),
    "min": lambda a, b: b if b < a else a,
    "max": lambda a, b: b if b > a else a,
    "cdiv": lambda a, b: math.ceil(a / b),
}
DIVIDES = ("div", "rem", "cdiv")
SYMEXPR = {"add": "A + B", "sub": "A - B", "mul": "A * B", "div": "A / B", "rem": "A % B",
           "min": "min(A, B)", "max": "max(A, B)", "cdiv": "cdiv(A, B)"}
TK_EXPR = SYMEXPR  # the .tk spelling of each op on consts is the same
CMP_SYMBOL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def expected_int(name: str, a: int, b: int) -> object:
    if name in DIVIDES and b == 0:
        return REFUSED
    fa, fb = Fraction(a), Fraction(b)
    if name == "div":
        return _floor_q(fa, fb)
    return int(EXACT[name](fa, fb))


def _wrap32(x: int) -> int:
    return (x + 2**31) % 2**32 - 2**31


def _trunc_q(a: int, b: int) -> int:
    return int(Fraction(a, b))  # int() of a Fraction truncates toward zero, as sdiv does


def expected_runtime_int(name: str, a: int, b: int) -> object:
    """The GPU's i32 op (backend/rules_core.py: add/sub/mul, sdiv, srem, (a + b - 1) sdiv b, signed min/max)."""
    if name in DIVIDES and b == 0:
        return REFUSED
    if name == "div":
        return _wrap32(_trunc_q(a, b))
    if name == "rem":
        return _wrap32(a - b * _trunc_q(a, b))
    if name == "cdiv":
        return _wrap32(_trunc_q(_wrap32(a + b - 1), b))
    return _wrap32(int(EXACT[name](Fraction(a), Fraction(b))))


def expected_f32(name: str, a: float, b: float) -> object:
    if name in DIVIDES and b == 0:
        return REFUSED
    fa, fb = Fraction(a), Fraction(b)
    exact = fa / fb if name == "div" else EXACT[name](fa, fb)
    return f32(float(exact))


def f32(x: object) -> object:
    if x in (REFUSED, OUT_OF_RANGE):
        return x
    with np.errstate(over="ignore"):
        return float(np.float32(x))


# --- the four implementations -----------------------------------------------------------------------


def _module(name: str, dtype: str, a: object, b: object, pred: str | None = None) -> Module:
    """%a, %b constants, %r = arith.<name> %a, %b, and a use of %r that canonicalize keeps."""
    rtype = "i1" if name == "cmp" else dtype
    attrs = f" {{pred = {pred}}}" if pred else ""
    if name == "cast":
        op = f"%r = arith.cast %a : {dtype}"
        src_dtype = "f32" if dtype == "i32" else "i32"
    else:
        op = f"%r = arith.{name} %a, %b{attrs} : {rtype}"
        src_dtype = dtype
    if rtype == "f32":  # a tile op reads the f32 result
        use = "%u = tk.add %t, %r : rv<f32, 16>\n  tk.store %O, %u, %c0"
    elif rtype == "i32":  # a store's coordinate
        use = "tk.store %O, %t, %r"
    else:
        use = "scf.if %r {\n    tk.store %O, %t, %c0\n  }"
    text = f"""tk.kernel @k {{grid = ["1"]}} {{
  ^(%O: gl<f32>[N])
  %a = arith.const {{value = {format_attr_value(a)}}} : {src_dtype}
  %b = arith.const {{value = {format_attr_value(b)}}} : {src_dtype}
  {op}
  %c0 = arith.const {{value = 0}} : i32
  %t = tk.fill {{value = 0.0}} : rv<f32, 16>
  {use}
}}
"""
    return parse_module(text)


def _result_op(module: Module) -> Operation:
    return next(op for op in module.kernel.body.ops if op.results and op.result.name == "r")


def by_interpreter(name: str, dtype: str, a: object, b: object, pred: str | None = None) -> object:
    module = _module(name, dtype, a, b, pred)
    frame = Frame(module, {}, (0, 0, 0), poison=False)
    ops = module.kernel.body.ops
    r = _result_op(module)
    try:
        with np.errstate(all="ignore"):  # as interpret() runs: f32 overflow gives inf
            for op in ops[: ops.index(r) + 1]:
                frame.run_op(op)
    except InterpError as e:
        assert isinstance(e.__cause__, ZeroDivisionError), e
        return REFUSED
    return frame.env[r.result]


def by_canonicalize(name: str, dtype: str, a: object, b: object) -> object:
    module = _module(name, dtype, a, b)
    PassManager(load_registry(), ["canonicalize"]).run(module, Options())
    user = next(op for op in module.kernel.body.ops if op.name in ("tk.add", "tk.store"))
    owner = user.operands[1 if user.name == "tk.add" else 2].owner
    if owner.name != "arith.const":
        return REFUSED
    return owner.attrs["value"]


def by_frontend(expr: str, a: object, b: object, result: str = "i32") -> object:
    """`let r = expr` with const parameters A and B, read where run-time code uses r (a loop bound:
    a coordinate may not be negative). An i32 result outside i32 is refused (OUT_OF_RANGE): the
    front end does not let LLVM wrap it; nor an f32 result that rounds to infinity."""
    use = "for i in 0 .. r {\n        O[0] = t\n    }" if result == "i32" else "O[0] = t + r"
    src = f"kernel k<A=1, B=1>(O: gl<f32>[N]) grid(1) {{\n    reg t: rv<f32, 16> = 0\n" \
          f"    let r = {expr}\n    {use}\n}}\n"
    try:
        module = compile_source(src, consts={"A": a, "B": b})
    except CompileError as e:
        if "does not fit i32" in str(e) or "does not fit f32: it rounds to infinity" in str(e):
            return OUT_OF_RANGE
        assert "division by zero" in str(e), e
        return REFUSED
    return next(op for op in module.kernel.body.ops if op.results and op.result.name == "r").attrs["value"]


def by_symexpr(name: str, a: int, b: int) -> object:
    try:
        return symexpr.evaluate(SYMEXPR[name], {"A": a, "B": b})
    except symexpr.SymExprError as e:
        assert "division by zero" in str(e), e
        return REFUSED


def _same_int(got: object, want: object) -> bool:
    return got == want and (want == REFUSED or (isinstance(got, int) and not isinstance(got, bool)))


# --- the properties ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(EXACT))
@SETTINGS
@given(a=INTS, b=INTS)
def test_integer_ops_agree(name: str, a: int, b: int) -> None:
    want = expected_int(name, a, b)
    got = {
        "front end": by_frontend(TK_EXPR[name], a, b),
        "symexpr": by_symexpr(name, a, b),
    }
    if want != REFUSED and not I32_MIN <= want <= I32_MAX:  # the front end refuses what i32 cannot hold
        assert got.pop("front end") == OUT_OF_RANGE, (name, a, b, want)
    assert all(_same_int(v, want) for v in got.values()), (name, a, b, want, got)
    runtime = expected_runtime_int(name, a, b)
    got = {"interpreter": by_interpreter(name, "i32", a, b), "canonicalize": by_canonicalize(name, "i32", a, b)}
    assert all(_same_int(v, runtime) for v in got.values()), (name, a, b, runtime, got)


@pytest.mark.parametrize("name", list(EXACT))
@SETTINGS
@given(a=F32S, b=F32S)
def test_f32_ops_agree(name: str, a: float, b: float) -> None:
    want = expected_f32(name, a, b)
    got = {
        "interpreter": by_interpreter(name, "f32", a, b),
        "canonicalize": f32(by_canonicalize(name, "f32", a, b)),
        "front end": f32(by_frontend(TK_EXPR[name], a, b, result="f32")),
    }
    if want != REFUSED and math.isinf(want):  # finite operands: the folded constant would be inf
        assert got.pop("front end") == OUT_OF_RANGE, (name, a, b, want)
    assert all(v == want for v in got.values()), (name, a, b, want, got)


@pytest.mark.parametrize("pred", list(CMP_SYMBOL))
@SETTINGS
@given(a=INTS, b=INTS)
def test_integer_comparisons_agree(pred: str, a: int, b: int) -> None:
    """arith.cmp (signed); canonicalize does not fold comparisons, the front end does."""
    want = {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[pred]
    assert by_interpreter("cmp", "i32", a, b, pred) is want
    assert by_frontend(f"A {CMP_SYMBOL[pred]} B", a, b) == int(want)


@SETTINGS
@given(x=F32S)
def test_casts_to_i32_truncate(x: float) -> None:
    assume(abs(x) < 2 ** 62)
    want = math.trunc(Fraction(x))
    saturated = min(max(want, I32_MIN), I32_MAX)  # the run-time cast: cvt.rzi.s32.f32 saturates
    assert _same_int(by_interpreter("cast", "i32", x, x), saturated)
    assert _same_int(by_canonicalize("cast", "i32", x, x), saturated)
    front = by_frontend("i32(A)", x, x)
    assert front == OUT_OF_RANGE if not I32_MIN <= want <= I32_MAX else _same_int(front, want)


@SETTINGS
@given(x=INTS)
def test_casts_to_f32_round(x: int) -> None:
    want = f32(float(x))
    assert by_interpreter("cast", "f32", x, x) == want
    assert f32(by_canonicalize("cast", "f32", x, x)) == want
    assert f32(by_frontend("f32(A)", x, x, result="f32")) == want


def test_the_documented_examples() -> None:
    """docs/ir.md: at compile time integer div/rem floor and cdiv rounds up, for negative operands too; at
    run time they truncate as sdiv/srem do, and a result past 32 bits wraps."""
    cases = {("div", -7, 2): (-4, -3), ("rem", -7, 2): (1, -1), ("rem", 7, -2): (-1, 1), ("cdiv", -7, 2): (-3, -3),
             ("cdiv", 7, 2): (4, 4), ("div", 7, -2): (-4, -3), ("mul", 2 ** 31 - 1, 2): (2 ** 32 - 2, -2),
             ("add", 2 ** 31 - 1, 1): (2 ** 31, -(2 ** 31)), ("cdiv", 2 ** 31 - 1, 16): (2 ** 27, -(2 ** 27) + 1),
             ("div", -(2 ** 31), -1): (2 ** 31, -(2 ** 31))}
    for (name, a, b), (exact, runtime) in cases.items():
        assert by_symexpr(name, a, b) == exact, (name, a, b)
        assert by_interpreter(name, "i32", a, b) == runtime, (name, a, b)
        assert by_canonicalize(name, "i32", a, b) == runtime, (name, a, b)


@pytest.mark.parametrize("value, dtype, ok", [(2**31 - 1, "i32", True), (2**31, "i32", False), (-(2**31), "i32", True),
                                              (-(2**31) - 1, "i32", False), (2**32 - 1, "u32", True),
                                              (2**32, "u32", False), (-1, "u32", False), (2**32, "i32", False),
                                              ("1e400", "i32", False), ('"zero"', "i32", False), ("2.0", "i32", True)])
def test_a_constant_outside_its_type_is_a_located_verifier_error(value: int | str, dtype: str, ok: bool) -> None:
    """LLVM keeps the low 32 bits of `i32 4294967296` (0): a pass or hand-written IR that makes one is refused
    where the op is, after the pass that made it."""
    from tkir.verifier import verify

    text = f"""tk.kernel @k {{grid = ["1"]}} {{
  ^(%O: gl<f32>[16])
  %c = arith.const {{value = {value}}} : {dtype}
  %t = tk.fill {{value = 0.0}} : rv<f32, 16>
  tk.store %O, %t, %c
}}
"""
    if ok:
        verify(parse_module(text, "c.tkir"))
        return
    with pytest.raises(CompileError) as info:
        verify(parse_module(text, "c.tkir"))
    words = f"'arith.const' {value} does not fit {dtype}" if isinstance(value, int) else \
        f"'arith.const' of {dtype} holds an integer, not "
    assert info.value.format().startswith(f"c.tkir:3:8: error: {words}"), info.value.format()
