"""Companion of gemm_bias_gelu.tk: Y = gelu(X W + b), X [M, K], W [K, N], b [N], GELU in its tanh form
(torch's approximate="tanh"), bf16 in and out. The reference is float64 on the bf16 inputs."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

KERNEL = "gemm_bias_gelu.tk"
PARAMS = ["X", "W", "Bias", "Y"]
OUTPUTS = ["Y"]
DEFAULT_CONSTS: dict = {}

# Ragged M and K (not multiples of the 128 x 128 x 64 tile; K a multiple of 8 for 16-byte rows), and ragged N
# (the compiled kernel masks Y's column edge).
CHECK_SIZES = [dict(M=200, N=256, K=104), dict(M=128, N=128, K=64), dict(M=70, N=128, K=200), dict(M=70, N=136, K=64)]
CHECK_CONSTS: list = [{}, {}, {}, {}]
# A square GEMM, a GPT-style MLP up-projection (4096 -> 16384) and Llama-3-70B's (8192 -> 28672).
BENCH_SIZES = [dict(M=4096, N=4096, K=4096), dict(M=8192, N=16384, K=4096), dict(M=8192, N=28672, K=8192)]
BENCH_CONSTS: list = [{}, {}, {}]
PEER = "F.gelu(F.linear(x, w.T, b), approximate='tanh')"
# Timed in the same run as PEER: the same math through torch.compile (Inductor).
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}

# bf16 output: a relative rounding error of 2^-9 per element, accumulated in f32 (as linear.py).
TOLERANCE = 2e-2
GELU_K = math.sqrt(2.0 / math.pi)  # tanh GELU (Hendrycks & Gimpel; torch's approximate="tanh")
GELU_CUBIC = 0.044715


def gelu(y: np.ndarray) -> np.ndarray:
    """tanh GELU in float64."""
    return 0.5 * y * (1.0 + np.tanh(GELU_K * (y + GELU_CUBIC * y ** 3)))


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    bf16 = ml_dtypes.bfloat16
    x = rng.standard_normal((M, K), np.float32).astype(bf16)
    # W scaled by 1/sqrt(K): pre-activations of order 1, where GELU is far from linear (and from ReLU).
    w = (rng.standard_normal((K, N), np.float32) / np.sqrt(K)).astype(bf16)
    b = rng.standard_normal(N, np.float32).astype(bf16)
    return [x, w, b, np.full((M, N), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, w, b, _ = (a.astype(np.float64) for a in inputs)
    return {"Y": gelu(x @ w + b)}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * sizes["M"] * sizes["N"] * sizes["K"]  # the epilogue's M*N work is not counted


def bytes_moved(sizes: dict, consts: dict) -> int:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    return 2 * (M * K + K * N + N + M * N)  # bf16: 2 bytes


# --- GPU hooks (tkc bench / GPU tests) -------------------------------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    w = (torch.randn(K, N, device="cuda") / math.sqrt(K)).to(torch.bfloat16)
    b = torch.randn(N, device="cuda").to(torch.bfloat16)
    return [x, w, b, torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    import torch

    x, w, b, _ = inputs
    y = x.float() @ w.float() + b.float()  # f32 products of the bf16 inputs (TF32 off by default)
    return {"Y": torch.nn.functional.gelu(y, approximate="tanh")}


def _math(x, w, b):
    import torch

    # nn.Linear's call on a [K, N] weight: cuBLAS reads w.T in place (addmm with the bias), then one GELU kernel
    return torch.nn.functional.gelu(torch.nn.functional.linear(x, w.t(), b), approximate="tanh")


def peer(inputs: list, sizes: dict, consts: dict):
    x, w, b, _ = inputs
    return lambda: _math(x, w, b)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    x, w, b, _ = inputs
    f = inductor(_math)
    return lambda: f(x, w, b)
