"""Companion of col_sum.tk: SUM = the column sums of the f32 partials PART (G rows of C), rounded to bf16."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "col_sum.tk"
PARAMS = ["PART", "SUM"]
OUTPUTS = ["SUM"]
DEFAULT_CONSTS = dict(RG=128, BC=16, WG=1)

# G and C ragged against the RG x BC tile (rows past G and columns past C load as zeros; the last
# block's store is clipped at C); one row; the partial counts the row kernels use at the bench sizes.
CHECK_SIZES = [dict(G=1, C=768), dict(G=300, C=1000), dict(G=7, C=4096), dict(G=256, C=1536), dict(G=391, C=768)]
CHECK_CONSTS = [{}, {}, {"RG": 32, "BC": 64}, {"RG": 64, "BC": 32, "WG": 2}, {}]
# What the row backward kernels hand over at the sizes: rmsnorm (4096, 4096) and (65536, 768),
# layernorm's DW and DB side by side (2 x 768 columns).
BENCH_SIZES = [dict(G=256, C=4096), dict(G=391, C=768), dict(G=391, C=1536)]
BENCH_CONSTS = [{}, {}, {}]
PEER = "torch.sum(dim=0)"

TOLERANCE = 1e-2  # bf16 output (2^-8 relative rounding of each sum)
FLOPS_PER_ELEMENT = 1  # one add per partial


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    G, C = sizes["G"], sizes["C"]
    # Partials of either sign and of several scales, as per-block sums of dy * x_hat are.
    part = rng.standard_normal((G, C), np.float32) * np.exp(rng.standard_normal((1, C), np.float32))
    return [part, np.full(C, np.nan, ml_dtypes.bfloat16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    return {"SUM": inputs[0].astype(np.float64).sum(axis=0)}


def flops(sizes: dict, consts: dict) -> int:
    return FLOPS_PER_ELEMENT * sizes["G"] * sizes["C"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 4 * sizes["G"] * sizes["C"] + 2 * sizes["C"]  # PART read (f32), SUM written (bf16)


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    part, _ = inputs
    return lambda: part.sum(dim=0).to(torch.bfloat16)
