"""Companion of attention_bwd_dkdv.tk: dK and dV of attention, O = softmax(Q K^T / sqrt(D) [+ causal mask]) V,
given dO, L (each query row's natural log-sum-exp of the scaled scores) and Delta = rowsum(dO * O), in float64.
L, O and Delta come from the float64 forward (attention_bwd_prep.py's `problem`). With -D G (grouped-query
attention) K, V, dK, dV have H / G heads, and dK, dV of a K/V head sum over its G query heads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

KERNEL = "attention_bwd_dkdv.tk"
PARAMS = ["Q", "K", "V", "DO", "L", "DELTA", "DK", "DV"]
OUTPUTS = ["DK", "DV"]
DEFAULT_CONSTS = dict(BQ=64, BKV=64, D=64, CAUSAL=0, STAGES=2, G=1)

# Ragged N (TMA's zero fill, the clipped stores, the causal loop's first query block), causal and not, both
# head dims (D = 128 with 32-row query blocks, the register budget's choice). (N = 1 is no relative check: one
# key gets P = 1 whatever the score, so dK is 0 in exact arithmetic; tests/ir/test_attention_bwd.py checks it
# there against an absolute bound.)
# Grouped-query attention at G = 4, causal, ragged: the one loop over (query head, query block) pairs.
CHECK_SIZES = [dict(B=1, H=2, N=200), dict(B=1, H=1, N=65), dict(B=1, H=1, N=127), dict(B=2, H=1, N=63),
               dict(B=1, H=4, N=100)]
CHECK_CONSTS = [{}, {"CAUSAL": 1}, {"D": 128, "BQ": 32, "CAUSAL": 1}, {"D": 128, "BQ": 32}, {"CAUSAL": 1, "G": 4}]
BENCH_SIZES = [dict(B=16, H=16, N=4096), dict(B=16, H=16, N=4096)]
BENCH_CONSTS = [{"D": 128, "BQ": "auto"}, {"D": 128, "BQ": "auto", "CAUSAL": 1}]
PEER = "SDPA's whole backward (cuDNN), of which this kernel is a part"

# bf16 outputs from bf16 products of P and dS.
TOLERANCE = {"DK": 2e-2, "DV": 2e-2}


def _prep():  # noqa: ANN202 - a companion module
    path = Path(__file__).with_name("attention_bwd_prep.py")
    spec = importlib.util.spec_from_file_location("attention_bwd_prep_companion", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_PREP = _prep()


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    """Q, K, V, dO unit normal (bf16); L and Delta those of the float64 forward (float32); dK, dV poisoned."""
    c = _consts(consts)
    p = _PREP.problem(rng, sizes, c["D"], bool(c["CAUSAL"]), c["G"])
    poison = np.full(p["K"].shape, np.nan, p["K"].dtype)
    return [p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], poison, poison.copy()]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    g = _PREP.backward64(*inputs[:6], causal=bool(_consts(consts)["CAUSAL"]))
    return {"DK": g["DK"], "DV": g["DV"]}


def flops(sizes: dict, consts: dict) -> int:
    """Four matmuls of 2 N^2 D per (batch, head) (S^T, dV, dP^T, dK); causal does half."""
    c = _consts(consts)
    full = 4 * 2 * sizes["B"] * sizes["H"] * sizes["N"] ** 2 * c["D"]
    return full // 2 if c["CAUSAL"] else full


def bytes_moved(sizes: dict, consts: dict) -> int:
    rows = sizes["B"] * sizes["H"] * sizes["N"]
    kv_rows = rows // _consts(consts)["G"]
    # Q, dO (and L, Delta) read; K, V read and dK, dV written, per K/V head
    return 2 * (2 * rows + 4 * kv_rows) * _consts(consts)["D"] + 4 * 2 * rows


# --- GPU hooks (tkc bench): the numpy inputs copied to the GPU ------------------------------------------

def peer(inputs: list, sizes: dict, consts: dict):
    """SDPA's whole backward with the cuDNN backend (dQ, dK and dV), for scale: this kernel is two thirds
    of the tkir backward's work (scripts/bench/attention_bwd.py times the whole of both)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, do = (t.detach().clone().requires_grad_(True) if i < 3 else t for i, t in enumerate(inputs[:4]))
    causal = bool(_consts(consts)["CAUSAL"])
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                             enable_gqa=_consts(consts)["G"] > 1)

    def run():
        return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    return run
