"""Companion of attention_bwd_dq.tk: dQ of attention, O = softmax(Q K^T / sqrt(D) [+ causal mask]) V, given
dO, L (each query row's natural log-sum-exp of the scaled scores) and Delta = rowsum(dO * O), in float64.
L, O and Delta come from the float64 forward (attention_bwd_prep.py's `problem`). With -D G (grouped-query
attention) K and V have H / G heads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

KERNEL = "attention_bwd_dq.tk"
PARAMS = ["Q", "K", "V", "DO", "L", "DELTA", "DQ"]
OUTPUTS = ["DQ"]
DEFAULT_CONSTS = dict(BQ=64, BKV=64, D=64, CAUSAL=0, STAGES=2, G=1)

# Ragged N (TMA's zero fill, keys past N masked, the clipped store), causal and not, the three head dims.
# (N = 1 is no relative check: one key gets P = 1 whatever the score, so dQ and dK are 0 in exact arithmetic;
# tests/ir/test_attention_bwd.py checks them there against an absolute bound.)
# Grouped-query attention at G = 2 (query heads 0, 1 read K/V head 0; 2, 3 read head 1).
CHECK_SIZES = [dict(B=1, H=2, N=200), dict(B=1, H=1, N=65), dict(B=1, H=1, N=127), dict(B=2, H=1, N=63),
               dict(B=1, H=1, N=100), dict(B=1, H=4, N=70)]
CHECK_CONSTS = [{}, {"CAUSAL": 1}, {"D": 128, "CAUSAL": 1}, {"D": 128}, {"D": 256, "CAUSAL": 1}, {"G": 2}]
BENCH_SIZES = [dict(B=16, H=16, N=4096), dict(B=16, H=16, N=4096)]
BENCH_CONSTS = [{"D": 128}, {"D": 128, "CAUSAL": 1}]
PEER = "SDPA's whole backward (cuDNN), of which this kernel is a part"

# bf16 output from bf16 products of dS.
TOLERANCE = {"DQ": 2e-2}


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
    """Q, K, V, dO unit normal (bf16); L and Delta those of the float64 forward (float32); dQ poisoned."""
    c = _consts(consts)
    p = _PREP.problem(rng, sizes, c["D"], bool(c["CAUSAL"]), c["G"])
    return [p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], np.full(p["Q"].shape, np.nan, p["Q"].dtype)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    return {"DQ": _PREP.backward64(*inputs[:6], causal=bool(_consts(consts)["CAUSAL"]))["DQ"]}


def flops(sizes: dict, consts: dict) -> int:
    """Three matmuls of 2 N^2 D per (batch, head) (S, dP, dQ); causal does half."""
    c = _consts(consts)
    full = 3 * 2 * sizes["B"] * sizes["H"] * sizes["N"] ** 2 * c["D"]
    return full // 2 if c["CAUSAL"] else full


def bytes_moved(sizes: dict, consts: dict) -> int:
    rows = sizes["B"] * sizes["H"] * sizes["N"]
    kv_rows = rows // _consts(consts)["G"]
    return 2 * (3 * rows + 2 * kv_rows) * _consts(consts)["D"] + 4 * 2 * rows  # Q, K, V, dO read, dQ written; L, Delta


# --- GPU hooks (tkc bench): the numpy inputs copied to the GPU ------------------------------------------

def peer(inputs: list, sizes: dict, consts: dict):
    """SDPA's whole backward with the cuDNN backend (dQ, dK and dV), for scale: this kernel is a third of the
    tkir backward's matmuls (scripts/bench/attention_bwd.py times the whole of both)."""
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
