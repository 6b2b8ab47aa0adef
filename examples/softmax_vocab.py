"""Companion of softmax_vocab.tk: row softmax of X over a vocabulary-wide row (math in f32), bf16 out."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "softmax_vocab.tk"
PARAMS = ["X", "Y"]
OUTPUTS = ["Y"]
VOCAB = 50257  # GPT-2's vocabulary: rows of 100,514 bytes, 2-byte aligned

# The first size runs the unaligned variant (2-byte pieces), the second the kernel itself (V a multiple
# of 8: 16-byte pieces), the third a 4-byte variant (V = 8k + 2) with several partial row blocks.
CHECK_SIZES = [dict(N=3, V=VOCAB), dict(N=2, V=VOCAB - 1), dict(N=5, V=1026)]
CHECK_CONSTS = [{}, {}, {"ROWS": 2, "DC": 512}]
BENCH_SIZES = [dict(N=4096, V=VOCAB), dict(N=4096, V=VOCAB + 7), dict(N=16384, V=VOCAB)]
BENCH_CONSTS = [{}, {}, {}]
PEER = "torch.softmax"

TOLERANCE = 2e-2  # bf16 output
FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    N, V = sizes["N"], sizes["V"]
    bf16 = ml_dtypes.bfloat16
    x = (3 * rng.standard_normal((N, V), np.float32)).astype(bf16)  # logits of a spread that a softmax sees
    return [x, np.full((N, V), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x = inputs[0].astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"Y": e / e.sum(axis=1, keepdims=True)}


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["N"] * sizes["V"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 2 * 2 * sizes["N"] * sizes["V"]  # X read, Y written; bf16


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    x, y = inputs
    return lambda: torch.softmax(x, dim=1, dtype=torch.float32).to(torch.bfloat16)
