"""Companion of linear_dgrad.tk: DX = (DZ @ W) * act'(Z), linear.tk's data gradient, bf16 in and out.

ACT (linear.tk's numbering): 0 = none (Z unread), 1 = tanh GELU's derivative, 2 = SiLU's. The
reference is float64 on the bf16 inputs.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

KERNEL = "linear_dgrad.tk"
PARAMS = ["DZ", "W", "Z", "DX"]
OUTPUTS = ["DX"]
DEFAULT_CONSTS = dict(BM=128, BN=128, BK=64, ACT=0)

# Ragged sizes: M = 1, 100, 1000 (not multiples of BM = 128), N (the reduction) and K (DX's columns)
# multiples of 8 (TMA's 16-byte rows) but not of BK = 64 or BN = 128; each activation once, and
# the 128 x 256 tile once.
CHECK_SIZES = [dict(M=1, N=64, K=128), dict(M=100, N=200, K=136), dict(M=1000, N=264, K=520),
               dict(M=130, N=72, K=264)]
CHECK_CONSTS = [{"ACT": 0}, {"ACT": 2}, {"ACT": 1}, {"ACT": 0, "BN": 256}]
# An MLP's two data gradients (Llama-3-8B: d_model 4096, hidden 14336, 8192 tokens): the down
# projection's, through SiLU (DZ = dY: [M, 4096], W2: [4096, 14336], Z1: [M, 14336]), and the up
# projection's (DZ1: [M, 14336], W1: [14336, 4096]); then a square GEMM with and without SiLU.
BENCH_SIZES = [dict(M=8192, N=4096, K=14336), dict(M=8192, N=14336, K=4096),
               dict(M=4096, N=4096, K=4096), dict(M=4096, N=4096, K=4096)]
BENCH_CONSTS = [{"ACT": 2}, {"ACT": 0}, {"ACT": 2}, {"ACT": 0}]
PEER = "torch.matmul + aten.silu_backward / gelu_backward"

# bf16 output: a relative rounding error of 2^-9 per element, accumulated in f32 (as linear.py).
TOLERANCE = 2e-2
GELU_K = math.sqrt(2.0 / math.pi)  # tanh GELU (Hendrycks & Gimpel; torch's approximate="tanh")
GELU_CUBIC = 0.044715


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def activation_grad(z: np.ndarray, act: int) -> np.ndarray:
    """act'(z) for linear.tk's activation `act`, in float64 (1 where act is 0)."""
    if act == 1:
        t = np.tanh(GELU_K * (z + GELU_CUBIC * z ** 3))
        return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_CUBIC * z * z)
    if act == 2:
        s = 1.0 / (1.0 + np.exp(-z))
        return s * (1.0 + z * (1.0 - s))
    return np.ones_like(z)


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    bf16 = ml_dtypes.bfloat16
    dz = rng.standard_normal((M, N), np.float32).astype(bf16)
    # W scaled as nn.Linear's init (1/sqrt(in_features) = 1/sqrt(K)); Z of order 1, where GELU's
    # and SiLU's derivatives are far from constant
    w = (rng.standard_normal((N, K), np.float32) / np.sqrt(K)).astype(bf16)
    z = rng.standard_normal((M, K), np.float32).astype(bf16)
    return [dz, w, z, np.full((M, K), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    dz, w, z, _ = (a.astype(np.float64) for a in inputs)
    return {"DX": (dz @ w) * activation_grad(z, _consts(consts)["ACT"])}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * sizes["M"] * sizes["N"] * sizes["K"]  # the epilogue's M*K work is not counted


def bytes_moved(sizes: dict, consts: dict) -> int:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    z = M * K if _consts(consts)["ACT"] else 0  # Z is read only for an activation's derivative
    return 2 * (M * N + N * K + z + M * K)  # DZ, W, Z read, DX written; bf16


# --- GPU hooks (tkc bench / tkc run): torch tensors on the GPU -------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    dz = torch.randn(M, N, device="cuda").to(torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / math.sqrt(K)).to(torch.bfloat16)
    z = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    dx = torch.full((M, K), float("nan"), device="cuda", dtype=torch.bfloat16)
    return [dz, w, z, dx]


def torch_activation_grad(torch, grad, z, act: int):
    """What autograd runs for linear.tk's activation `act` at pre-activation z (grad: the output's
    gradient): aten's silu_backward / gelu_backward, bf16 in and out as in a bf16 model."""
    if act == 1:
        return torch.ops.aten.gelu_backward(grad, z, approximate="tanh")
    if act == 2:
        return torch.ops.aten.silu_backward(grad, z)
    return grad


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    import torch

    dz, w, z, _ = inputs
    g = dz.float() @ w.float()  # f32 products of the bf16 inputs (TF32 off by default)
    return {"DX": torch_activation_grad(torch, g, z.float(), _consts(consts)["ACT"])}


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    dz, w, z, _ = inputs
    act = _consts(consts)["ACT"]
    return lambda: torch_activation_grad(torch, torch.matmul(dz, w), z, act)  # cuBLAS + one kernel


# Timed in the same run as PEER: the same math through torch.compile (Inductor).
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}


def _math(dz, w, z, act: int):
    import torch

    return torch_activation_grad(torch, torch.matmul(dz, w), z, act)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    dz, w, z, _ = inputs
    f = inductor(_math)
    act = _consts(consts)["ACT"]
    return lambda: f(dz, w, z, act)
