"""Companion of gemm.tk: C = A @ B, bf16 in, f32 accumulation, bf16 out."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "gemm.tk"
PARAMS = ["A", "B", "C"]
OUTPUTS = ["C"]
# gemm.tk's BM, BN, STAGES, SK and SKI are `auto`. The front end alone (tkir.frontend.compile_file,
# tkir.api.build_module) cannot choose them: callers that stop there pass these, the consts gemm.tk's header
# gave before they were auto. tkir.compile without sizes chooses the same BM, BN, STAGES and SK (the largest
# tile plan-occupancy's budget accepts) and SKI=32, which is unused at SK=0: the same PTX.
DEFAULT_CONSTS = dict(BM=128, BN=256, BK=64, STAGES=4, SK=0, SKI=16)

# Multiples of the default tile (BM=128, BN=256, BK=64); small enough for the interpreter.
CHECK_SIZES = [dict(M=256, N=512, K=192), dict(M=384, N=256, K=128)]
CHECK_CONSTS = [{}, {}]
# The GEMM bench's shapes (M, N, K).
BENCH_SIZES = [dict(M=m, N=n, K=k) for m, n, k in [
    (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024),
    (4096, 16384, 4096), (16384, 4096, 8192), (6144, 6144, 6144)]]
BENCH_CONSTS = [{} for _ in BENCH_SIZES]
PEER = "torch.matmul"

# bf16 output: a relative rounding error of 2^-9 per element, accumulated in f32 (K <= 8192).
TOLERANCE = 2e-2


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    bf16 = ml_dtypes.bfloat16
    a = rng.standard_normal((M, K), np.float32).astype(bf16)
    b = rng.standard_normal((K, N), np.float32).astype(bf16)
    c = np.full((M, N), np.nan, bf16)
    return [a, b, c]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    a, b, _ = (x.astype(np.float64) for x in inputs)
    return {"C": a @ b}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * sizes["M"] * sizes["N"] * sizes["K"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    return 2 * (M * K + K * N + M * N)  # bf16: 2 bytes


# --- GPU hooks (tkc bench / tkc run): torch tensors on the GPU -------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    return [a, b, c]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    a, b, _ = inputs
    return {"C": a.float() @ b.float()}  # f32 products of the bf16 inputs (TF32 off by default)


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    a, b, c = inputs
    return lambda: torch.matmul(a, b)  # cuBLAS, allocating its output as users call it
