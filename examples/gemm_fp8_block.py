"""Companion of gemm_fp8_block.tk: an e4m3 GEMM with DeepSeek-V3's block scales, f32 accumulation, bf16 out.

A is quantised per 1 x 128 block (each row's slice of 128 of K has its own scale), B (stored N x K) per
128 x 128 block, each block's largest magnitude at 448 (e4m3's largest finite value). The kernel takes A's
scales as SA[k-slice, m] (DeepGEMM's transposed layout) and B's as SB[k-slice, n], each block's scale
repeated for its 128 columns (`expand_block_scales`). The reference is float64 on the dequantised inputs.
K must be a multiple of 16 (TMA: 16-byte row strides of fp8).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "gemm_fp8_block.tk"
PARAMS = ["A", "B", "SA", "SB", "C"]
OUTPUTS = ["C"]
DEFAULT_CONSTS = dict(BM=128, BN=128, BK=128)
BLOCK = 128  # DeepSeek-V3's quantisation block (1 x 128 for activations, 128 x 128 for weights)
E4M3_MAX = 448.0  # the largest finite e4m3 value (OCP FP8 E4M3FN; tkir/scalar.py FP8_MAX)

# Ragged sizes (M, N and K not multiples of 128; K a multiple of 16 and N of 8: TMA's 16-byte row strides of
# fp8 A, B and bf16 C), small enough for the interpreter.
CHECK_SIZES = [dict(M=200, N=136, K=304), dict(M=61, N=264, K=400)]
CHECK_CONSTS = [{}, {"BM": 64}]
LLM_NK = [(4096, 4096), (14336, 4096), (4096, 14336)]
BENCH_SIZES = [dict(M=4096, N=4096, K=4096), dict(M=8192, N=8192, K=8192)]
BENCH_SIZES += [dict(M=m, N=n, K=k) for m in (64, 256, 4096) for n, k in LLM_NK]
BENCH_CONSTS = [{} for _ in BENCH_SIZES]
PEER = "torch._scaled_mm (row-wise scales)"

TOLERANCE = 3e-2  # bf16 output of f32 sums (the acceptance bound)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def quantize_blocks(x: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(e4m3 x, f32 scales [cdiv(R, rows), cdiv(C, 128)]): each `rows` x 128 block of x scaled so that its
    largest magnitude is 448 (ragged blocks at the edges)."""
    R, C = x.shape
    pr, pc = _cdiv(R, rows) * rows, _cdiv(C, BLOCK) * BLOCK
    padded = np.zeros((pr, pc))
    padded[:R, :C] = x
    blocks = np.abs(padded).reshape(pr // rows, rows, pc // BLOCK, BLOCK)
    scale = (np.maximum(blocks.max(axis=(1, 3)), np.finfo(np.float32).tiny) / E4M3_MAX).astype(np.float32)
    full = np.repeat(np.repeat(scale, rows, axis=0), BLOCK, axis=1)[:R, :C]
    q = np.clip(x / full, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
    return q, scale


def expand_block_scales(sb: np.ndarray, n: int) -> np.ndarray:
    """B's block scales [cdiv(N, 128), KB] as the kernel reads them: SB[k, n] = sb[n // 128, k]."""
    return np.ascontiguousarray(np.repeat(sb, BLOCK, axis=0)[:n].T)


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    a, sa = quantize_blocks(rng.standard_normal((M, K)), 1)
    b, sb = quantize_blocks(rng.standard_normal((N, K)), BLOCK)
    c = np.full((M, N), np.nan, ml_dtypes.bfloat16)
    return [a, b, np.ascontiguousarray(sa.T), expand_block_scales(sb, N), c]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    a, b, sa, sb, _ = (x.astype(np.float64) for x in inputs)
    K = sizes["K"]
    kslice = np.arange(K) // BLOCK
    return {"C": (a * sa[kslice, :].T) @ (b * sb[kslice, :].T).T}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * sizes["M"] * sizes["N"] * sizes["K"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    return M * K + N * K + 4 * _cdiv(K, BLOCK) * (M + N) + 2 * M * N


# --- GPU hooks (tkc bench / tkc run): torch tensors on the GPU -------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    from_np = lambda x: torch.from_numpy(x.view(np.uint8) if x.dtype.itemsize == 1 and x.dtype != np.uint8  # noqa: E731
                                         else x).cuda()
    a, b, sa, sb, _ = make_inputs(np.random.default_rng(), sizes, consts)
    qa = from_np(a).view(torch.float8_e4m3fn)
    qb = from_np(b).view(torch.float8_e4m3fn)
    c = torch.full((sizes["M"], sizes["N"]), float("nan"), device="cuda", dtype=torch.bfloat16)
    return [qa, qb, from_np(sa), from_np(sb), c]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    import torch

    a, b, sa, sb, _ = inputs
    kslice = torch.arange(sizes["K"], device=a.device) // BLOCK
    return {"C": (a.float() * sa[kslice, :].T) @ (b.float() * sb[kslice, :].T).T}


def peer(inputs: list, sizes: dict, consts: dict):
    """torch has no block-scaled fp8 GEMM: the bar is its row-wise scaled one on the same fp8 operands."""
    import torch

    a, b, sa, _, _ = inputs
    row = sa.amax(dim=0)[:, None].contiguous()
    col = torch.ones(1, b.shape[0], device=b.device)
    return lambda: torch._scaled_mm(a, b.t(), scale_a=row, scale_b=col, out_dtype=torch.bfloat16)
