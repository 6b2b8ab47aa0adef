"""Companion of gemm_wg.tk (examples/gemm.tk with @warpgroups(consumers=WG) and @blocks_per_sm(OCC)): the
example's own companion, examples/gemm.py, with this kernel's name; the reference, inputs and peers are the same."""

from __future__ import annotations

from pathlib import Path

from tkir.tools.examples import reuse_companion

reuse_companion(globals(), Path(__file__).resolve().parents[2] / "examples" / "gemm.py", KERNEL="gemm_wg.tk")
