"""Companion of layernorm_deferred.tk (session 13): the example's own companion, examples/layernorm.py, with this
kernel's name; the reference, inputs and peers are the same."""

from __future__ import annotations

from pathlib import Path

from tkir.examples import reuse_companion

reuse_companion(globals(), Path(__file__).parents[4] / "examples" / "layernorm.py", KERNEL="layernorm_deferred.tk")
