"""Companion of linear_wgrad.tk: DW = DZ^T @ X and DB = the column sums of DZ, linear.tk's weight and
bias gradients, bf16 in and out, f32 accumulation.

The reference is float64 on the bf16 inputs.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "linear_wgrad.tk"
PARAMS = ["DZ", "X", "DW", "DB"]
OUTPUTS = ["DW", "DB"]
DEFAULT_CONSTS = dict(BM=128, BN=128, BK=64)

# Ragged sizes: M (the reduction) = 1, 100, 1000, not multiples of BK = 64; N (DW's rows, DB's length)
# and K (DW's columns) multiples of 8 (TMA's 16-byte rows) but not of the 128-wide tiles; the last with
# 128 x 256 tiles, so that DB's column sums come from blocks that cover two of X's column tiles.
CHECK_SIZES = [dict(M=1, N=128, K=64), dict(M=100, N=200, K=136), dict(M=1000, N=72, K=264),
               dict(M=130, N=264, K=520)]
CHECK_CONSTS = [{}, {}, {}, {"BN": 256, "STAGES": 3}]
# An MLP's two weight gradients (Llama-3-8B: d_model 4096, hidden 14336, 8192 tokens): the down
# projection's (DZ = dY: [M, 4096], X = A1: [M, 14336]) and the up projection's (DZ1: [M, 14336],
# X: [M, 4096]); then a square one.
BENCH_SIZES = [dict(M=8192, N=4096, K=14336), dict(M=8192, N=14336, K=4096), dict(M=4096, N=4096, K=4096)]
BENCH_CONSTS = [{}, {}, {}]
PEER = "torch.matmul(DZ.t(), X) + DZ.sum(0)"

# bf16 outputs: a relative rounding error of 2^-9 per element, accumulated in f32 (as gemm.py).
TOLERANCE = 2e-2


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    bf16 = ml_dtypes.bfloat16
    dz = rng.standard_normal((M, N), np.float32).astype(bf16)
    x = rng.standard_normal((M, K), np.float32).astype(bf16)
    return [dz, x, np.full((N, K), np.nan, bf16), np.full(N, np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    dz, x, _, _ = (a.astype(np.float64) for a in inputs)
    return {"DW": dz.T @ x, "DB": dz.sum(axis=0)}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * sizes["M"] * sizes["N"] * sizes["K"]  # DB's M*N additions are not counted


def bytes_moved(sizes: dict, consts: dict) -> int:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    return 2 * (M * N + M * K + N * K + N)  # DZ, X read, DW, DB written; bf16


# --- GPU hooks (tkc bench / tkc run): torch tensors on the GPU -------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    dz = torch.randn(M, N, device="cuda").to(torch.bfloat16)
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    dw = torch.full((N, K), float("nan"), device="cuda", dtype=torch.bfloat16)
    db = torch.full((N,), float("nan"), device="cuda", dtype=torch.bfloat16)
    return [dz, x, dw, db]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    dz, x, _, _ = inputs
    return {"DW": dz.float().t() @ x.float(), "DB": dz.float().sum(dim=0)}  # TF32 off by default


def _math(dz, x):
    import torch

    # what autograd of F.linear runs for the weight and the bias (cuBLAS reads DZ transposed in place)
    return torch.matmul(dz.t(), x), dz.sum(dim=0)


def peer(inputs: list, sizes: dict, consts: dict):
    dz, x, _, _ = inputs
    return lambda: _math(dz, x)


# Timed in the same run as PEER: the same math through torch.compile (Inductor).
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    dz, x, _, _ = inputs
    f = inductor(_math)
    return lambda: f(dz, x)
