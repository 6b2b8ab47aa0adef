"""Companion of mma_smem_ceiling.tk: C = ITERS * (A @ B[:, :BN]) in f32, A and B of BK = 64 columns / rows:
mma_ceiling.py's reference, inputs and counts with this kernel's name, constants and sizes."""

from __future__ import annotations

from pathlib import Path

from tkir.tools.examples import reuse_companion

reuse_companion(globals(), Path(__file__).with_name("mma_ceiling.py"), KERNEL="mma_smem_ceiling.tk",
                DEFAULT_CONSTS=dict(BM=256, BN=128, BK=64, ITERS=512), CHECK_SIZES=[dict(M=512, N=128)],
                BENCH_SIZES=[dict(M=132 * 256, N=128)])
