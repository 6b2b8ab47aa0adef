"""Companion of transpose.tk: Y[N, M] = X[M, N]^T in bf16 (a pure data movement: exact)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "transpose.tk"
PARAMS = ["X", "Y"]
OUTPUTS = ["Y"]
DEFAULT_CONSTS = dict(BM=32, BN=128, SHARED_T=1)

# Non-square sizes so that swapped M and N fail: 64 x 64 tiles, 64 x 128 tiles (a non-square tile
# catches a transposed tile stored at the wrong coordinates), and the default 32 x 128 tile with N
# not a multiple of it (TMA zero fill on the load, Y's rows masked on the store).
CHECK_SIZES = [dict(M=128, N=192), dict(M=256, N=128), dict(M=128, N=320)]
CHECK_CONSTS = [{"BM": 64, "BN": 64}, {"BM": 64, "BN": 128}, {}]
# The bandwidth targets: 8192 x 8192 and 65536 x 4096 (both 128 MiB read, 128 MiB written).
BENCH_SIZES = [dict(M=8192, N=8192), dict(M=65536, N=4096)]
BENCH_CONSTS = [{}, {}]
PEER = "torch x.t().contiguous()"

TOLERANCE = 0.0  # a copy: every element must arrive unchanged


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    M, N = sizes["M"], sizes["N"]
    bf16 = ml_dtypes.bfloat16
    x = rng.standard_normal((M, N), np.float32).astype(bf16)
    return [x, np.full((N, M), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    return {"Y": inputs[0].astype(np.float64).T}


def flops(sizes: dict, consts: dict) -> int:
    return sizes["M"] * sizes["N"]  # no arithmetic; one "operation" per element moved, so flops > 0


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 2 * 2 * sizes["M"] * sizes["N"]  # X read, Y written; bf16


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    x, _ = inputs
    return lambda: x.t().contiguous()  # a strided-read copy kernel, allocating its output
