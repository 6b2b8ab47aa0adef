"""Companion of attention_dkdv.tk: dK and dV of non-causal attention, O = softmax(Q K^T / sqrt(D)) V, given
dO, L (each query row's natural log-sum-exp of the scaled scores) and Delta = rowsum(dO * O), in float64."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "attention_dkdv.tk"
PARAMS = ["Q", "K", "V", "DO", "L", "DELTA", "DK", "DV"]
OUTPUTS = ["DK", "DV"]
DEFAULT_CONSTS = dict(BQ=64, BKV=64, D=64, STAGES=2)
# bf16 outputs from bf16 products of P and dS.
TOLERANCE = {"DK": 2e-2, "DV": 2e-2}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    """Q, K, V, dO unit normal (bf16); L and Delta those of the forward (float32); dK, dV poisoned."""
    B, H, N = sizes["B"], sizes["H"], sizes["N"]
    D = {**DEFAULT_CONSTS, **consts}["D"]
    bf16 = ml_dtypes.bfloat16
    q, k, v, do = (rng.standard_normal((B, H, N, D), np.float32).astype(bf16) for _ in range(4))
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(D)
    mx = s.max(-1, keepdims=True)
    p = np.exp(s - mx)
    lse = (mx + np.log(p.sum(-1, keepdims=True)))[..., 0]
    o = np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    delta = (do.astype(np.float64) * o).sum(-1)
    poison = np.full((B, H, N, D), np.nan, bf16)
    return [q, k, v, do, lse.astype(np.float32), delta.astype(np.float32), poison, poison.copy()]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    q, k, v, do = (a.astype(np.float64) for a in inputs[:4])
    lse, delta = (a.astype(np.float64) for a in inputs[4:6])
    D = q.shape[-1]
    scale = 1.0 / np.sqrt(D)
    p = np.exp(np.einsum("bhqd,bhkd->bhqk", q, k) * scale - lse[..., None])
    dv = np.einsum("bhqk,bhqd->bhkd", p, do)
    dp = np.einsum("bhqd,bhkd->bhqk", do, v)
    ds = p * (dp - delta[..., None])
    dk = np.einsum("bhqk,bhqd->bhkd", ds, q) * scale
    return {"DK": dk, "DV": dv}
