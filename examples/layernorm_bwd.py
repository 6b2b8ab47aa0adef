"""Companion of layernorm_bwd.tk: the gradients of y = (x - mean) * rstd * W + Bias (layernorm.tk) given dy,
math in f32.

DX (bf16) in full; DWBP (f32, G rows of 2D, G a const) the per-block partial sums that col_sum.tk adds into DW
and DB: columns 0..D-1 of row b sum dy * x_hat, columns D..2D-1 sum dy, over the row tiles b, b + G, b + 2G, ...
(tiles of ROWS rows). `partial_rows` picks G for a given N; `torch_backward` runs both kernels on torch tensors.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tkir.launch_bounds import partial_rows, resident_slots  # noqa: F401 (this companion's G)

KERNEL = "layernorm_bwd.tk"
PARAMS = ["X", "W", "DY", "DX", "DWBP"]
OUTPUTS = ["DX", "DWBP"]
DEFAULT_CONSTS = dict(ROWS=4, D=1024, G=264)

# As rmsnorm_bwd.py: ragged N, G = 1, G not dividing the tiles, G above the tile count, then the bench
# configurations (a row a warp at D = 768; one row over four warpgroups at D = 4096).
CHECK_SIZES = [dict(N=1), dict(N=127), dict(N=1000), dict(N=127), dict(N=1000), dict(N=77)]
CHECK_CONSTS = [{"G": 1}, {"G": 3}, {"G": 7}, {"G": 40}, {"D": 768, "ROWS": 4, "WG": 1, "G": 64},
                {"D": 4096, "ROWS": 1, "WG": 4, "G": 5}]
# The bars: (4096, 4096) and (65536, 768), configured as rmsnorm_bwd's.
# G from partial_rows at their resident slots (2 blocks of 512 threads an SM at D = 4096, 3 of 128 threads in
# 168 registers at D = 768): 16 tiles of one row, 42 of four a block.
BENCH_SIZES = [dict(N=4096), dict(N=65536)]
BENCH_CONSTS = [{"D": 4096, "ROWS": 1, "WG": 4, "G": 256}, {"D": 768, "ROWS": 4, "WG": 1, "G": 391}]
PEER = "torch.autograd.grad of torch.nn.functional.layer_norm (eager)"

EPS = 1e-5  # the kernel's epsilon (layernorm.tk's EPS, torch.nn.LayerNorm's default)
TOLERANCE = 1e-2  # DX is bf16 (2^-8 relative rounding); the f32 partials are far closer
# Per element: mean and variance (add; sub, square, add), g = dy * W, sum g, g * xc and add, the DX update
# (two subs, two muls, one FMA), dy * x_hat and dy accumulated.
FLOPS_PER_ELEMENT = 14


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    N = sizes["N"]
    G, D = _consts(consts)["G"], _consts(consts)["D"]
    bf16 = ml_dtypes.bfloat16
    # An offset mean and a scale per row (as layernorm.py), so a kernel that forgets to centre, or uses
    # the wrong row's statistics, fails.
    x = (rng.standard_normal((N, D), np.float32) * np.exp(rng.standard_normal((N, 1), np.float32))
         + rng.standard_normal((N, 1), np.float32)).astype(bf16)
    w = rng.standard_normal(D, np.float32).astype(bf16)
    dy = rng.standard_normal((N, D), np.float32).astype(bf16)
    return [x, w, dy, np.full((N, D), np.nan, bf16), np.full((G, 2 * D), np.nan, np.float32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, w, dy = (a.astype(np.float64) for a in inputs[:3])
    mean = x.mean(axis=1, keepdims=True)
    xc = x - mean
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + EPS)  # biased variance, as torch
    xhat = xc * rstd
    g = dy * w
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    rows = _consts(consts)["ROWS"]
    return {"DX": dx, "DWBP": block_partials(np.concatenate([dy * xhat, dy], axis=1), _consts(consts)["G"], rows)}


def block_partials(v: np.ndarray, g: int, rows: int) -> np.ndarray:
    """The [G, width] partial sums the row kernels write: row b sums the rows of v in tiles b, b + G, ..."""
    out = np.zeros((g, v.shape[1]))
    np.add.at(out, (np.arange(v.shape[0]) // rows) % g, v)
    return out


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["N"] * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    N = sizes["N"]
    G, D = _consts(consts)["G"], _consts(consts)["D"]
    return 2 * (3 * N * D + D) + 4 * G * 2 * D  # X, DY, W read, DX written (bf16); DWBP written (f32)


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
# `tkc bench` times this kernel alone (DX and the partials) against torch's whole backward; the two
# kernels together, as a user calls them, are timed by scripts/bench/row_backward.py.
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    """torch's eager backward: the forward runs here, outside the timed call, which computes dX, dW and dB."""
    import torch

    x, w, dy = (a.detach().requires_grad_(i < 2) for i, a in enumerate(inputs[:3]))
    b = torch.zeros_like(w, requires_grad=True)
    y = torch.nn.functional.layer_norm(x, (x.shape[1],), w, b, eps=EPS)
    return lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)


def torch_backward(row, col_sum, x, w, dy):
    """(DX, DW, DB) of torch tensors through both kernels, as a caller runs them: `row` this kernel and `col_sum`
    col_sum.tk, compiled (tkir.compile); the partials have the G rows `row` was compiled with. DW and DB are
    the two halves of col_sum's one output (views, no copy)."""
    import torch

    d = x.shape[1]
    dx = torch.empty_like(x)
    part = torch.empty(int(row.module.kernel.attrs["consts"]["G"]), 2 * d, dtype=torch.float32, device=x.device)
    row(x, w, dy, dx, part)
    sums = torch.empty(2 * d, dtype=torch.bfloat16, device=x.device)
    col_sum(part, sums)
    return dx, sums[:d], sums[d:]
