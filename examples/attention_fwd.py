"""Companion of attention_fwd.tk: O = softmax(Q K^T / sqrt(D) [+ causal mask]) V per (batch, head).

Causal: key index > query index is masked out.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "attention_fwd.tk"
PARAMS = ["Q", "K", "V", "O"]
OUTPUTS = ["O"]
DEFAULT_CONSTS = dict(BQ=64, BKV=64, D=128, CAUSAL=0)

# N a multiple of BQ = BKV = 64. Head dim 128 non-causal, and head dim 64 causal.
CHECK_SIZES = [dict(B=1, H=2, N=256), dict(B=1, H=2, N=256)]
CHECK_CONSTS = [{}, {"D": 64, "CAUSAL": 1}]
# The reference point of the task: B8 H16 N4096 D128 (FA2 345, cuDNN 654 TFLOP/s on 2026-11-30).
BENCH_SIZES = [dict(B=8, H=16, N=4096), dict(B=8, H=16, N=4096), dict(B=16, H=16, N=1024)]
# Benchmarked with 128 query rows per block (two consumer warpgroups) and 3 K/V stages: the fastest
# configuration of docs/bench/attention_variants.sh (the kernel's defaults stay BQ=64, STAGES=2).
BENCH_CONSTS = [dict(D=128, CAUSAL=0, BQ=128, STAGES=3), dict(D=128, CAUSAL=1, BQ=128, STAGES=3),
                dict(D=64, CAUSAL=0, BQ=128, STAGES=3)]
PEER = "SDPA, cuDNN backend"

# bf16 output; the kernel also rounds the probabilities to bf16 before P @ V.
TOLERANCE = 2e-2
# Q K^T and P V: two matmuls of 2*N*N*D flops per (batch, head); causal does half the work.
MATMULS = 2


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    B, H, N, D = sizes["B"], sizes["H"], sizes["N"], _consts(consts)["D"]
    shape = (B, H, N, D)
    bf16 = ml_dtypes.bfloat16
    # Unit-normal Q and K make the scaled scores N(0, 1): neither one-hot nor uniform rows.
    q, k, v = (rng.standard_normal(shape, np.float32).astype(bf16) for _ in range(3))
    return [q, k, v, np.full(shape, np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    q, k, v, _ = (a.astype(np.float64) for a in inputs)
    D = q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(D)
    if _consts(consts)["CAUSAL"]:
        N = s.shape[-1]
        s = np.where(np.triu(np.ones((N, N), bool), k=1), -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return {"O": (p / p.sum(axis=-1, keepdims=True)) @ v}


def flops(sizes: dict, consts: dict) -> int:
    c = _consts(consts)
    full = MATMULS * 2 * sizes["B"] * sizes["H"] * sizes["N"] ** 2 * c["D"]
    return full // 2 if c["CAUSAL"] else full


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 4 * 2 * sizes["B"] * sizes["H"] * sizes["N"] * _consts(consts)["D"]  # Q, K, V read, O written


# --- GPU hooks (tkc bench / GPU tests) -------------------------------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    B, H, N, D = sizes["B"], sizes["H"], sizes["N"], _consts(consts)["D"]
    q, k, v = (torch.randn(B, H, N, D, device="cuda").to(torch.bfloat16) for _ in range(3))
    return [q, k, v, torch.full((B, H, N, D), float("nan"), device="cuda", dtype=torch.bfloat16)]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    import torch

    q, k, v, _ = (x.float() for x in inputs)
    causal = bool(_consts(consts)["CAUSAL"])
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        return {"O": torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)}


def peer(inputs: list, sizes: dict, consts: dict, backend: str = "CUDNN_ATTENTION"):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, _ = inputs
    causal = bool(_consts(consts)["CAUSAL"])
    chosen = getattr(SDPBackend, backend)

    def run():
        with sdpa_kernel(chosen):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run
