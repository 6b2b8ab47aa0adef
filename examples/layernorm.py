"""Companion of layernorm.tk: per row y = (x - mean) / sqrt(var + eps) * W + Bias, math in f32."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "layernorm.tk"
PARAMS = ["X", "W", "Bias", "Y"]
OUTPUTS = ["Y"]
DEFAULT_CONSTS = dict(D=1024)

# Ragged row counts (ROWS is auto: the grid's last block is partly past N) and the widths the row sweep times;
# the third: a whole row of 16384 in registers over four warpgroups.
CHECK_SIZES = [dict(N=256), dict(N=37), dict(N=3), dict(N=1)]
CHECK_CONSTS = [{}, {"D": 768}, {"D": 16384}, {"D": 4096}]
BENCH_SIZES = [dict(N=16384), dict(N=65536), dict(N=4096)]
BENCH_CONSTS = [{}, {}, {"D": 16384}]
PEER = "torch.nn.functional.layer_norm"

EPS = 1e-5  # the kernel's epsilon (torch.nn.LayerNorm's default)
TOLERANCE = 2e-2  # bf16 output
# Per element: mean (add), variance (subtract, square, add), normalise (subtract, scale, *W, +Bias).
FLOPS_PER_ELEMENT = 8


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    N, D = sizes["N"], _consts(consts)["D"]
    bf16 = ml_dtypes.bfloat16
    # An offset mean per row, so a kernel that forgets to subtract the mean fails.
    x = (rng.standard_normal((N, D), np.float32) + rng.standard_normal((N, 1), np.float32)).astype(bf16)
    w = rng.standard_normal(D, np.float32).astype(bf16)
    bias = rng.standard_normal(D, np.float32).astype(bf16)
    return [x, w, bias, np.full((N, D), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, w, bias, _ = (a.astype(np.float64) for a in inputs)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)  # biased, as torch
    return {"Y": (x - mean) / np.sqrt(var + EPS) * w + bias}


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["N"] * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    N, D = sizes["N"], _consts(consts)["D"]
    return 2 * (2 * N * D + 2 * D)  # X, W, Bias read, Y written; bf16


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    x, w, b, _ = inputs
    d = x.shape[1]
    return lambda: torch.nn.functional.layer_norm(x, (d,), w, b, eps=1e-5)


# Timed in the same run as PEER: the same math through torch.compile (Inductor), which fuses it.
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}


def _math(x, w, b):
    import torch

    return torch.nn.functional.layer_norm(x, (x.shape[1],), w, b, eps=1e-5)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    x, w, b, _ = inputs
    f = inductor(_math)
    return lambda: f(x, w, b)
