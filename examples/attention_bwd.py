"""Companion of attention_bwd.tk: dK, dV and the f32 dQ^T workspace of attention, O = softmax(Q K^T / sqrt(D)
[+ causal mask]) V, given dO, L (each query row's natural log-sum-exp of the scaled scores) and Delta =
rowsum(dO * O), in float64. L, O and Delta come from the float64 forward (attention_bwd_prep.py's `problem`).
DQACC is the transposed workspace [B, H, D, NP] (NP = N rounded up to 4), zero on entry: the kernel adds
dQ^T / scale into it (attention_bwd_dq_convert.tk scales and transposes it into dQ). With -D G (grouped-query
attention) K, V, dK, dV have H / G heads, and dK, dV of a K/V head sum over its G query heads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

KERNEL = "attention_bwd.tk"
PARAMS = ["Q", "K", "V", "DO", "L", "DELTA", "DQACC", "DK", "DV"]
OUTPUTS = ["DQACC", "DK", "DV"]
DEFAULT_CONSTS = dict(BQ=64, BKV=128, WG=2, D=128, CAUSAL=0, STAGES=2, G=1)  # the tiles auto chooses at D = 128
D64 = dict(D=64, BQ=64, BKV=64, WG=1)  # the tiles BQ=auto, BKV=auto, WG=auto choose at D = 64

# Ragged N (TMA's zero fill, the clipped stores, the causal loop's first query block), causal and not, both
# head dims at the tiles the register budget chooses, grouped-query attention at G = 4, causal, ragged.
CHECK_SIZES = [dict(B=1, H=2, N=200), dict(B=1, H=1, N=65), dict(B=2, H=1, N=127), dict(B=1, H=1, N=63),
               dict(B=1, H=4, N=100)]
CHECK_CONSTS = [{}, {"CAUSAL": 1}, {**D64, "CAUSAL": 1}, D64, {"CAUSAL": 1, "G": 4}]
BENCH_SIZES = [dict(B=16, H=16, N=4096), dict(B=16, H=16, N=4096)]
BENCH_CONSTS = [{}, {"CAUSAL": 1}]
PEER = "SDPA's whole backward (cuDNN), of which this kernel is nearly all"

# bf16 dK, dV from bf16 products of P and dS; the f32 workspace sums bf16 products of dS and K.
TOLERANCE = {"DQACC": 2e-2, "DK": 2e-2, "DV": 2e-2}


def _prep():  # noqa: ANN202 - a companion module
    path = Path(__file__).with_name("attention_bwd_prep.py")
    spec = importlib.util.spec_from_file_location("attention_bwd_prep_companion", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_PREP = _prep()


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def workspace_cols(n: int) -> int:
    """NP, the workspace's columns: N rounded up to 4 (TMA wants rows of a multiple of 16 bytes)."""
    return -(-n // 4) * 4


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    """Q, K, V, dO unit normal (bf16); L and Delta those of the float64 forward (float32); DQACC zero (the
    kernel adds into it); dK, dV poisoned."""
    c = _consts(consts)
    p = _PREP.problem(rng, sizes, c["D"], bool(c["CAUSAL"]), c["G"])
    acc = np.zeros((sizes["B"], sizes["H"], c["D"], workspace_cols(sizes["N"])), np.float32)
    poison = np.full(p["K"].shape, np.nan, p["K"].dtype)
    return [p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], acc, poison, poison.copy()]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    c = _consts(consts)
    g = _PREP.backward64(*inputs[:6], causal=bool(c["CAUSAL"]))
    n = sizes["N"]
    acc = np.zeros((sizes["B"], sizes["H"], c["D"], workspace_cols(n)))
    acc[..., :n] = np.swapaxes(g["DQ"], -1, -2) * np.sqrt(c["D"])  # the workspace holds dQ^T / scale
    return {"DQACC": acc, "DK": g["DK"], "DV": g["DV"]}


def torch_inputs(sizes: dict, consts: dict) -> list:
    """make_inputs on the GPU (attention_bwd_prep.py's `torch_problem`: the f32 forward's L and Delta)."""
    import torch

    c = _consts(consts)
    p = _PREP.torch_problem(sizes, c["D"], bool(c["CAUSAL"]), c["G"])
    acc = torch.zeros(sizes["B"], sizes["H"], c["D"], workspace_cols(sizes["N"]), device="cuda")
    poison = torch.full_like(p["K"], float("nan"))
    return [p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], acc, poison, poison.clone()]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    """reference in f32 on the GPU (attention_bwd_prep.py's `torch_backward`)."""
    import torch

    c = _consts(consts)
    g = _PREP.torch_backward(*inputs[:6], causal=bool(c["CAUSAL"]))
    n = sizes["N"]
    acc = torch.zeros(sizes["B"], sizes["H"], c["D"], workspace_cols(n), device=g["DQ"].device)
    acc[..., :n] = g["DQ"].transpose(-1, -2) * c["D"] ** 0.5
    return {"DQACC": acc, "DK": g["DK"], "DV": g["DV"]}


def flops(sizes: dict, consts: dict) -> int:
    """Five matmuls of 2 N^2 D per (batch, head) (S^T, dV, dP^T, dK, dQ^T); causal does half."""
    c = _consts(consts)
    full = 5 * 2 * sizes["B"] * sizes["H"] * sizes["N"] ** 2 * c["D"]
    return full // 2 if c["CAUSAL"] else full


def bytes_moved(sizes: dict, consts: dict) -> int:
    c = _consts(consts)
    rows = sizes["B"] * sizes["H"] * sizes["N"]
    kv_rows = rows // c["G"]
    # Q, dO read (and L, Delta); K, V read and dK, dV written per K/V head; the f32 workspace added per key block
    adds = rows * c["D"] * 4 * max(1, -(-sizes["N"] // c["BKV"]) // (2 if c["CAUSAL"] else 1))
    return 2 * (2 * rows + 4 * kv_rows) * c["D"] + 4 * 2 * rows + adds


# --- GPU hooks (tkc bench): the numpy inputs copied to the GPU ------------------------------------------

def peer(inputs: list, sizes: dict, consts: dict):
    """SDPA's whole backward with the cuDNN backend (dQ, dK and dV), for scale: this kernel is all of the tkir
    backward's matmuls (scripts/bench/attention_bwd.py times the whole of both)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, do = (t.detach().clone().requires_grad_(True) if i < 3 else t for i, t in enumerate(inputs[:4]))
    c = _consts(consts)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(c["CAUSAL"]),
                                                             enable_gqa=c["G"] > 1)

    def run():
        return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    return run
