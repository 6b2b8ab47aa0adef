"""Companion of layernorm_rows.tk (session 19): examples/layernorm.py's reference, inputs and peers, with
this kernel's name."""

from __future__ import annotations

from pathlib import Path

from tkir.examples import reuse_companion

reuse_companion(globals(), Path(__file__).parents[4] / "examples" / "layernorm.py", KERNEL="layernorm_rows.tk",
                DEFAULT_CONSTS=dict(ROWS=1, D=1024, WG=1, RPB=4, PF=0, OCC=0))
