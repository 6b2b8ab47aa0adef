"""Companion of linear.tk: Y = act(X @ W^T + b) in torch.nn.Linear's layout, bf16 in and out.

ACT: 0 = none, 1 = GELU in its tanh form, 2 = SiLU. The reference is float64 on the bf16 inputs.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

KERNEL = "linear.tk"
PARAMS = ["X", "W", "Bias", "Y"]
OUTPUTS = ["Y"]
DEFAULT_CONSTS = dict(BM=128, BN=256, BK=64, ACT=0)

# Multiples of the default tile (128 x 256 x 64); each activation once (none is gemm's path + bias).
CHECK_SIZES = [dict(M=256, N=512, K=192), dict(M=128, N=256, K=128), dict(M=256, N=256, K=64)]
CHECK_CONSTS = [{"ACT": 0}, {"ACT": 1}, {"ACT": 2}]
# A square GEMM and an MLP up-projection shape (Llama-3-70B: 8192 -> 28672), with GELU and SiLU.
BENCH_SIZES = [dict(M=4096, N=4096, K=4096), dict(M=8192, N=28672, K=4096),
               dict(M=4096, N=4096, K=4096), dict(M=8192, N=28672, K=4096)]
BENCH_CONSTS = [{"ACT": 1}, {"ACT": 1}, {"ACT": 2}, {"ACT": 2}]
PEER = "torch.nn.functional.linear + activation"

# bf16 output: a relative rounding error of 2^-9 per element, accumulated in f32 (as gemm.py).
TOLERANCE = 2e-2
GELU_K = math.sqrt(2.0 / math.pi)  # tanh GELU (Hendrycks & Gimpel; torch's approximate="tanh")
GELU_CUBIC = 0.044715


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def activation(y: np.ndarray, act: int) -> np.ndarray:
    """The activation `act` of linear.tk, in float64."""
    if act == 1:
        return 0.5 * y * (1.0 + np.tanh(GELU_K * (y + GELU_CUBIC * y ** 3)))
    if act == 2:
        return y / (1.0 + np.exp(-y))
    return y


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    bf16 = ml_dtypes.bfloat16
    x = rng.standard_normal((M, K), np.float32).astype(bf16)
    # W scaled by 1/sqrt(K) as nn.Linear's init: pre-activations of order 1, where GELU and SiLU
    # are far from linear (with order-sqrt(K) values they would be ReLU-like and hide mistakes).
    w = (rng.standard_normal((N, K), np.float32) / np.sqrt(K)).astype(bf16)
    b = rng.standard_normal(N, np.float32).astype(bf16)
    return [x, w, b, np.full((M, N), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, w, b, _ = (a.astype(np.float64) for a in inputs)
    return {"Y": activation(x @ w.T + b, _consts(consts)["ACT"])}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * sizes["M"] * sizes["N"] * sizes["K"]  # the epilogue's M*N work is not counted


def bytes_moved(sizes: dict, consts: dict) -> int:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    return 2 * (M * K + N * K + N + M * N)  # bf16: 2 bytes


# --- GPU hooks (tkc bench / tkc run): torch tensors on the GPU -------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / math.sqrt(K)).to(torch.bfloat16)
    b = torch.randn(N, device="cuda").to(torch.bfloat16)
    y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    return [x, w, b, y]


def _torch_act(torch, y, act: int):
    if act == 1:
        return torch.nn.functional.gelu(y, approximate="tanh")
    if act == 2:
        return torch.nn.functional.silu(y)
    return y


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    import torch

    x, w, b, _ = inputs
    y = x.float() @ w.float().T + b.float()  # f32 products of the bf16 inputs (TF32 off by default)
    return {"Y": _torch_act(torch, y, _consts(consts)["ACT"])}


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    x, w, b, _ = inputs
    act = _consts(consts)["ACT"]
    return lambda: _torch_act(torch, torch.nn.functional.linear(x, w, b), act)  # cuBLAS + one kernel
