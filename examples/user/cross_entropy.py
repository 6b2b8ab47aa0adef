"""Companion of user/cross_entropy.tk: Loss[n] = logsumexp(X[n, :]) - X[n, Labels[n]] (0 where the label is
-100), F.cross_entropy(X, Labels, reduction="none")."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from tkir.tools.examples import load_module

KERNEL = "cross_entropy.tk"
PARAMS = ["X", "Labels", "Loss"]
OUTPUTS = ["Loss"]
DEFAULT_CONSTS = dict(IGNORE=-100)
CHUNK = 4096  # the kernel's chunk width (a literal in its tile type)

# A row of one chunk; rows of three chunks; then ragged V (a partial last chunk, which the compiled kernel
# masks; tkc bench's V = 32000 and 128256 are ragged too).
CHECK_SIZES = [dict(N=6, V=CHUNK), dict(N=5, V=3 * CHUNK), dict(N=7, V=1000), dict(N=5, V=2 * CHUNK + 600)]
CHECK_CONSTS = [{}] * 4
# LLM vocabularies (Llama 2: 32000, Llama 3: 128256) at 4096 and 16384 rows.
BENCH_SIZES = [dict(N=4096, V=32000), dict(N=4096, V=128256), dict(N=16384, V=32000), dict(N=16384, V=128256)]
BENCH_CONSTS = [{}, {}, {}, {}]
PEER = "torch.nn.functional.cross_entropy"

TOLERANCE = 1e-4  # f32 output; the GPU computes exp and log with ex2.approx and lg2.approx


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    """Logits with a spread of 4 (a row's terms span e^±16), a row whose max is in its last chunk, labels
    anywhere in the row, the last column and IGNORE among them."""
    N, V = sizes["N"], sizes["V"]
    x = rng.standard_normal((N, V), np.float32) * 4
    if N > 2:
        x[2, V - 1] = 40.0  # the max grows in the last chunk: the running sum is rescaled
    labels = rng.integers(0, V, N).astype(np.int32)
    labels[0] = V - 1
    if N > 1:
        labels[1] = _consts(consts)["IGNORE"]
    if N > 3:
        labels[3] = 0
    return [x.astype(ml_dtypes.bfloat16), labels, np.full(N, np.nan, np.float32)]


# The loss, its cost model and its peers are examples/cross_entropy.py's (the same math; that kernel carries
# schedule consts, this one none).
_example = load_module(Path(__file__).resolve().parents[1] / "cross_entropy.py", "tkir_example_cross_entropy_math")
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
