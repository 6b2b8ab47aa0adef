"""Companion of fma_ceiling.tk: the reference is the closed form of the recurrence x <- A x + B."""

import numpy as np

KERNEL = "fma_ceiling.tk"
PARAMS = ["X", "Y"]
OUTPUTS = ["Y"]
DEFAULT_CONSTS = dict(ROWS=32, D=256, ITERS=4096)
CHECK_SIZES = [dict(N=128)]
CHECK_CONSTS = [{"ITERS": 8}]
BENCH_SIZES = [dict(N=132 * 32 * 16)]
BENCH_CONSTS = [{}]
PEER = "none (timed alone: scripts/bench/claims.py)"
TOLERANCE = 1e-4  # f32 throughout; ITERS roundings of 2^-24 each
A, B = 1 - 2.0**-10, 2.0**-10


def _c(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    n, d = sizes["N"], _c(consts)["D"]
    return [rng.uniform(0.0, 2.0, (n, d)).astype(np.float32), np.full((n, d), np.nan, np.float32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    an = A ** _c(consts)["ITERS"]
    return {"Y": inputs[0].astype(np.float64) * an + B * (1 - an) / (1 - A)}


def flops(sizes: dict, consts: dict) -> int:
    c = _c(consts)
    return 2 * sizes["N"] * c["D"] * c["ITERS"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 2 * 4 * sizes["N"] * _c(consts)["D"]


def peer(inputs: list, sizes: dict, consts: dict):
    raise NotImplementedError("fma_ceiling has no peer: scripts/bench/claims.py times it alone")
