"""Companion of rmsnorm_wfirst.tk (session 10, call 1: W loaded before the reductions): the example's own
companion, examples/rmsnorm.py, with this kernel's name; the reference, inputs and peers are the same."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_EXAMPLE = Path(__file__).parents[4] / "examples" / "rmsnorm.py"
_spec = importlib.util.spec_from_file_location("rmsnorm_example", _EXAMPLE)
_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_example)
globals().update({n: v for n, v in vars(_example).items() if not n.startswith("__")})
KERNEL = "rmsnorm_wfirst.tk"
