"""The interpreter's main loop: bind a kernel's parameters and sizes, check its `requires`, run its grid.

`interpret(module, *arrays)` (exported by `tkir.interp`) binds the kernel's `gl` parameters to the
arrays in order, takes symbolic sizes from their shapes, and runs the body once per block of the grid
(row-major order; last first for a stream-K kernel), each block in its own `Frame` (frame.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from tkir import scalar, symexpr
from tkir.interp.frame import Frame, InterpError, round_to_type
from tkir.ir import Module, Operation, Value
from tkir.requires import module_requires, requirement_failure
from tkir.target import NUM_SMS
from tkir.types import NUMPY_DTYPES, GlobalType, is_size_name


def interpret(module: Module, *arrays: np.ndarray, sizes: dict[str, int] | None = None,
              scalars: dict[str, float] | None = None, poison: bool = False, num_sms: int = NUM_SMS,
              check_requires: bool = True, block_seed: int | None = None) -> None:
    """Run the module's kernel on `arrays` (one per `gl` parameter, in order), writing outputs in place.

    `sizes` names sizes the arrays do not determine (or cross-checks those they do); `scalars`
    binds scalar parameters by name. `poison` fills fresh shared buffers with NaN instead of zeros,
    so reading memory nobody wrote shows up in the outputs. `num_sms` is the NUM_SMS that persistent
    grids and workspaces see (small values exercise multi-tile and stream-K schedules on small inputs).
    Blocks run in row-major order, or last first for a stream-K kernel (tkir/ops_streamk.py).
    `block_seed`: the blocks run in a random order drawn from that seed instead (as the GPU may run them;
    a kernel whose result depends on the order, such as `+=` into global memory, then gives other bits);
    refused for a stream-K kernel, whose blocks wait on each other.
    The kernel's `requires` (tkir.requires) are checked first, with the launch's message;
    `check_requires=False` runs anyway (tests of the out-of-bounds semantics themselves).
    """
    try:
        kernel = module.kernel
    except ValueError as e:
        raise InterpError(str(e)) from None
    params = kernel.body.args
    bound_sizes = _bind_sizes(kernel, arrays, dict(sizes or {}))
    values = _bind_params(params, arrays, scalars or {})
    env = {"NUM_SMS": num_sms, **_const_sizes(kernel), **bound_sizes}
    if check_requires:
        _check_requires(module, env)
    _check_dim_exprs(kernel, arrays, env)
    try:
        grid = [symexpr.evaluate(g, env) for g in kernel.attrs["grid"]]
    except symexpr.SymExprError as e:
        raise InterpError(f"grid of @{kernel.symbol}: {e}") from None
    grid += [1] * (3 - len(grid))
    with np.errstate(all="ignore"):  # exp2(-inf), log(0), inf - inf: IEEE results, as on the GPU
        blocks = list(itertools.product(*(range(n) for n in grid)))
        if kernel.attrs.get("stream_k"):
            if block_seed is not None:
                raise InterpError(f"@{kernel.symbol}: block_seed: a stream-K kernel's blocks run last first "
                                  "(a tile's owner waits for partials of higher-numbered blocks)")
            blocks.reverse()  # a tile's owner waits for partials of higher-numbered blocks
        elif block_seed is not None:
            order = np.random.default_rng(block_seed).permutation(len(blocks))
            blocks = [blocks[i] for i in order]
        shared: dict = {}
        for block_id in blocks:
            frame = Frame(module, bound_sizes, block_id, poison, shared, num_sms)
            frame.grid = tuple(grid)
            frame.run_block(kernel.body, values)


def _check_requires(module: Module, sizes: dict[str, int]) -> None:
    """The kernel's run-time conditions (tkir.requires), checked as the launch checks them:
    a kernel the GPU would refuse is refused here, with the same message."""
    name = module.kernel.symbol or "kernel"
    for req in module_requires(module):
        try:
            failure = requirement_failure(name, req, sizes)
        except symexpr.SymExprError as e:
            raise InterpError(f"{name}: {e}") from None
        if failure:
            raise InterpError(failure)


def _check_dim_exprs(kernel: Operation, arrays: Sequence[np.ndarray], env: dict[str, int]) -> None:
    """Each dim that is an expression of sizes (`H / 4`) against its array's extent, as the launch
    checks it (after the `requires`, which say when a size is not a multiple of a divisor)."""
    gl_params = [p for p in kernel.body.args if isinstance(p.type, GlobalType)]
    for p, arr in zip(gl_params, arrays, strict=True):
        for i, d in p.type.dim_exprs:
            try:
                want = symexpr.evaluate(d, env)
            except symexpr.SymExprError as e:
                raise InterpError(f"parameter {p.name}: {e}") from None
            if want != arr.shape[i]:
                raise InterpError(f"parameter {p.name}: {p.type} dim {i} is {d} = {want}, array has {arr.shape[i]}")


# ---------------------------------------------------------------------------------------------
# Binding parameters and sizes.


def _const_sizes(kernel: Operation) -> dict[str, int]:
    consts = kernel.attrs.get("consts")
    if not isinstance(consts, dict):
        return {}
    return {k: v for k, v in consts.items() if isinstance(v, int)}


def _bind_sizes(kernel: Operation, arrays: Sequence[np.ndarray], sizes: dict[str, int]) -> dict[str, int]:
    gl_params = [a for a in kernel.body.args if isinstance(a.type, GlobalType)]
    if len(arrays) != len(gl_params):
        names = ", ".join(a.name or "?" for a in gl_params)
        raise InterpError(f"@{kernel.symbol} takes {len(gl_params)} arrays ({names}), got {len(arrays)}")
    origin = {k: "sizes=" for k in sizes}
    for p, arr in zip(gl_params, arrays, strict=True):
        t: GlobalType = p.type
        if not isinstance(arr, np.ndarray):
            raise InterpError(f"parameter {p.name}: expected a numpy array, got {type(arr).__name__}")
        want = NUMPY_DTYPES.get(t.dtype)
        if arr.dtype != want:
            raise InterpError(f"parameter {p.name}: {t} needs dtype {want}, got {arr.dtype}")
        if arr.ndim != t.rank:
            raise InterpError(f"parameter {p.name}: {t} has rank {t.rank}, array has shape {arr.shape}")
        for i, (dim, ext) in enumerate(zip(t.dims, arr.shape, strict=True)):
            if isinstance(dim, int):
                if dim != ext:
                    raise InterpError(f"parameter {p.name}: {t} dim {i} is {dim}, array has {ext}")
                continue
            if not is_size_name(dim):  # an expression of sizes: checked once every name is bound
                continue
            if dim in sizes and sizes[dim] != ext:
                raise InterpError(f"size {dim}: parameter {p.name} ({t}) dim {i} is {ext}, "
                                  f"but {dim} = {sizes[dim]} from {origin[dim]}")
            sizes[dim] = int(ext)
            origin.setdefault(dim, f"parameter {p.name}")
    return sizes


def _bind_params(params: list[Value], arrays: Sequence[np.ndarray], scalars: dict[str, float]) -> list:
    it = iter(arrays)
    out: list[object] = []
    for p in params:
        if isinstance(p.type, GlobalType):
            out.append(next(it))
            continue
        if p.name not in scalars:
            raise InterpError(f"scalar parameter {p.name}: {p.type} needs a value in scalars=")
        value = round_to_type(scalars[p.name], p.type)
        bounds = scalar.INT_RANGES.get(getattr(p.type, "dtype", ""))
        if bounds is not None and not bounds[0] <= value <= bounds[1]:  # the launch refuses it too
            raise InterpError(f"scalar parameter {p.name}: {value} does not fit {p.type} ({bounds[0]} .. {bounds[1]})")
        out.append(value)
    return out
