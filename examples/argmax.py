"""Companion of argmax.tk: A[n] = argmax of row n of X (first occurrence on ties, NaN the largest: torch.argmax)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "argmax.tk"
PARAMS = ["X", "A"]
OUTPUTS = ["A"]
DEFAULT_CONSTS = dict(ROWS=1, VC=4096)

# Rows of three chunks with a ragged tail (V = 600 over VC = 256), a row in one chunk, several rows a block.
CHECK_SIZES = [dict(N=7, V=600), dict(N=16, V=256), dict(N=5, V=1000)]
CHECK_CONSTS = [{"VC": 256, "WG": 1}, {"VC": 256, "ROWS": 4, "WG": 1}, {"VC": 512, "ROWS": 2, "WG": 2}]
# LLM vocabularies (Llama 2: 32000, Llama 3: 128256) at 4096 and 16384 rows.
BENCH_SIZES = [dict(N=4096, V=32000), dict(N=4096, V=128256), dict(N=16384, V=32000), dict(N=16384, V=128256)]
BENCH_CONSTS = [{}, {}, {}, {}]
PEER = "torch.argmax"

TOLERANCE = 0.0  # indices: exact


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    """Values drawn from few levels, so rows hold ties (the first one must win), the row maximum in a later
    chunk than an earlier tie, a NaN row (its first NaN wins), an -inf row (index 0), a row of equal values."""
    N, V = sizes["N"], sizes["V"]
    x = rng.integers(-20, 20, (N, V)).astype(np.float32) / 4
    x[0, [V // 3, V - 1]] = 100.0                   # a tie across chunks: the first wins
    if N > 1:
        x[1, [V // 2, V - 2]] = np.nan              # the first NaN wins over every number
        x[1, 0] = np.inf
    if N > 2:
        x[2, :] = -np.inf                            # every element -inf: index 0
    if N > 3:
        x[3, :] = 1.5                                # all equal: index 0
    return [x.astype(ml_dtypes.bfloat16), np.full(N, -1, np.int32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    return {"A": np.argmax(inputs[0].astype(np.float32), axis=1).astype(np.float64)}  # numpy: torch's rule


def torch_inputs(sizes: dict, consts: dict) -> list:
    """make_inputs drawn on the GPU (tkc bench at a 128k vocabulary: numpy's inputs cost minutes of host time),
    with its ties, NaN, -inf and constant rows."""
    import torch

    N, V = sizes["N"], sizes["V"]
    x = torch.randint(-20, 20, (N, V), device="cuda").float() / 4
    x[0, [V // 3, V - 1]] = 100.0
    if N > 1:
        x[1, [V // 2, V - 2]] = float("nan")
        x[1, 0] = float("inf")
    if N > 2:
        x[2, :] = float("-inf")
    if N > 3:
        x[3, :] = 1.5
    return [x.to(torch.bfloat16), torch.full((N,), -1, device="cuda", dtype=torch.int32)]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    import torch

    return {"A": torch.argmax(inputs[0].float(), dim=1).double()}  # the first maximum; a NaN is the largest


def flops(sizes: dict, consts: dict) -> int:
    return sizes["N"] * sizes["V"]  # one comparison per element


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 2 * sizes["N"] * sizes["V"] + 4 * sizes["N"]  # X read (bf16), A written (i32)


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    x, _a = inputs
    return lambda: torch.argmax(x, dim=1)


# Timed in the same run as PEER: the same math through torch.compile (Inductor).
EXTRA_PEERS = {"compiled": "torch.compile (Inductor) of the peer's math"}


def _math(x):
    import torch

    return torch.argmax(x, dim=1)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    from tkir.tools.bench import inductor

    x, _a = inputs
    f = inductor(_math)
    return lambda: f(x)
