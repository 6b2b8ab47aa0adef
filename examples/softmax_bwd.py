"""Companion of softmax_bwd.tk: DX = Y * (DY - rowsum(DY * Y)), the backward of softmax.tk (f32 math, bf16 out).

Y is the forward's output (a softmax of random logits, rounded to bf16 as softmax.tk stores it); DY
the gradient of Y. The reference is float64 on the bf16 inputs.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "softmax_bwd.tk"
PARAMS = ["Y", "DY", "DX"]
OUTPUTS = ["DX"]
DEFAULT_CONSTS = dict(ROWS=8, D=1024, DC=1024)

# Ragged N (not a multiple of ROWS = 8: the last block's rows past N read as zero and are not
# stored), one row, the chunked path (D > DC: three chunks of 512), and 768-wide rows (a multiple of
# 16 but not a power of two) in one block of one row.
CHECK_SIZES = [dict(N=100), dict(N=1), dict(N=37), dict(N=21)]
CHECK_CONSTS = [{}, {"D": 512}, {"D": 1536, "DC": 512}, {"D": 768, "ROWS": 1, "WG": 1}]
# The backward's two bar sizes, 4096 x 4096 and 65536 x 768 (>= 1.0x eager torch), at softmax.tk's tuned points for the
# same shapes (docs/bench/results/sweep/sweep.md); then softmax.py's default 16384 x 1024.
BENCH_SIZES = [dict(N=4096), dict(N=65536), dict(N=16384)]
BENCH_CONSTS = [{"D": 4096, "DC": 4096, "ROWS": 1, "WG": 1}, {"D": 768, "DC": 1024, "ROWS": 4, "WG": 2, "FENCE": 1}, {}]
PEER = "torch._softmax_backward_data"

# bf16 output: a relative rounding error of 2^-9 per element; the row sum is f32 over at most 16384
# products (f32 rounding ~1e-7 each), far below it.
TOLERANCE = 2e-2
# Per element: DY * Y, its sum, DY - s, times Y.
FLOPS_PER_ELEMENT = 4


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    N, D = sizes["N"], _consts(consts)["D"]
    bf16 = ml_dtypes.bfloat16
    # logits of scale 2: rows with a few large probabilities and many small ones, as a trained
    # model's attention or classifier rows; Y the forward's bf16 output
    x = 2.0 * rng.standard_normal((N, D))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    y = (e / e.sum(axis=1, keepdims=True)).astype(bf16)
    dy = rng.standard_normal((N, D), np.float32).astype(bf16)
    return [y, dy, np.full((N, D), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    y, dy, _ = (a.astype(np.float64) for a in inputs)
    return {"DX": y * (dy - (dy * y).sum(axis=1, keepdims=True))}


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["N"] * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 3 * 2 * sizes["N"] * _consts(consts)["D"]  # Y, DY read, DX written; bf16


# --- GPU hooks (tkc bench / tkc run): torch tensors on the GPU -------------------------------------
MEMORY_BOUND = True


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    N, D = sizes["N"], _consts(consts)["D"]
    y = torch.softmax(2.0 * torch.randn(N, D, device="cuda"), dim=1).to(torch.bfloat16)
    dy = torch.randn(N, D, device="cuda").to(torch.bfloat16)
    dx = torch.full((N, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    return [y, dy, dx]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    y, dy, _ = (t.double() for t in inputs)
    return {"DX": y * (dy - (dy * y).sum(dim=1, keepdim=True))}


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    y, dy, _ = inputs
    # what autograd runs for torch.softmax(x, dim=1) of a bf16 x: f32 math inside, bf16 out
    return lambda: torch._softmax_backward_data(dy, y, 1, torch.bfloat16)


# Timed in the same run as PEER: the same math through torch.compile (Inductor), which fuses it.
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the backward's math"}


def _math(y, dy):
    import torch

    yf, dyf = y.float(), dy.float()
    return (yf * (dyf - (dyf * yf).sum(dim=1, keepdim=True))).to(torch.bfloat16)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    y, dy, _ = inputs
    f = inductor(_math)
    return lambda: f(y, dy)
