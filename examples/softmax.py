"""Companion of softmax.tk: row softmax of X (math in f32), bf16 out."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "softmax.tk"
PARAMS = ["X", "Y"]
OUTPUTS = ["Y"]
DEFAULT_CONSTS = dict(ROWS=16, D=1024)

# N a multiple of ROWS=16; the second size also changes the row length D.
CHECK_SIZES = [dict(N=256), dict(N=128)]
CHECK_CONSTS = [{}, {"D": 512}]
BENCH_SIZES = [dict(N=16384), dict(N=65536)]
BENCH_CONSTS = [{}, {}]
PEER = "torch.softmax"

TOLERANCE = 2e-2  # bf16 output
# Per element: max, subtract, exp, sum, divide.
FLOPS_PER_ELEMENT = 5


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    N, D = sizes["N"], _consts(consts)["D"]
    bf16 = ml_dtypes.bfloat16
    x = rng.standard_normal((N, D), np.float32).astype(bf16)
    return [x, np.full((N, D), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x = inputs[0].astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"Y": e / e.sum(axis=1, keepdims=True)}


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["N"] * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 2 * 2 * sizes["N"] * _consts(consts)["D"]  # X read, Y written; bf16


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    x, y = inputs
    return lambda: torch.softmax(x, dim=1, dtype=torch.float32).to(torch.bfloat16)
