"""Companion of attention_bwd_dq_convert.tk: dQ = bf16(scale * DQACC^T) from attention_bwd.tk's f32 workspace
DQACC [B, H, D, NP] (NP = N rounded up to 4; the columns past N are never read into dQ)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "attention_bwd_dq_convert.tk"
PARAMS = ["DQACC", "DQ"]
OUTPUTS = ["DQ"]
DEFAULT_CONSTS = dict(R=64, D=128)

# Ragged N (the workspace's padding columns, TMA's zero fill past NP, the clipped store), both head dims.
CHECK_SIZES = [dict(B=1, H=2, N=200), dict(B=2, H=1, N=1), dict(B=1, H=1, N=65), dict(B=1, H=3, N=130)]
CHECK_CONSTS = [{}, {"D": 64}, {"D": 64}, {}]
BENCH_SIZES = [dict(B=16, H=16, N=4096)]
BENCH_CONSTS = [{}]
PEER = "(acc.transpose(-1, -2)[..., :N, :] * scale).bfloat16()"
MEMORY_BOUND = True

TOLERANCE = {"DQ": 1e-2}  # one rounding to bf16


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    d, n = _consts(consts)["D"], sizes["N"]
    acc = rng.standard_normal((sizes["B"], sizes["H"], d, -(-n // 4) * 4), np.float32)
    return [acc, np.full((sizes["B"], sizes["H"], n, d), np.nan, ml_dtypes.bfloat16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    d, n = _consts(consts)["D"], sizes["N"]
    return {"DQ": np.swapaxes(inputs[0].astype(np.float64), -1, -2)[..., :n, :] / np.sqrt(d)}


def flops(sizes: dict, consts: dict) -> int:
    return sizes["B"] * sizes["H"] * sizes["N"] * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 6 * sizes["B"] * sizes["H"] * sizes["N"] * _consts(consts)["D"]  # f32 read, bf16 written


def peer(inputs: list, sizes: dict, consts: dict):
    acc = inputs[0]
    n, scale = sizes["N"], _consts(consts)["D"] ** -0.5
    return lambda: (acc.transpose(-1, -2)[..., :n, :] * scale).bfloat16()
