"""Companion of sliding_window_attention.tk: causal sliding-window attention forward per (batch, head), query i
attending to keys j with i - WINDOW < j <= i (Mistral's sliding window): O = softmax(Q K^T / sqrt(D) + mask) V.
Any N >= 1."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "sliding_window_attention.tk"
PARAMS = ["Q", "K", "V", "O"]
OUTPUTS = ["O"]
DEFAULT_CONSTS = dict(D=128, WINDOW=1024)

# Ragged N; windows narrower than a key block (whole key blocks before a row's window), not a multiple of
# it, of one key (each query sees itself), and wider than N (plain causal attention).
CHECK_SIZES = [dict(B=1, H=2, N=150), dict(B=1, H=2, N=200), dict(B=2, H=1, N=100), dict(B=1, H=2, N=70)]
CHECK_CONSTS = [{"WINDOW": 40}, {"D": 64, "WINDOW": 100}, {"D": 64, "WINDOW": 1}, {"WINDOW": 1024}]
# Mistral-7B's window (4096) at N = 8192 and 16384, and a 1024 window at N = 4096; head dim 128.
BENCH_SIZES = [dict(B=16, H=16, N=4096), dict(B=4, H=32, N=8192), dict(B=2, H=32, N=16384)]
BENCH_CONSTS = [{"WINDOW": 1024}, {"WINDOW": 4096}, {"WINDOW": 4096}]
# What a user reaches for: FlexAttention (torch.compile'd) with a sliding-window block mask, which skips the
# key blocks outside every window, as the kernel does.
PEER = "flex_attention (compiled), sliding-window block mask"
# Timed in the same run as PEER: SDPA with the same mask as a boolean tensor (torch's default backend).
EXTRA_PEERS = {"SDPA + bool mask": "sdpa"}

# bf16 output; the kernel also rounds the probabilities to bf16 before P @ V (as attention_fwd.py).
TOLERANCE = 2e-2


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def visible(n: int, window: int) -> np.ndarray:
    """[n, n] bool: key j is inside query i's window (i - window < j <= i)."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return (j <= i) & (j > i - window)


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    B, H, N, D = sizes["B"], sizes["H"], sizes["N"], _consts(consts)["D"]
    bf16 = ml_dtypes.bfloat16
    # Unit-normal Q and K make the scaled scores N(0, 1): neither one-hot nor uniform rows.
    q, k, v = (rng.standard_normal((B, H, N, D), np.float32).astype(bf16) for _ in range(3))
    return [q, k, v, np.full((B, H, N, D), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    q_all, k_all, v_all = (a.astype(np.float64) for a in inputs[:3])
    B, H, N, D = q_all.shape
    hidden = ~visible(N, _consts(consts)["WINDOW"])
    out = np.empty((B, H, N, D))
    for b in range(B):
        for h in range(H):
            s = q_all[b, h] @ k_all[b, h].T / np.sqrt(D)
            s[hidden] = -np.inf
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            out[b, h] = (p / p.sum(axis=-1, keepdims=True)) @ v_all[b, h]
    return {"O": out}


def flops(sizes: dict, consts: dict) -> int:
    """Two matmuls of 2 * D flops per visible (query, key) pair, per (batch, head)."""
    N, W = sizes["N"], _consts(consts)["WINDOW"]
    w = min(W, N)
    pairs = w * (w + 1) // 2 + (N - w) * w  # rows before the window fills, then W keys each
    return 2 * 2 * sizes["B"] * sizes["H"] * pairs * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 2 * 4 * sizes["B"] * sizes["H"] * sizes["N"] * _consts(consts)["D"]  # bf16: Q, K, V read, O written


# --- GPU hooks (tkc bench / GPU tests) -------------------------------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    B, H, N, D = sizes["B"], sizes["H"], sizes["N"], _consts(consts)["D"]
    q, k, v = (torch.randn(B, H, N, D, device="cuda").to(torch.bfloat16) for _ in range(3))
    return [q, k, v, torch.full((B, H, N, D), float("nan"), device="cuda", dtype=torch.bfloat16)]


def _mask(n: int, window: int, device):
    import torch

    i, j = torch.arange(n, device=device)[:, None], torch.arange(n, device=device)[None, :]
    return (j <= i) & (j > i - window)


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    """softmax(Q K^T / sqrt(D) + mask) V in float32, per batch and per block of query rows so the scores of
    N = 16384 fit in memory."""
    import torch

    q, k, v = inputs[:3]
    B, H, N, D = q.shape
    window = _consts(consts)["WINDOW"]
    out = torch.empty(B, H, N, D, device=q.device, dtype=torch.float32)
    rows = max(1, min(N, 2**31 // max(1, H * N * 4) // 4))  # about 0.5 GB of scores per block
    cols = torch.arange(N, device=q.device)
    for b in range(B):
        kb, vb = k[b].float(), v[b].float()
        for r0 in range(0, N, rows):
            qb = q[b, :, r0:r0 + rows].float()
            s = qb @ kb.transpose(-1, -2) / D ** 0.5
            qi = torch.arange(r0, r0 + qb.shape[1], device=q.device)[:, None]
            s.masked_fill_((cols[None, :] > qi) | (cols[None, :] <= qi - window), float("-inf"))
            out[b, :, r0:r0 + rows] = torch.softmax(s, dim=-1) @ vb
            del s
    return {"O": out}


_FLEX = {}


def peer(inputs: list, sizes: dict, consts: dict):
    """flex_attention under torch.compile with a block mask made once (not timed), as FlexAttention's
    documentation writes sliding-window attention."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v = inputs[:3]
    N, window = q.shape[2], _consts(consts)["WINDOW"]

    def sliding_window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < window)

    block_mask = create_block_mask(sliding_window, None, None, N, N, device=q.device)
    if "flex" not in _FLEX:
        _FLEX["flex"] = torch.compile(flex_attention)
    flex = _FLEX["flex"]
    return lambda: flex(q, k, v, block_mask=block_mask)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    """EXTRA_PEERS: SDPA with the window as a boolean mask ([N, N], broadcast over batch and heads)."""
    import torch

    q, k, v = inputs[:3]
    mask = _mask(q.shape[2], _consts(consts)["WINDOW"], q.device)
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
