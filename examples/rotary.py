"""Companion of rotary.tk: NeoX-style rotary embedding, Y = [x1*cos - x2*sin, x2*cos + x1*sin].

x1 = X[:, :D/2] and x2 = X[:, D/2:]; Cos and Sin hold one value per (position, frequency).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "rotary.tk"
PARAMS = ["X", "Cos", "Sin", "Y"]
OUTPUTS = ["Y"]
DEFAULT_CONSTS = dict(ROWS=16, D=128)

# T a multiple of ROWS=16; the second size also changes the head dim D.
CHECK_SIZES = [dict(T=256), dict(T=128)]
CHECK_CONSTS = [{}, {"D": 64}]
BENCH_SIZES = [dict(T=65536), dict(T=262144)]
BENCH_CONSTS = [{}, {}]
PEER = "torch eager: cat(x1*cos - x2*sin, x2*cos + x1*sin)"  # torch has no fused rotary op

TOLERANCE = 2e-2  # bf16 output
# Per output element: two multiplies and one add.
FLOPS_PER_ELEMENT = 3


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    T, D = sizes["T"], _consts(consts)["D"]
    bf16 = ml_dtypes.bfloat16
    x = rng.standard_normal((T, D), np.float32).astype(bf16)
    # Random rather than real cos/sin tables: no structure (cos^2 + sin^2 = 1) a wrong kernel can hide in.
    cos = rng.standard_normal((T, D // 2), np.float32).astype(bf16)
    sin = rng.standard_normal((T, D // 2), np.float32).astype(bf16)
    return [x, cos, sin, np.full((T, D), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, cos, sin, _ = (a.astype(np.float64) for a in inputs)
    half = x.shape[1] // 2
    x1, x2 = x[:, :half], x[:, half:]
    return {"Y": np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=1)}


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["T"] * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    T, D = sizes["T"], _consts(consts)["D"]
    return 2 * (T * D + 2 * T * (D // 2) + T * D)  # X, Cos, Sin read, Y written; bf16


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    x, cos, sin, _ = inputs
    half = x.shape[1] // 2
    x1, x2 = x[:, :half], x[:, half:]
    return lambda: torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=1)


# Timed in the same run as PEER: the same math through torch.compile (Inductor), which fuses it.
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}


def _math(x, cos, sin):
    import torch

    half = x.shape[1] // 2
    x1, x2 = x[:, :half], x[:, half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=1)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    x, cos, sin, _ = inputs
    f = inductor(_math)
    return lambda: f(x, cos, sin)
