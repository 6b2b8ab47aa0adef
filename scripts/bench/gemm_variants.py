"""Time GEMM variants of examples/gemm.tk against each other and cuBLAS, interleaved, in one process.

Usage (GPU machine, tkir installed): python3 scripts/bench/gemm_variants.py [--reps 50] [--json OUT]
Each variant is compiled with its own pipeline (pass parameters); every rep runs all of them in turn (each after an
L2 flush, inputs rotated), so drift touches them alike. Correctness is checked first for each.
"""

from __future__ import annotations

import argparse
import json
import math

import torch

import tkir
from tkir.tools.examples import load_companion
from tkir.tools.timing import L2_BYTES, time_pair_ms
from tkir.tools.timing import rel_err as _rel_err


def _with(old: str, new: str) -> list[str]:
    """The default pipeline with one entry replaced (pass parameters in the pipeline text)."""
    return [new if p == old else p for p in tkir.api.default_pipeline()]


VARIANTS = {  # name -> tkir.compile keyword arguments
    "default (balanced grid)": {},
    "one block per SM": {"passes": _with("persistent", "persistent{balanced_grid=0}")},
    "L2 promotion 256 B": {"passes": _with("create-tma", "create-tma{l2_promotion=256}")},
    "stream-K (tails <= 60% full)": {"passes": _with("persistent", "persistent,stream-k")},
}
SHAPES = [(4096, 4096, 4096), (2048, 2048, 2048), (8192, 8192, 8192), (6144, 6144, 6144), (8192, 8192, 1024)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json")
    args = ap.parse_args()
    comp = load_companion("examples/gemm.tk")
    out = []
    for M, N, K in SHAPES:
        sizes = dict(M=M, N=N, K=K)
        nbytes = comp.bytes_moved(sizes, {})
        nsets = max(2, min(8, math.ceil(3 * L2_BYTES / nbytes)))
        sets = [comp.torch_inputs(sizes, {}) for _ in range(nsets)]
        kernels = {name: tkir.compile("examples/gemm.tk", **kw) for name, kw in VARIANTS.items()}
        ref = comp.torch_reference(sets[0], sizes, {})["C"]
        errs = {}
        for name, k in kernels.items():
            sets[0][2].fill_(float("nan"))
            k(*sets[0])
            torch.cuda.synchronize()
            errs[name] = _rel_err(torch, sets[0][2], ref)
        fns = [lambda i, k=k, sets=sets: (lambda: k(*sets[i])) for k in kernels.values()]
        fns.append(lambda i, sets=sets, sizes=sizes: comp.peer(sets[i], sizes, {}))
        times = time_pair_ms(torch, fns, nsets, args.reps, 5)
        flops = 2 * M * N * K
        peer = flops / times[-1] / 1e9
        for (name, _), ms in zip(kernels.items(), times, strict=False):
            tf = flops / ms / 1e9
            out.append(dict(shape=[M, N, K], variant=name, tflops=tf, cublas_tflops=peer,
                            ratio=tf / peer, rel_err=errs[name]))
    for r in out:
        print(f"{'x'.join(map(str, r['shape'])):>16}  {r['variant']:<36} {r['tflops']:7.1f} TFLOP/s  "
              f"cuBLAS {r['cublas_tflops']:7.1f}  ratio {r['ratio']:.3f}  rel_err {r['rel_err']:.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
