"""Companion of user/row_argmax.tk: A[n] = argmax of row n of X (first on ties, NaN the largest: torch.argmax)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from tkir.tools.examples import load_module

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


# The result, its cost model and its peers are examples/argmax.py's (the same math; that kernel carries
# schedule consts, this one none).
_example = load_module(Path(__file__).resolve().parents[1] / "argmax.py", "tkir_example_argmax_math")
reference = _example.reference
torch_inputs = _example.torch_inputs        # tkc bench: inputs drawn on the GPU
torch_reference = _example.torch_reference
flops = _example.flops
bytes_moved = _example.bytes_moved

# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = _example.MEMORY_BOUND
peer = _example.peer
EXTRA_PEERS = _example.EXTRA_PEERS
extra_peer = _example.extra_peer
