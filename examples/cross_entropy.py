"""Companion of cross_entropy.tk: Loss[n] = logsumexp(X[n, :]) - X[n, Labels[n]] (0 where the label is -100)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "cross_entropy.tk"
PARAMS = ["X", "Labels", "Loss"]
OUTPUTS = ["Loss"]
DEFAULT_CONSTS = dict(ROWS=1, VC=4096, IGNORE=-100)

# Rows of three chunks with a ragged tail (V = 600 over VC = 256), a row in one chunk, several rows a block.
CHECK_SIZES = [dict(N=7, V=600), dict(N=16, V=256), dict(N=5, V=1000)]
CHECK_CONSTS = [{"VC": 256, "WG": 1}, {"VC": 256, "ROWS": 4, "WG": 1}, {"VC": 512, "ROWS": 2, "WG": 2}]
# LLM vocabularies (Llama 2: 32000, Llama 3: 128256) at 4096 and 16384 rows.
BENCH_SIZES = [dict(N=4096, V=32000), dict(N=4096, V=128256), dict(N=16384, V=32000), dict(N=16384, V=128256)]
BENCH_CONSTS = [{}, {}, {}, {}]
PEER = "torch.nn.functional.cross_entropy"

TOLERANCE = 1e-4  # f32 output; the GPU computes exp and log with ex2.approx and lg2.approx
# Per element: max, subtract, exp, add, compare, select, add.
FLOPS_PER_ELEMENT = 7


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    """Logits with a spread of 4 (a row's terms span e^±16), labels anywhere in the row, the last column and
    IGNORE among them."""
    N, V = sizes["N"], sizes["V"]
    x = (rng.standard_normal((N, V), np.float32) * 4).astype(ml_dtypes.bfloat16)
    labels = rng.integers(0, V, N).astype(np.int32)
    labels[0] = V - 1
    if N > 1:
        labels[1] = _consts(consts)["IGNORE"]
    return [x, labels, np.full(N, np.nan, np.float32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, labels, _ = inputs
    xf = x.astype(np.float64)
    m = xf.max(axis=1)
    lse = m + np.log(np.exp(xf - m[:, None]).sum(axis=1))
    ignored = labels == _consts(consts)["IGNORE"]
    picked = xf[np.arange(len(labels)), np.where(ignored, 0, labels)]
    return {"Loss": np.where(ignored, 0.0, lse - picked)}


def torch_inputs(sizes: dict, consts: dict) -> list:
    """make_inputs drawn on the GPU (tkc bench at a 128k vocabulary: numpy's inputs and float64 reference cost
    minutes of host time a row)."""
    import torch

    N, V = sizes["N"], sizes["V"]
    x = (torch.randn((N, V), device="cuda") * 4).to(torch.bfloat16)
    labels = torch.randint(0, V, (N,), device="cuda", dtype=torch.int32)
    labels[0] = V - 1
    if N > 1:
        labels[1] = _consts(consts)["IGNORE"]
    return [x, labels, torch.full((N,), float("nan"), device="cuda")]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    """reference's float64 math on the GPU, ROW_SLICE rows at a time (16384 x 128256 in float64 is 17 GB)."""
    import torch

    x, labels, _ = inputs
    ignored = labels == _consts(consts)["IGNORE"]
    idx = torch.where(ignored, 0, labels).long()
    out = []
    for r in range(0, x.shape[0], ROW_SLICE):
        xf = x[r:r + ROW_SLICE].double()
        picked = xf.gather(1, idx[r:r + ROW_SLICE, None])[:, 0]
        out.append(torch.logsumexp(xf, dim=1) - picked)
    return {"Loss": torch.where(ignored, 0.0, torch.cat(out))}


ROW_SLICE = 1024  # rows of the float64 reference at a time (1 GB at V = 128256)


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["N"] * sizes["V"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 2 * sizes["N"] * sizes["V"] + 8 * sizes["N"]  # X read (bf16), labels read and loss written (4 bytes each)


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    x, labels, _loss = inputs
    labels64 = labels.long()  # torch takes int64 class indices; converted once, outside the timing
    return lambda: torch.nn.functional.cross_entropy(x, labels64, reduction="none")


# Timed in the same run as PEER: the same math through torch.compile (Inductor), which fuses it.
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}


def _math(x, labels64):
    import torch

    return torch.nn.functional.cross_entropy(x.float(), labels64, reduction="none")


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    x, labels, _loss = inputs
    labels64 = labels.long()
    f = inductor(_math)
    return lambda: f(x, labels64)
