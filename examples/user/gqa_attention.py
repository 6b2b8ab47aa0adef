"""Companion of gqa_attention.tk: grouped-query attention forward, O = softmax(Q K^T / sqrt(D) [+ causal
mask]) V per (batch, head), query head h reading K/V head h // G (K and V have H / G heads). Any N >= 1."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "gqa_attention.tk"
PARAMS = ["Q", "K", "V", "O"]
OUTPUTS = ["O"]
DEFAULT_CONSTS = dict(D=128, G=4, CAUSAL=0)

# Ragged N (the key mask and the clipped store), both head dims, causal and not, G = 4, 2 and 1.
CHECK_SIZES = [dict(B=1, H=4, N=100), dict(B=1, H=4, N=150), dict(B=2, H=2, N=70), dict(B=1, H=2, N=33)]
CHECK_CONSTS = [{}, {"CAUSAL": 1}, {"D": 64, "G": 2, "CAUSAL": 1}, {"D": 64, "G": 1}]
# Llama-style shapes: 16 query heads over 4 K/V heads (G = 4) and 32 over 8, head dim 128, causal and not.
_CASES = [(dict(B=16, H=16, N=4096), dict(G=4)), (dict(B=8, H=32, N=4096), dict(G=4)),
          (dict(B=16, H=16, N=2048), dict(G=8))]
BENCH_SIZES = [sz for sz, _ in _CASES for _causal in (0, 1)]
BENCH_CONSTS = [{**c, "CAUSAL": causal} for _, c in _CASES for causal in (0, 1)]
# SDPA with enable_gqa pinned to cuDNN, as attention_fwd.py's PEER (scripts/bench/attention_bwd.py timed cuDNN
# with enable_gqa at G = 8 on the H100: docs/bench/results/attention_gqa.json).
PEER = "SDPA (enable_gqa), cuDNN backend"
# Timed in the same run as PEER (tkc bench prints a ratio column for each): SDPA pinned to FlashAttention-2, and
# SDPA as a user calls it, its backend left to torch's dispatch.
EXTRA_PEERS = {"FA2": "FLASH_ATTENTION", "SDPA default": "default"}

# bf16 output; the kernel also rounds the probabilities to bf16 before P @ V (as attention_fwd.py).
TOLERANCE = 2e-2
MATMULS = 2  # Q K^T and P V: 2 * N * N * D flops each per (batch, head); causal does half


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    c = _consts(consts)
    B, H, N, D = sizes["B"], sizes["H"], sizes["N"], c["D"]
    shape, kv_shape = (B, H, N, D), (B, H // c["G"], N, D)
    bf16 = ml_dtypes.bfloat16
    # Unit-normal Q and K make the scaled scores N(0, 1): neither one-hot nor uniform rows.
    q, k, v = (rng.standard_normal(s, np.float32).astype(bf16) for s in (shape, kv_shape, kv_shape))
    return [q, k, v, np.full(shape, np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    q_all, k_all, v_all = (a.astype(np.float64) for a in inputs[:3])
    B, H, N, D = q_all.shape
    G = _consts(consts)["G"]
    masked = np.triu(np.ones((N, N), bool), k=1) if _consts(consts)["CAUSAL"] else None
    out = np.empty((B, H, N, D))
    for b in range(B):
        for h in range(H):
            s = q_all[b, h] @ k_all[b, h // G].T / np.sqrt(D)
            if masked is not None:
                s[masked] = -np.inf
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            out[b, h] = (p / p.sum(axis=-1, keepdims=True)) @ v_all[b, h // G]
    return {"O": out}


def flops(sizes: dict, consts: dict) -> int:
    c = _consts(consts)
    full = MATMULS * 2 * sizes["B"] * sizes["H"] * sizes["N"] ** 2 * c["D"]
    return full // 2 if c["CAUSAL"] else full


def bytes_moved(sizes: dict, consts: dict) -> int:
    c = _consts(consts)
    rows = sizes["B"] * sizes["H"] * sizes["N"]
    return 2 * (2 * rows + 2 * (rows // c["G"])) * c["D"]  # bf16: Q and K, V read, O written


# --- GPU hooks (tkc bench / GPU tests) -------------------------------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    c = _consts(consts)
    B, H, N, D = sizes["B"], sizes["H"], sizes["N"], c["D"]
    q = torch.randn(B, H, N, D, device="cuda").to(torch.bfloat16)
    k, v = (torch.randn(B, H // c["G"], N, D, device="cuda").to(torch.bfloat16) for _ in range(2))
    return [q, k, v, torch.full((B, H, N, D), float("nan"), device="cuda", dtype=torch.bfloat16)]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    """softmax(Q K^T / sqrt(D) [+ mask]) V in float32, K/V heads repeated G times, per batch and per block
    of query rows so the scores of N = 4096 fit in memory."""
    import torch

    q, k, v = inputs[:3]
    c = _consts(consts)
    B, H, N, D = q.shape
    out = torch.empty(B, H, N, D, device=q.device, dtype=torch.float32)
    rows = max(1, min(N, 2**31 // max(1, H * N * 4) // 4))  # about 0.5 GB of scores per block
    cols = torch.arange(N, device=q.device)
    for b in range(B):
        kb, vb = (t[b].float().repeat_interleave(c["G"], dim=0) for t in (k, v))
        for r0 in range(0, N, rows):
            qb = q[b, :, r0:r0 + rows].float()
            s = qb @ kb.transpose(-1, -2) / D ** 0.5
            if c["CAUSAL"]:
                qi = torch.arange(r0, r0 + qb.shape[1], device=q.device)
                s.masked_fill_(cols[None, :] > qi[:, None], float("-inf"))
            out[b, :, r0:r0 + rows] = torch.softmax(s, dim=-1) @ vb
            del s
    return {"O": out}


def peer(inputs: list, sizes: dict, consts: dict, backend: str = "CUDNN_ATTENTION"):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = inputs[:3]
    causal = bool(_consts(consts)["CAUSAL"])
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if backend == "default":
        return lambda: sdpa(q, k, v, is_causal=causal, enable_gqa=True)
    chosen = getattr(SDPBackend, backend)

    def run():
        with sdpa_kernel(chosen):
            return sdpa(q, k, v, is_causal=causal, enable_gqa=True)
    return run


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    """The peer named in EXTRA_PEERS: SDPA (enable_gqa) with that backend."""
    return peer(inputs, sizes, consts, backend=EXTRA_PEERS[name])
