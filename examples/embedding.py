"""Companion of embedding.tk: Out[t, :] = Table[Ids[t], :] (an exact copy of the picked rows)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "embedding.tk"
PARAMS = ["Table", "Ids", "Out"]
OUTPUTS = ["Out"]
DEFAULT_CONSTS = dict(ROWS=2, D=4096, DC=4096)

# Ragged T (not a multiple of ROWS), repeated ids, the first and last rows of the table; the second walks a
# row in two column tiles.
CHECK_SIZES = [dict(V=37, T=13), dict(V=100, T=8), dict(V=5, T=9)]
CHECK_CONSTS = [{"D": 256, "DC": 256, "ROWS": 4}, {"D": 512, "DC": 256}, {"D": 128, "DC": 128, "ROWS": 1}]
# The lookup: a 128k x 4096 table (1 GiB of bf16) by 8192 token ids.
BENCH_SIZES = [dict(V=131072, T=8192)]
BENCH_CONSTS = [{}]
PEER = "torch.nn.functional.embedding"

TOLERANCE = 0.0  # a copy: exact


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    V, T, D = sizes["V"], sizes["T"], _consts(consts)["D"]
    bf16 = ml_dtypes.bfloat16
    table = rng.standard_normal((V, D), np.float32).astype(bf16)
    ids = rng.integers(0, V, T).astype(np.int32)
    ids[: min(T, 2)] = [0, V - 1][: min(T, 2)]  # the table's first and last rows
    return [table, ids, np.full((T, D), np.nan, bf16)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    table, ids, _ = inputs
    return {"Out": table[ids].astype(np.float64)}


def flops(sizes: dict, consts: dict) -> int:
    return 0  # a copy


def bytes_moved(sizes: dict, consts: dict) -> int:
    T, D = sizes["T"], _consts(consts)["D"]
    return 2 * 2 * T * D + 4 * T  # the picked rows read and written (bf16), the ids read


# --- GPU hooks (tkc bench) -------------------------------------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    import torch

    table, ids, _out = inputs
    return lambda: torch.nn.functional.embedding(ids, table)
