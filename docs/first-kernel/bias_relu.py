"""Companion of bias_relu.tk: what `tkc run --check` and `tkc bench` need to know about the kernel."""

import ml_dtypes
import numpy as np

KERNEL = "bias_relu.tk"
PARAMS = ["X", "Bias", "Y"]          # the kernel's parameters, in order
OUTPUTS = ["Y"]                      # the ones it writes
CHECK_SIZES = [dict(N=64), dict(N=40)]   # interpreter sizes (`--check` without `--size`)
CHECK_CONSTS = [{}, {}]
BENCH_SIZES = [dict(N=65536)]
BENCH_CONSTS = [{}]
PEER = "torch relu(x + b)"
TOLERANCE = 1e-2                     # bf16 output: ||out - ref|| / ||ref||
MEMORY_BOUND = True


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    n, d = sizes["N"], consts.get("D", 256)
    x = rng.standard_normal((n, d), np.float32).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(d, np.float32)
    y = np.full((n, d), np.nan, ml_dtypes.bfloat16)   # poisoned: an unwritten element fails the check
    return [x, bias, y]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    x, bias, _ = inputs
    return {"Y": np.maximum(x.astype(np.float64) + bias, 0.0)}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * sizes["N"] * consts.get("D", 256)


def bytes_moved(sizes: dict, consts: dict) -> int:
    return 2 * 2 * sizes["N"] * consts.get("D", 256)


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    x, bias, _ = inputs
    return lambda: torch.relu(x.float() + bias).bfloat16()
