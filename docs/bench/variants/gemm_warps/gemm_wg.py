"""Companion of gemm_wg.tk (session 11: gemm.tk with @warpgroups(consumers=WG), on sm_80 4 x WG warps): the
example's own companion, examples/gemm.py, with this kernel's name; the reference, inputs and peers are the same."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_EXAMPLE = Path(__file__).parents[4] / "examples" / "gemm.py"
_spec = importlib.util.spec_from_file_location("gemm_example", _EXAMPLE)
_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_example)
globals().update({n: v for n, v in vars(_example).items() if not n.startswith("__")})
KERNEL = "gemm_wg.tk"
