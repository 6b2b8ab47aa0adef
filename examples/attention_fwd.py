"""Companion of attention_fwd.tk: O = softmax(Q K^T / sqrt(D) [+ causal mask]) V per (batch, head),
and L = logsumexp(Q K^T / sqrt(D) [+ mask]) per query row (natural log, float32).

Causal: key index > query index is masked out. Any sequence length N >= 1. With -D G (grouped-query
attention) K and V have H / G heads and query head h reads K/V head h // G.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "attention_fwd.tk"
PARAMS = ["Q", "K", "V", "O", "L"]
OUTPUTS = ["O", "L"]
# BQ and BKV are auto in attention_fwd.tk's header: callers that stop at the front end (tkir.api.build_module), which
# cannot choose them, pass these, the tile the header gave before.
DEFAULT_CONSTS = dict(BQ=64, BKV=64, D=128, CAUSAL=0, STAGES=2, PERSIST=0, G=1)

# N not a multiple of the tiles (the masks and clipped stores are exercised). Head dim 128
# non-causal, head dim 64 causal, and grouped-query attention (4 query heads to one K/V head).
CHECK_SIZES = [dict(B=1, H=2, N=300), dict(B=1, H=2, N=200), dict(B=1, H=4, N=70)]
CHECK_CONSTS = [{}, {"D": 64, "CAUSAL": 1}, {"D": 64, "CAUSAL": 1, "G": 4}]
# The attention bench's configurations, each causal and non-causal: D = 128 at B = H = 16 and five lengths, and
# (B, H, N, D) = (8, 16, 4096, 128), (16, 32, 2048, 64), (8, 16, 2048, 256).
# The header's defaults but D: BQ and BKV auto, the compiler picks the largest tile plan-occupancy's budget accepts
# (tkir.tools.auto_consts): BQ 128 x BKV 128 at D = 128, 192 x 128 at D = 64 (three consumer warpgroups), 128 x 64
# at D = 256 (K and V blocks of 64 rows: q + 2 stages fit in 227 KB).
_D128 = dict(D=128)
_D64 = dict(D=64)
_D256 = dict(D=256)
_CASES = ([(dict(B=16, H=16, N=n), _D128) for n in (768, 1536, 3072, 6144, 12288)]
          + [(dict(B=8, H=16, N=4096), _D128), (dict(B=16, H=32, N=2048), _D64), (dict(B=8, H=16, N=2048), _D256)])
BENCH_SIZES = [sz for sz, _ in _CASES for _causal in (0, 1)]
BENCH_CONSTS = [{**c, "CAUSAL": causal} for _, c in _CASES for causal in (0, 1)]
PEER = "SDPA, cuDNN backend"
# Timed in the same run as PEER (tkc bench prints a ratio column for each).
EXTRA_PEERS = {"FA2": "FLASH_ATTENTION"}

# bf16 output; the kernel also rounds the probabilities to bf16 before P @ V.
# O is bf16 (2e-2); L is f32, computed in f32 from the same scores: 4.5e-8 in the interpreter, and the
# GPU's ex2/lg2.approx add about 2^-22 relative, so a key let into or out of a row's softmax (a mask off
# by one: 1e-4 to 1e-3) fails it.
TOLERANCE = {"O": 2e-2, "L": 1e-5}
# Q K^T and P V: two matmuls of 2*N*N*D flops per (batch, head); causal does half the work.
MATMULS = 2


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    B, H, N, D = sizes["B"], sizes["H"], sizes["N"], _consts(consts)["D"]
    shape, kv_shape = (B, H, N, D), (B, H // _consts(consts)["G"], N, D)
    bf16 = ml_dtypes.bfloat16
    # Unit-normal Q and K make the scaled scores N(0, 1): neither one-hot nor uniform rows.
    q, k, v = (rng.standard_normal(s, np.float32).astype(bf16) for s in (shape, kv_shape, kv_shape))
    return [q, k, v, np.full(shape, np.nan, bf16), np.full((B, H, N), np.nan, np.float32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    """O and L in float64, one (batch, head) at a time: the scores of one head at N = 4097 are 134 MB
    (the GPU tests' largest case), those of all heads at once would be B * H times that."""
    q_all, k_all, v_all = inputs[:3]
    B, H, N, D = q_all.shape
    G = _consts(consts)["G"]
    masked = np.triu(np.ones((N, N), bool), k=1) if _consts(consts)["CAUSAL"] else None
    out_o, out_l = np.empty((B, H, N, D)), np.empty((B, H, N))
    for b in range(B):
        for h in range(H):
            k, v = (a[b, h // G] for a in (k_all, v_all))
            out_o[b, h], out_l[b, h] = head_attention(q_all[b, h], k, v, masked)
    return {"O": out_o, "L": out_l}


def head_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                   masked: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One head's O = softmax(q k^T / sqrt(D)) v and L = logsumexp of the scaled scores, in float64 ([N, D]
    arrays; `masked` [N, N] True where a score is -inf). examples/attention_fp8.py's reference too."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ k.T / np.sqrt(q.shape[-1])
    if masked is not None:
        s[masked] = -np.inf
    mx = s.max(axis=-1, keepdims=True)
    p = np.exp(s - mx)
    total = p.sum(axis=-1, keepdims=True)
    return (p / total) @ v, (mx + np.log(total))[:, 0]


def flops(sizes: dict, consts: dict) -> int:
    c = _consts(consts)
    full = MATMULS * 2 * sizes["B"] * sizes["H"] * sizes["N"] ** 2 * c["D"]
    return full // 2 if c["CAUSAL"] else full


def bytes_moved(sizes: dict, consts: dict) -> int:
    rows = sizes["B"] * sizes["H"] * sizes["N"]
    kv_rows = rows // _consts(consts)["G"]
    return 2 * (2 * rows + 2 * kv_rows) * _consts(consts)["D"] + 4 * rows  # Q, K, V read, O and L written


# --- GPU hooks (tkc bench / GPU tests) -------------------------------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    B, H, N, D = sizes["B"], sizes["H"], sizes["N"], _consts(consts)["D"]
    HKV = H // _consts(consts)["G"]
    q = torch.randn(B, H, N, D, device="cuda").to(torch.bfloat16)
    k, v = (torch.randn(B, HKV, N, D, device="cuda").to(torch.bfloat16) for _ in range(2))
    return [q, k, v, torch.full((B, H, N, D), float("nan"), device="cuda", dtype=torch.bfloat16),
            torch.full((B, H, N), float("nan"), device="cuda", dtype=torch.float32)]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    """O = softmax(s) V and L = logsumexp(s) in float32, s = Q K^T / sqrt(D) (+ causal mask): the
    definition SDPA's math backend computes, evaluated per batch and per block of query rows so the
    score matrix of N = 12288 fits in memory."""
    import torch

    q, k, v = inputs[:3]
    causal = bool(_consts(consts)["CAUSAL"])
    B, H, N, D = q.shape
    out_o = torch.empty(B, H, N, D, device=q.device, dtype=torch.float32)
    out_l = torch.empty(B, H, N, device=q.device, dtype=torch.float32)
    rows = max(1, min(N, 2**31 // max(1, H * N * 4) // 4))  # about 0.5 GB of scores per block
    cols = torch.arange(N, device=q.device)
    G = _consts(consts)["G"]
    for b in range(B):
        kb, vb = (t[b].float().repeat_interleave(G, dim=0) for t in (k, v))
        for r0 in range(0, N, rows):
            qb = q[b, :, r0:r0 + rows].float()
            s = qb @ kb.transpose(-1, -2) / D ** 0.5
            if causal:
                qi = torch.arange(r0, r0 + qb.shape[1], device=q.device)
                s.masked_fill_(cols[None, :] > qi[:, None], float("-inf"))
            out_l[b, :, r0:r0 + rows] = torch.logsumexp(s, dim=-1)
            out_o[b, :, r0:r0 + rows] = torch.softmax(s, dim=-1) @ vb
            del s
    return {"O": out_o, "L": out_l}


def peer(inputs: list, sizes: dict, consts: dict, backend: str = "CUDNN_ATTENTION"):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = inputs[:3]
    causal = bool(_consts(consts)["CAUSAL"])
    chosen = getattr(SDPBackend, backend)

    gqa = {"enable_gqa": True} if _consts(consts)["G"] > 1 else {}

    def run():
        with sdpa_kernel(chosen):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
    return run


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    """The peer named in EXTRA_PEERS: SDPA with that backend."""
    return peer(inputs, sizes, consts, backend=EXTRA_PEERS[name])
