"""Companion of user/layernorm_bwd.tk: the gradients DX (bf16), DW and DB (f32, added into by every block) of
y = (x - mean) * rstd * W + Bias given dy, math in f32 (torch.nn.functional.layer_norm's backward)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "layernorm_bwd.tk"
PARAMS = ["X", "W", "DY", "DX", "DW", "DB"]
OUTPUTS = ["DX", "DW", "DB"]
DEFAULT_CONSTS = dict(D=4096, EPS=1e-5)

# One row and a few at the default width, then a narrower width (GPT-2's 768).
CHECK_SIZES = [dict(N=1), dict(N=7), dict(N=9)]
CHECK_CONSTS = [{}, {}, {"D": 768}]
# The width, D = 4096, at 4096 to 16384 rows.
BENCH_SIZES = [dict(N=4096), dict(N=8192), dict(N=16384)]
BENCH_CONSTS = [{}, {}, {}]
PEER = "torch.autograd.grad of torch.nn.functional.layer_norm (eager)"

# DX is bf16 (2^-8 relative rounding); DW and DB are f32 sums over the rows in an order the atomics pick.
TOLERANCE = {"DX": 1e-2, "DW": 1e-4, "DB": 1e-4}
# Per element: mean and variance (add; sub, square, add), x_hat (sub, mul), g = dy * W, sum g, g * x_hat and
# add, the DX update (two subs, two muls), dy * x_hat and dy added into DW and DB.
FLOPS_PER_ELEMENT = 16


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    """An offset mean and a scale per row, so that a kernel that forgets to centre, or uses another row's
    statistics, fails. DW and DB start at zero: the kernel adds into them."""
    N, D = sizes["N"], _consts(consts)["D"]
    bf16 = ml_dtypes.bfloat16
    x = (rng.standard_normal((N, D), np.float32) * np.exp(rng.standard_normal((N, 1), np.float32))
         + rng.standard_normal((N, 1), np.float32)).astype(bf16)
    w = rng.standard_normal(D, np.float32).astype(bf16)
    dy = rng.standard_normal((N, D), np.float32).astype(bf16)
    return [x, w, dy, np.full((N, D), np.nan, bf16), np.zeros(D, np.float32), np.zeros(D, np.float32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, w, dy = (a.astype(np.float64) for a in inputs[:3])
    c = _consts(consts)
    xc = x - x.mean(axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + c["EPS"])
    xhat = xc * rstd
    g = dy * w
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    return {"DX": dx, "DW": (dy * xhat).sum(axis=0), "DB": dy.sum(axis=0)}


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["N"] * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    N, D = sizes["N"], _consts(consts)["D"]
    return 2 * 3 * N * D + 2 * D + 2 * 4 * D  # X, DY read and DX written (bf16), W read, DW and DB once (f32)


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    """torch's eager backward: the forward runs here, outside the timed call, which computes dX, dW and dB."""
    import torch

    x, w, dy = (a.detach().requires_grad_(i < 2) for i, a in enumerate(inputs[:3]))
    b = torch.zeros_like(w, requires_grad=True)
    y = torch.nn.functional.layer_norm(x, (x.shape[1],), w, b, eps=_consts(consts)["EPS"])
    return lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)


# Timed in the same run as PEER: the explicit backward formula through torch.compile (Inductor).
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the explicit backward formula, f32 math"}


def _math(x, w, dy, eps: float):
    xf, dyf = x.float(), dy.float()
    mean = xf.mean(dim=1, keepdim=True)
    xc = xf - mean
    rstd = (xc.pow(2).mean(dim=1, keepdim=True) + eps).rsqrt()
    xhat = xc * rstd
    g = dyf * w.float()
    dx = rstd * (g - g.mean(dim=1, keepdim=True) - xhat * (g * xhat).mean(dim=1, keepdim=True))
    return dx.to(x.dtype), (dyf * xhat).sum(dim=0), dyf.sum(dim=0)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    x, w, dy = inputs[:3]
    eps = _consts(consts)["EPS"]
    f = inductor(_math)
    return lambda: f(x, w, dy, eps)
