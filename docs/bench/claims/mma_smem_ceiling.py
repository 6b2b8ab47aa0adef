"""Companion of mma_smem_ceiling.tk: C = ITERS * (A @ B[:, :BN]) in f32 (every step adds the same product)."""

import numpy as np

KERNEL = "mma_smem_ceiling.tk"
PARAMS = ["A", "B", "C"]
OUTPUTS = ["C"]
DEFAULT_CONSTS = dict(BM=256, BN=128, BK=64, ITERS=512)
CHECK_SIZES = [dict(M=512, N=128)]
CHECK_CONSTS = [{"ITERS": 4}]
BENCH_SIZES = [dict(M=132 * 256, N=128)]
BENCH_CONSTS = [{}]
PEER = "none (timed alone: docs/bench/claims.py)"
# Inputs are multiples of 1/8 in [-1, 1], exact in bf16; each product sum is then exact in f32 and so
# so is ITERS times it (|sum| <= BK, ITERS * BK < 2^24 for every ITERS used): the check is tight.
TOLERANCE = 1e-6


def _c(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    import ml_dtypes

    m, n = sizes["M"], sizes["N"]
    a = (rng.integers(-8, 9, (m, _c(consts)["BK"])) / 8).astype(ml_dtypes.bfloat16)
    b = (rng.integers(-8, 9, (_c(consts)["BK"], n)) / 8).astype(ml_dtypes.bfloat16)
    return [a, b, np.full((m, n), np.nan, np.float32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    c = _c(consts)
    a, b = inputs[0].astype(np.float64), inputs[1].astype(np.float64)
    out = np.full((sizes["M"], sizes["N"]), np.nan)
    out[:, : c["BN"]] = c["ITERS"] * (a @ b[:, : c["BN"]])
    return {"C": out}


def flops(sizes: dict, consts: dict) -> int:
    c = _c(consts)
    return 2 * sizes["M"] * c["BN"] * c["BK"] * c["ITERS"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 2 * _c(consts)["BK"] * (sizes["M"] + sizes["N"]) + 4 * sizes["M"] * sizes["N"]


def peer(inputs: list, sizes: dict, consts: dict):
    raise NotImplementedError("mma_smem_ceiling has no peer: docs/bench/claims.py times it alone")
