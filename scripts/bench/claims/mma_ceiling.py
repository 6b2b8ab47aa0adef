"""Companion of mma_ceiling.tk: C = ITERS * (A @ B[:, :BN]) in f32 (every step adds the same product). A is
M x K, B is K x N, with K = the consts' BK (16 here, the one k16 step of register operands; mma_smem_ceiling.py
reuses this file with BK = 64)."""

import numpy as np

KERNEL = "mma_ceiling.tk"
PARAMS = ["A", "B", "C"]
OUTPUTS = ["C"]
DEFAULT_CONSTS = dict(BM=128, BN=64, ITERS=4096)
CHECK_SIZES = [dict(M=256, N=64)]
CHECK_CONSTS = [{"ITERS": 4}]
BENCH_SIZES = [dict(M=132 * 2 * 128, N=64)]
BENCH_CONSTS = [{}]
PEER = "none (timed alone: scripts/bench/claims.py)"
# Inputs are multiples of 1/8 in [-1, 1], exact in bf16; each product sum is then exact in f32 and so
# so is ITERS times it (|sum| <= K, ITERS * K < 2^24 for every ITERS used): the check is tight.
TOLERANCE = 1e-6


def _c(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def _k(consts: dict) -> int:
    return _c(consts).get("BK", 16)


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    import ml_dtypes

    m, n = sizes["M"], sizes["N"]
    k = _k(consts)
    a = (rng.integers(-8, 9, (m, k)) / 8).astype(ml_dtypes.bfloat16)
    b = (rng.integers(-8, 9, (k, n)) / 8).astype(ml_dtypes.bfloat16)
    return [a, b, np.full((m, n), np.nan, np.float32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    c = _c(consts)
    a, b = inputs[0].astype(np.float64), inputs[1].astype(np.float64)
    out = np.full((sizes["M"], sizes["N"]), np.nan)
    out[:, : c["BN"]] = c["ITERS"] * (a @ b[:, : c["BN"]])
    return {"C": out}


def flops(sizes: dict, consts: dict) -> int:
    c = _c(consts)
    return 2 * sizes["M"] * c["BN"] * _k(consts) * c["ITERS"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 2 * _k(consts) * (sizes["M"] + sizes["N"]) + 4 * sizes["M"] * sizes["N"]


def peer(inputs: list, sizes: dict, consts: dict):
    raise NotImplementedError(f"{KERNEL} has no peer: scripts/bench/claims.py times it alone")
