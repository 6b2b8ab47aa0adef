"""Companion of user/swiglu.tk: H = silu(X @ W1) * (X @ W3), a SwiGLU up-projection, bf16 in and out.

The reference is float64 on the bf16 inputs.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

KERNEL = "swiglu.tk"
PARAMS = ["X", "W1", "W3", "H"]
OUTPUTS = ["H"]

# Whole 128 x 128 tiles of H; then T past a tile and DM past a 64-wide slice of d; then F ragged too (the
# compiled kernel masks H's ragged column edge).
CHECK_SIZES = [dict(T=256, DM=128, F=256), dict(T=200, DM=160, F=256), dict(T=200, DM=160, F=328)]
CHECK_CONSTS = [{}] * 3
# Llama-3-8B's MLP (d = 4096, ffn = 14336) at 4096 and 16384 tokens.
BENCH_SIZES = [dict(T=4096, DM=4096, F=14336), dict(T=16384, DM=4096, F=14336)]
BENCH_CONSTS = [{}, {}]
PEER = "torch.nn.functional.silu(x @ w1) * (x @ w3)"

# bf16 output: a relative rounding error of 2^-9 per element, products accumulated in f32 (as linear.py).
TOLERANCE = 2e-2


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    """W1 and W3 scaled by 1/sqrt(d), as nn.Linear's init: gate values of order 1, where silu is far from
    linear (at order sqrt(d) it would be ReLU-like and hide mistakes)."""
    T, DM, F = sizes["T"], sizes["DM"], sizes["F"]
    bf16 = ml_dtypes.bfloat16
    x = rng.standard_normal((T, DM), np.float32).astype(bf16)
    w1 = (rng.standard_normal((DM, F), np.float32) / math.sqrt(DM)).astype(bf16)
    w3 = (rng.standard_normal((DM, F), np.float32) / math.sqrt(DM)).astype(bf16)
    return [x, w1, w3, np.full((T, F), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, w1, w3, _ = (a.astype(np.float64) for a in inputs)
    gate = x @ w1
    return {"H": gate / (1.0 + np.exp(-gate)) * (x @ w3)}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * 2 * sizes["T"] * sizes["DM"] * sizes["F"]  # two GEMMs; the epilogue's T*F work is not counted


def bytes_moved(sizes: dict, consts: dict) -> int:
    T, DM, F = sizes["T"], sizes["DM"], sizes["F"]
    return 2 * (T * DM + 2 * DM * F + T * F)  # bf16: 2 bytes


# --- GPU hooks (tkc bench / tkc run): torch tensors on the GPU -------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    T, DM, F = sizes["T"], sizes["DM"], sizes["F"]
    x = torch.randn(T, DM, device="cuda").to(torch.bfloat16)
    w1 = (torch.randn(DM, F, device="cuda") / math.sqrt(DM)).to(torch.bfloat16)
    w3 = (torch.randn(DM, F, device="cuda") / math.sqrt(DM)).to(torch.bfloat16)
    h = torch.full((T, F), float("nan"), device="cuda", dtype=torch.bfloat16)
    return [x, w1, w3, h]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    import torch

    x, w1, w3, _ = inputs
    gate = x.float() @ w1.float()  # f32 products of the bf16 inputs (TF32 off by default)
    return {"H": torch.nn.functional.silu(gate) * (x.float() @ w3.float())}


def _math(x, w1, w3):
    import torch

    return torch.nn.functional.silu(x @ w1) * (x @ w3)


def peer(inputs: list, sizes: dict, consts: dict):
    x, w1, w3, _ = inputs
    return lambda: _math(x, w1, w3)  # two cuBLAS GEMMs, then silu and the product (eager: three more kernels)


# Timed in the same run as PEER: the same math through torch.compile (Inductor), which fuses the epilogue.
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    x, w1, w3, _ = inputs
    f = inductor(_math)
    return lambda: f(x, w1, w3)
