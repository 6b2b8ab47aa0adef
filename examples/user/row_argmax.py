"""Companion of user/row_argmax.tk: A[n] = argmax of row n of X (first on ties, NaN the largest: torch.argmax)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "row_argmax.tk"
PARAMS = ["X", "A"]
OUTPUTS = ["A"]
CHUNK = 2048  # the kernel's chunk width (a literal in its tile type)

# A row of one chunk; rows of three chunks (the best in the last, a tie across chunks); then ragged V (a
# partial last chunk, which the compiled kernel masks; tkc bench's V = 32000 is ragged too).
CHECK_SIZES = [dict(N=6, V=CHUNK), dict(N=5, V=3 * CHUNK), dict(N=6, V=1000), dict(N=5, V=2 * CHUNK + 600)]
CHECK_CONSTS = [{}] * 4
# LLM vocabularies (Llama 2: 32000, Llama 3: 128256) at 4096 and 16384 rows.
BENCH_SIZES = [dict(N=4096, V=32000), dict(N=4096, V=128256), dict(N=16384, V=32000), dict(N=16384, V=128256)]
BENCH_CONSTS = [{}, {}, {}, {}]
PEER = "torch.argmax"

TOLERANCE = 0.0  # indices: exact


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    """Values of few levels (ties), a tie across chunks, a NaN row, an all -inf row, a constant row, and the
    largest value in the last column."""
    N, V = sizes["N"], sizes["V"]
    x = rng.integers(-20, 20, (N, V)).astype(np.float32) / 4
    x[0, [V // 3, V - 1]] = 100.0  # a tie: the first wins
    if N > 1:
        x[1, [V // 2, V - 2]] = np.nan  # the first NaN wins over every number
        x[1, 0] = np.inf
    if N > 2:
        x[2, :] = -np.inf  # index 0
    if N > 3:
        x[3, :] = 1.5  # all equal: index 0
    if N > 4:
        x[4, V - 1] = 50.0  # the best in the ragged tail
    return [x.astype(ml_dtypes.bfloat16), np.full(N, -1, np.int32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    return {"A": np.argmax(inputs[0].astype(np.float64), axis=1).astype(np.float64)}  # numpy: torch's rule


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
