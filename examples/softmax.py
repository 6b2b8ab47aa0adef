"""Companion of softmax.tk: row softmax of X (math in f32), bf16 out."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "softmax.tk"
PARAMS = ["X", "Y"]
OUTPUTS = ["Y"]
DEFAULT_CONSTS = dict(D=1024)

# Ragged row counts (ROWS is auto: the grid's last block is partly past N) and the widths the row sweep times;
# the third: a whole row of 16384 in registers over four warpgroups.
CHECK_SIZES = [dict(N=256), dict(N=37), dict(N=3), dict(N=1)]
CHECK_CONSTS = [{}, {"D": 768}, {"D": 16384}, {"D": 4096}]
BENCH_SIZES = [dict(N=16384), dict(N=65536), dict(N=4096)]
BENCH_CONSTS = [{}, {}, {"D": 16384}]
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


# Timed in the same run as PEER: the same math through torch.compile (Inductor), which fuses it.
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}


def _math(x):
    import torch

    return torch.softmax(x, dim=1, dtype=torch.float32).to(torch.bfloat16)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    x, _y = inputs
    f = inductor(_math)
    return lambda: f(x)
