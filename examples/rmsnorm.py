"""Companion of rmsnorm.tk: per row y = x / sqrt(mean(x^2) + eps) * W, math in f32, bf16 out."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "rmsnorm.tk"
PARAMS = ["X", "W", "Y"]
OUTPUTS = ["Y"]
DEFAULT_CONSTS = dict(D=1024)

# Ragged row counts (ROWS is auto: the grid's last block is partly past N) and the widths the row sweep times;
# the third: a whole row of 16384 in registers over four warpgroups.
CHECK_SIZES = [dict(N=256), dict(N=37), dict(N=3), dict(N=1)]
CHECK_CONSTS = [{}, {"D": 768}, {"D": 16384}, {"D": 4096}]
# The bandwidth targets: 8192 rows of 8192 and 65536 rows of 4096 (both 128 MiB of X), and layernorm's
# default width for comparison with its table.
BENCH_SIZES = [dict(N=8192), dict(N=65536), dict(N=65536)]
BENCH_CONSTS = [{"D": 8192}, {"D": 4096}, {}]
PEER = "torch.nn.functional.rms_norm"

EPS = 1e-6  # the kernel's epsilon (rmsnorm.tk's EPS)
TOLERANCE = 2e-2  # bf16 output
# Per element: square, sum, scale by rstd, *W.
FLOPS_PER_ELEMENT = 4


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    N, D = sizes["N"], _consts(consts)["D"]
    bf16 = ml_dtypes.bfloat16
    # A different scale per row, so a kernel that normalizes by the wrong statistic fails.
    scale = np.exp(rng.standard_normal((N, 1), np.float32))
    x = (rng.standard_normal((N, D), np.float32) * scale).astype(bf16)
    w = rng.standard_normal(D, np.float32).astype(bf16)
    return [x, w, np.full((N, D), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, w, _ = (a.astype(np.float64) for a in inputs)
    ms = (x * x).mean(axis=1, keepdims=True)
    return {"Y": x / np.sqrt(ms + EPS) * w}


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["N"] * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    N, D = sizes["N"], _consts(consts)["D"]
    return 2 * (2 * N * D + D)  # X, W read, Y written; bf16


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    x, w, _ = inputs
    d = x.shape[1]
    if hasattr(torch.nn.functional, "rms_norm"):  # torch >= 2.4
        return lambda: torch.nn.functional.rms_norm(x, (d,), w, eps=EPS)
    return lambda: x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS).to(x.dtype) * w


# Timed in the same run as PEER: the same math through torch.compile (Inductor), which fuses it.
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}


def _math(x, w):
    import torch

    return torch.nn.functional.rms_norm(x, (x.shape[1],), w, eps=EPS)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    x, w, _ = inputs
    f = inductor(_math)
    return lambda: f(x, w)
