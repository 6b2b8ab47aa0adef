"""Companion of layernorm.tk: per row y = (x - mean) / sqrt(var + eps) * W + Bias, math in f32."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "layernorm.tk"
PARAMS = ["X", "W", "Bias", "Y"]
OUTPUTS = ["Y"]
DEFAULT_CONSTS = dict(ROWS=16, D=1024, DC=1024)

# N a multiple of ROWS=16; the second size also changes the row length D. The last two walk the
# rows in chunks (D > DC, two passes): four chunks of 1024, and three of 512.
CHECK_SIZES = [dict(N=256), dict(N=128), dict(N=32), dict(N=48), dict(N=64)]
CHECK_CONSTS = [{}, {"D": 512}, {"D": 4096, "DC": 1024}, {"D": 1536, "DC": 512},
                {"D": 2048, "DC": 512, "REREAD": 1}]
# The last: statistics from the whole row, then the output in chunks from a second read of X (REREAD).
# The third: the sweep's wide rows (D = 16384) in chunks, a point the tune space keeps that ptxas
# assembles without spills (its speed on the GPU is not measured yet; `tkc tune -D D=16384` picks).
BENCH_SIZES = [dict(N=16384), dict(N=65536), dict(N=4096)]
BENCH_CONSTS = [{}, {}, {"D": 16384, "DC": 4096, "ROWS": 2, "WG": 1}]
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
