"""Companion of gemm_fp8.tk: C = bf16((A · Bᵀ) ∘ (sa ⊗ sb)), e4m3 in, f32 accumulation, bf16 out.

The inputs are quantised as users quantise for torch._scaled_mm: each row of A and each row of B (stored
N x K, i.e. each column of the K x N product operand) scaled by its largest magnitude over 448 (e4m3's
largest finite value) and rounded to e4m3; `sa` and `sb` are those scales. The reference is float64 on the
dequantised inputs, so it measures the kernel, not the quantisation. A per-tensor scale is the same call
with SA and SB filled with one value each. K must be a multiple of 16 (TMA: 16-byte row strides of fp8).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "gemm_fp8.tk"
PARAMS = ["A", "B", "SA", "SB", "C"]
OUTPUTS = ["C"]
DEFAULT_CONSTS = dict(BM=128, BN=256, BK=128)
E4M3_MAX = 448.0  # the largest finite e4m3 value (OCP FP8 E4M3FN; tkir/scalar.py FP8_MAX)

# Ragged sizes (M, N and K not multiples of the 128 x 256 x 128 tile; K a multiple of 16 and N of 8: TMA's
# 16-byte row strides of fp8 A, B and bf16 C), small enough for the interpreter.
CHECK_SIZES = [dict(M=200, N=136, K=304), dict(M=130, N=296, K=176)]
CHECK_CONSTS = [{}, {"BN": 128}]
# 4096³, 8192³, and the LLM shapes (M tokens x (N, K) weights of Llama-style projections)
LLM_NK = [(4096, 4096), (14336, 4096), (4096, 14336)]
BENCH_SIZES = [dict(M=4096, N=4096, K=4096), dict(M=8192, N=8192, K=8192)]
BENCH_SIZES += [dict(M=m, N=n, K=k) for m in (1, 16, 64, 256, 4096) for n, k in LLM_NK]
BENCH_CONSTS = [{} for _ in BENCH_SIZES]
PEER = "torch._scaled_mm"

# bf16 output (2^-9 relative rounding) of f32 sums of exact e4m3 products: the acceptance bound
TOLERANCE = 3e-2


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(e4m3 rows, f32 scale per row): x ≈ q * scale[:, None], each row's largest magnitude at 448."""
    amax = np.maximum(np.abs(x).max(axis=1), np.finfo(np.float32).tiny)
    scale = (amax / E4M3_MAX).astype(np.float32)
    q = np.clip(x / scale[:, None], -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
    return q, scale


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    a, sa = quantize_rows(rng.standard_normal((M, K)))
    b, sb = quantize_rows(rng.standard_normal((N, K)))
    c = np.full((M, N), np.nan, ml_dtypes.bfloat16)
    return [a, b, sa, sb, c]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    a, b, sa, sb, _ = (x.astype(np.float64) for x in inputs)
    return {"C": (a * sa[:, None]) @ (b * sb[:, None]).T}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * sizes["M"] * sizes["N"] * sizes["K"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    return M * K + N * K + 4 * (M + N) + 2 * M * N  # e4m3 in, f32 scales, bf16 out


# --- GPU hooks (tkc bench / tkc run): torch tensors on the GPU -------------------------------------


def torch_quantize_rows(x):
    """quantize_rows in torch (on x's device)."""
    import torch

    scale = x.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / E4M3_MAX
    q = (x / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale.float().contiguous()


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    a, sa = torch_quantize_rows(torch.randn(M, K, device="cuda"))
    b, sb = torch_quantize_rows(torch.randn(N, K, device="cuda"))
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    return [a, b, sa, sb, c]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    a, b, sa, sb, _ = inputs
    # f32 products of the dequantised inputs (TF32 off by default): exact products, f32 sums
    return {"C": (a.float() * sa[:, None]) @ (b.float() * sb[:, None]).T}


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    a, b, sa, sb, _ = inputs
    # cuBLASLt / CUTLASS row-wise scaled fp8 GEMM; its B is column-major K x N: b (N x K, row-major) transposed
    return lambda: torch._scaled_mm(a, b.t(), scale_a=sa[:, None], scale_b=sb[None, :], out_dtype=torch.bfloat16)
