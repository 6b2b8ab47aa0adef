"""Companion of gemm_at.tk: DW = X^T DY, X [T, K], DY [T, N] -> DW [K, N] (a weight gradient, reduced over the
T rows of both), bf16 in and out, f32 accumulation. The reference is float64 on the bf16 inputs."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "gemm_at.tk"
PARAMS = ["X", "DY", "DW"]
OUTPUTS = ["DW"]
DEFAULT_CONSTS: dict = {}

# Ragged T and K (K a multiple of 8 for 16-byte rows), one case of whole 128 x 128 x 64 tiles, and a ragged N
# (the compiled kernel masks DW's column edge).
CHECK_SIZES = [dict(T=200, K=136, N=256), dict(T=128, K=128, N=128), dict(T=70, K=24, N=128), dict(T=70, K=24, N=200)]
CHECK_CONSTS: list = [{}, {}, {}, {}]
# Weight gradients of a square layer and of an MLP's up- and down-projections (4096 <-> 16384), T = 8192
# tokens; and 4096^3.
BENCH_SIZES = [dict(T=4096, K=4096, N=4096), dict(T=8192, K=4096, N=4096), dict(T=8192, K=4096, N=16384),
               dict(T=8192, K=16384, N=4096)]
BENCH_CONSTS: list = [{}, {}, {}, {}]
PEER = "torch.matmul(x.T, dy)"
# Timed in the same run as PEER: the same math through torch.compile (Inductor).
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}

# bf16 output: a relative rounding error of 2^-9 per element, accumulated in f32 (as gemm.py).
TOLERANCE = 2e-2


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    T, K, N = sizes["T"], sizes["K"], sizes["N"]
    bf16 = ml_dtypes.bfloat16
    x = rng.standard_normal((T, K), np.float32).astype(bf16)
    dy = rng.standard_normal((T, N), np.float32).astype(bf16)
    return [x, dy, np.full((K, N), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, dy, _ = (a.astype(np.float64) for a in inputs)
    return {"DW": x.T @ dy}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * sizes["T"] * sizes["K"] * sizes["N"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    T, K, N = sizes["T"], sizes["K"], sizes["N"]
    return 2 * (T * K + T * N + K * N)  # bf16: 2 bytes


# --- GPU hooks (tkc bench / GPU tests) -------------------------------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    T, K, N = sizes["T"], sizes["K"], sizes["N"]
    x = torch.randn(T, K, device="cuda").to(torch.bfloat16)
    dy = torch.randn(T, N, device="cuda").to(torch.bfloat16)
    return [x, dy, torch.full((K, N), float("nan"), device="cuda", dtype=torch.bfloat16)]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    x, dy, _ = inputs
    return {"DW": x.float().t() @ dy.float()}  # f32 products of the bf16 inputs (TF32 off by default)


def _math(x, dy):
    return x.t() @ dy  # cuBLAS reads x transposed in place, as autograd of a linear layer does


def peer(inputs: list, sizes: dict, consts: dict):
    x, dy, _ = inputs
    return lambda: _math(x, dy)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    x, dy, _ = inputs
    f = inductor(_math)
    return lambda: f(x, dy)
