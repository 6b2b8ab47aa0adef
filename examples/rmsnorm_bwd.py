"""Companion of rmsnorm_bwd.tk: the gradients of y = x * rstd * W (rmsnorm.tk) given dy, math in f32.

DX (bf16) in full; DWP (f32, G rows, G a const) the per-block partial sums of dy * x_hat that col_sum.tk adds
into DW: row b holds the rows of the row tiles b, b + G, b + 2G, ... (tiles of ROWS rows). `partial_rows` picks
G for a given N; `torch_backward` runs both kernels on torch tensors.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tkir.launch_bounds import partial_rows, resident_slots  # noqa: F401 (this companion's G)

KERNEL = "rmsnorm_bwd.tk"
PARAMS = ["X", "W", "DY", "DX", "DWP"]
OUTPUTS = ["DX", "DWP"]
DEFAULT_CONSTS = dict(ROWS=4, D=1024, G=264)

# Ragged N (not a multiple of ROWS): the last tile's rows past N load as zeros and are not stored. G = 1
# (one block walks every tile), G not dividing the tiles, and G above the tile count (blocks with no
# tile write zero partials). Then the bench configurations: a row a warp at D = 768 (ROWS = 4 over one
# warpgroup), one row over four warpgroups at D = 4096, and one over eight (1024 threads, one block an SM).
CHECK_SIZES = [dict(N=1), dict(N=127), dict(N=1000), dict(N=127), dict(N=1000), dict(N=77), dict(N=9)]
CHECK_CONSTS = [{"G": 1}, {"G": 3}, {"G": 7}, {"G": 40}, {"D": 768, "ROWS": 4, "WG": 1, "G": 64},
                {"D": 4096, "ROWS": 1, "WG": 4, "G": 5}, {"D": 8192, "ROWS": 1, "WG": 8, "OCC": 1, "G": 2}]
# The bars: (4096, 4096) and (65536, 768). At D = 768 a warp holds a row (24 elements a lane):
# the row sums are shuffles alone, no barrier in the loop; at D = 4096 a row is spread over 16 warps,
# 8 elements a thread (where two blocks of 512 threads fit in 64 registers).
# G from partial_rows at those configurations' resident slots (2 blocks of 512 threads in 64 registers an SM
# at D = 4096, 4 of 128 threads in 128 registers at D = 768; resident_slots of the compiled kernels), so that
# every block walks the same number of tiles: 16 of one row, 32 of four.
BENCH_SIZES = [dict(N=4096), dict(N=65536)]
BENCH_CONSTS = [{"D": 4096, "ROWS": 1, "WG": 4, "G": 256}, {"D": 768, "ROWS": 4, "WG": 1, "G": 512}]
PEER = "torch.autograd.grad of torch.nn.functional.rms_norm (eager)"

EPS = 1e-6  # the kernel's epsilon (rmsnorm.tk's EPS)
TOLERANCE = 1e-2  # DX is bf16 (2^-8 relative rounding); the f32 partials are far closer
# Per element: square and add (rstd), x_hat, g = dy * W, g * x_hat and add, the DX update (sub, mul, mul),
# dy * x_hat accumulated.
FLOPS_PER_ELEMENT = 10


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    N = sizes["N"]
    G, D = _consts(consts)["G"], _consts(consts)["D"]
    bf16 = ml_dtypes.bfloat16
    # A different scale per row (as rmsnorm.py), so a kernel that uses the wrong row's rstd fails.
    scale = np.exp(rng.standard_normal((N, 1), np.float32))
    x = (rng.standard_normal((N, D), np.float32) * scale).astype(bf16)
    w = rng.standard_normal(D, np.float32).astype(bf16)
    dy = rng.standard_normal((N, D), np.float32).astype(bf16)
    return [x, w, dy, np.full((N, D), np.nan, bf16), np.full((G, D), np.nan, np.float32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, w, dy = (a.astype(np.float64) for a in inputs[:3])
    rstd = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + EPS)
    xhat = x * rstd
    g = dy * w
    dx = rstd * (g - xhat * (g * xhat).mean(axis=1, keepdims=True))
    return {"DX": dx, "DWP": block_partials(dy * xhat, _consts(consts)["G"], _consts(consts)["ROWS"])}


def block_partials(v: np.ndarray, g: int, rows: int) -> np.ndarray:
    """The [G, D] partial sums the row kernels write: row b sums the rows of v in tiles b, b + G, ..."""
    out = np.zeros((g, v.shape[1]))
    np.add.at(out, (np.arange(v.shape[0]) // rows) % g, v)
    return out


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["N"] * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    N = sizes["N"]
    G, D = _consts(consts)["G"], _consts(consts)["D"]
    return 2 * (3 * N * D + D) + 4 * G * D  # X, DY, W read, DX written (bf16); DWP written (f32)


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
# `tkc bench` times this kernel alone (DX and the partials) against torch's whole backward; the two
# kernels together, as a user calls them, are timed by scripts/bench/row_backward.py.
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    """torch's eager backward: the forward runs here, outside the timed call, which computes dX and dW."""
    import torch

    x, w, dy = (a.detach().requires_grad_(i < 2) for i, a in enumerate(inputs[:3]))
    y = torch.nn.functional.rms_norm(x, (x.shape[1],), w, eps=EPS)
    return lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True)


def torch_backward(row, col_sum, x, w, dy):
    """(DX, DW) of torch tensors through both kernels, as a caller runs them: `row` this kernel and `col_sum`
    col_sum.tk, compiled (tkir.compile); the partials have the G rows `row` was compiled with."""
    import torch

    d = x.shape[1]
    dx = torch.empty_like(x)
    part = torch.empty(int(row.module.kernel.attrs["consts"]["G"]), d, dtype=torch.float32, device=x.device)
    row(x, w, dy, dx, part)
    dw = torch.empty(d, dtype=torch.bfloat16, device=x.device)
    col_sum(part, dw)
    return dx, dw
