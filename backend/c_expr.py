"""Size expressions (`tkir.symexpr`) as C: what `--emit c` computes the grid, tensor-map dims and
strides and the `requires` conditions with.

    to_c("cdiv(M, 128) * 2", {"M": "M"}, "tkir_gemm")
        -> "tkir_gemm_mul(tkir_gemm_cdiv(M, INT64_C(128), tkir_bad), INT64_C(2), tkir_bad)"
    helpers_c("tkir_gemm")   # the static helper functions those calls name

The C means exactly what symexpr means (tkir/scalar.py): exact integers, `/` and `//` floor, `%` the
floored remainder (the divisor's sign), `cdiv` rounds up, `min`/`max` of two or more. C's int64_t
cannot be exact, so every helper checks: an overflow of int64_t or a division by zero sets
`*tkir_bad` (TKIR_OVERFLOW or TKIR_DIV_ZERO) and the caller refuses the launch, where Python's
unbounded ints would go on to fail a range check. Operators become calls, so C's precedence never
matters, and names are mapped to C identifiers by the caller.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from tkir.symexpr import SymExprError

BAD_VAR = "tkir_bad"  # the `int *` every helper call sets on overflow or division by zero
OVERFLOW, DIV_ZERO = 1, 2  # the values *tkir_bad takes (the generated code names them)
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "div", ast.Mod: "rem"}
_FUNCS = {"cdiv": (2, 2), "min": (2, None), "max": (2, None)}  # name: (least, most) arguments (as symexpr)


def to_c(expr: str | int, names: Mapping[str, str], prefix: str) -> str:
    """A C expression of type int64_t for a size expression; `names` maps each size name it may
    read to a C expression (a parameter or local), `prefix` names the helpers (helpers_c)."""
    if isinstance(expr, bool):
        raise SymExprError(f"bad size expression {expr!r}")
    if isinstance(expr, int):
        return _literal(expr)
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise SymExprError(f"bad size expression '{expr}': {e.msg}") from None
    return _c(tree.body, names, prefix, expr)


def _c(node: ast.AST, names: Mapping[str, str], prefix: str, src: str) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return _literal(node.value)
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise SymExprError(f"size '{node.id}' is unknown in '{src}'")
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return f"{prefix}_sub(INT64_C(0), {_c(node.operand, names, prefix, src)}, {BAD_VAR})"
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _c(node.left, names, prefix, src), _c(node.right, names, prefix, src)
        return f"{prefix}_{_BINOPS[type(node.op)]}({a}, {b}, {BAD_VAR})"
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
            and not node.keywords):
        least, most = _FUNCS[node.func.id]
        if least <= len(node.args) and (most is None or len(node.args) <= most):
            args = [_c(a, names, prefix, src) for a in node.args]
            if node.func.id == "cdiv":
                return f"{prefix}_cdiv({args[0]}, {args[1]}, {BAD_VAR})"
            out = args[0]
            for a in args[1:]:  # min(a, b, c) = min(min(a, b), c), as symexpr folds it
                out = f"{prefix}_{node.func.id}({out}, {a})"
            return out
    raise SymExprError(f"unsupported size expression '{src}'")


def _literal(value: int) -> str:
    if not -(2**63) < value < 2**63:
        raise SymExprError(f"constant {value} does not fit int64_t")
    return f"INT64_C({value})" if value >= 0 else f"(-INT64_C({-value}))"


HELPERS = ("add", "sub", "mul", "div", "rem", "cdiv", "min", "max")


def helpers_c(prefix: str, used: set[str] | None = None) -> str:
    """The static C functions `to_c` calls (checked int64_t add, sub, mul, floor div, floored rem,
    cdiv; min and max; C99, no compiler builtins), only those in `used` (default: all), so that
    -Wunused-function stays quiet."""
    p = prefix
    wanted = set(HELPERS) if used is None else used
    functions = _helper_functions(p)
    return f"""\
/* Checked int64_t arithmetic with the meaning of tkir's size expressions (tkir/symexpr.py): floor
   division, floored remainder, cdiv rounding up. Overflow or division by zero sets *bad. */
#define {p.upper()}_OVERFLOW {OVERFLOW}
#define {p.upper()}_DIV_ZERO {DIV_ZERO}

""" + "\n".join(functions[name] for name in HELPERS if name in wanted)


def used_helpers(c_source: str, prefix: str) -> set[str]:
    """The helper names (HELPERS) that `c_source` calls."""
    return set(re.findall(rf"\b{re.escape(prefix)}_({'|'.join(HELPERS)})\(", c_source))


def _helper_functions(p: str) -> dict[str, str]:
    return {
        "add": f"""\
static int64_t {p}_add(int64_t a, int64_t b, int *bad)
{{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) {{
        *bad = {p.upper()}_OVERFLOW;
        return 0;
    }}
    return a + b;
}}
""",
        "sub": f"""\
static int64_t {p}_sub(int64_t a, int64_t b, int *bad)
{{
    if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) {{
        *bad = {p.upper()}_OVERFLOW;
        return 0;
    }}
    return a - b;
}}
""",
        "mul": f"""\
static int64_t {p}_mul(int64_t a, int64_t b, int *bad)
{{
    if (a == 0 || b == 0) {{
        return 0;
    }}
    if ((a > 0 && b > 0 && a > INT64_MAX / b) || (a > 0 && b < 0 && b < INT64_MIN / a)
        || (a < 0 && b > 0 && a < INT64_MIN / b) || (a < 0 && b < 0 && a < INT64_MAX / b)) {{
        *bad = {p.upper()}_OVERFLOW;
        return 0;
    }}
    return a * b;
}}
""",
        "div": f"""\
static int64_t {p}_div(int64_t a, int64_t b, int *bad)
{{
    int64_t q;
    if (b == 0) {{
        *bad = {p.upper()}_DIV_ZERO;
        return 0;
    }}
    if (a == INT64_MIN && b == -1) {{
        *bad = {p.upper()}_OVERFLOW;
        return 0;
    }}
    q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) {{
        q -= 1;  /* C truncates; tkir floors */
    }}
    return q;
}}
""",
        "rem": f"""\
static int64_t {p}_rem(int64_t a, int64_t b, int *bad)
{{
    int64_t r;
    if (b == 0) {{
        *bad = {p.upper()}_DIV_ZERO;
        return 0;
    }}
    if (b == -1) {{
        return 0;
    }}
    r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) {{
        r += b;  /* the remainder takes the divisor's sign */
    }}
    return r;
}}
""",
        "cdiv": f"""\
static int64_t {p}_cdiv(int64_t a, int64_t b, int *bad)
{{
    int64_t q;
    if (b == 0) {{
        *bad = {p.upper()}_DIV_ZERO;
        return 0;
    }}
    if (a == INT64_MIN && b == -1) {{
        *bad = {p.upper()}_OVERFLOW;
        return 0;
    }}
    q = a / b;
    if (a % b != 0 && ((a < 0) == (b < 0))) {{
        q += 1;  /* rounds up: -(-a floordiv b) */
    }}
    return q;
}}
""",
        "min": f"""\
static int64_t {p}_min(int64_t a, int64_t b)
{{
    return a < b ? a : b;
}}
""",
        "max": f"""\
static int64_t {p}_max(int64_t a, int64_t b)
{{
    return a > b ? a : b;
}}
""",
    }
