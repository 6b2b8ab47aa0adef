"""The verifier's size rules: size expressions in attributes are well formed, and a grid known at
compile time fits the target's launch limits.

The grid (`tk.kernel {grid = [...]}`) and a `tma.desc`'s dims and strides are `tkir.symexpr`
expressions of the kernel's sizes (the named dims of its gl parameters; the grid may also read
NUM_SMS, which the runtime binds to the device's SM count). IR text could carry anything there: a
garbage grid passed the verifier and crashed the backend, and so did a `tk.size` of an unknown name
(issue 14). A grid dim with no names is a
number of blocks, checked against CUDA's limits here instead of at the launch.
"""

from __future__ import annotations

from tkir import symexpr
from tkir.diagnostics import CompileError
from tkir.ir import Operation
from tkir.target import MAX_GRID
from tkir.types import GlobalType

RUNTIME_SIZES = ("NUM_SMS",)  # bound by the runtime (the device's SM count), not by an argument
GRID_AXES = "xyz"


def kernel_sizes(kernel: Operation) -> set[str]:
    """The size names of a kernel: the dims of its gl parameters that are plain names (a dim may also
    be an expression of them, e.g. "H / 4")."""
    return {d for a in kernel.body.args if isinstance(a.type, GlobalType) for d in a.type.size_names}


def check_problem_sizes(kernel: Operation, sizes: dict[str, int], source: str | None = None) -> None:
    """Problem sizes an auto const is chosen for (tkir.compile(sizes=), --size) must name every size of the
    kernel's tensors: the cost model evaluates the grid and the tiles at all of them. A located error at the
    kernel otherwise (sizes it does not have are left alone: they change no choice)."""
    named = kernel_sizes(kernel)
    missing = sorted(named - set(sizes))
    if missing:
        given = ", ".join(f"{k}={v}" for k, v in sizes.items()) or "none"
        raise CompileError(kernel.loc, f"the problem sizes ({given}) lack {', '.join(repr(n) for n in missing)}: "
                                       "auto consts are chosen at the size bucket of every size the kernel's "
                                       "tensors name", source,
                           hint=f"give them all (--size NAME=VALUE, sizes={{...}}): "
                                f"{', '.join(sorted(named))}")


def size_names(expr: object, known: set[str], op: Operation, what: str, error: type[CompileError]) -> set[str]:
    """The names of size expression `expr`: well-formed, every name in `known`; else a located error."""
    if not isinstance(expr, (int, str)) or isinstance(expr, bool):
        raise error(op.loc, f"{what} must be an int or a size expression, got {expr!r}")
    try:
        found = symexpr.check(expr)
    except symexpr.SymExprError as e:
        raise error(op.loc, f"{what}: {e}") from None
    unknown = sorted(found - known)
    if unknown:
        shown = symexpr.quote(expr) if isinstance(expr, str) else str(expr)
        raise error(op.loc, f"{what} {shown} uses {', '.join(repr(n) for n in unknown)}, which "
                            f"{'is not a size' if len(unknown) == 1 else 'are not sizes'} of the kernel",
                    hint=f"sizes: {', '.join(sorted(known)) or 'none'}")
    return found


def grid_limit_problem(axis: int, blocks: int) -> str | None:
    """Why `blocks` blocks along grid dim `axis` cannot be launched, or None."""
    if not 1 <= blocks <= MAX_GRID[axis]:
        return (f"grid dim {axis} ({GRID_AXES[axis]}) is {blocks} blocks; CUDA launches 1..{MAX_GRID[axis]} "
                f"along {GRID_AXES[axis]}")
    return None


def verify_sizes(kernel: Operation, error: type[CompileError]) -> None:
    """Every grid dim is a size expression of the kernel's sizes (and NUM_SMS), one without names
    within the target's limits; every `tk.size` reads a size of the kernel."""
    sizes = kernel_sizes(kernel)
    for op in kernel.walk():
        if op.name == "tk.size" and op.attrs["name"] not in sizes:
            raise error(op.loc, f"'tk.size' reads {op.attrs['name']!r}, which is not a size of @{kernel.symbol}",
                        hint=f"sizes (the named dims of its gl parameters): {', '.join(sorted(sizes)) or 'none'}")
    for a in kernel.body.args:  # a dim that is an expression reads sizes that other dims bind plainly
        if isinstance(a.type, GlobalType):
            for i, d in a.type.dim_exprs:
                size_names(d, sizes, kernel, f"%{a.name} dim {i}", error)
    known = sizes | set(RUNTIME_SIZES)
    for axis, expr in enumerate(kernel.attrs["grid"]):
        if size_names(expr, known, kernel, f"grid dim {axis}", error):
            continue
        try:
            blocks = symexpr.evaluate(expr, {})
        except symexpr.SymExprError as e:
            raise error(kernel.loc, f"grid dim {axis}: {e}") from None
        problem = grid_limit_problem(axis, blocks)
        if problem:
            raise error(kernel.loc, problem)
