"""Companion of rmsnorm_deferred.tk (session 13): the example's own companion, examples/rmsnorm.py, with this
kernel's name; the reference, inputs and peers are the same."""

from __future__ import annotations

from pathlib import Path

from tkir.examples import reuse_companion

reuse_companion(globals(), Path(__file__).parents[4] / "examples" / "rmsnorm.py", KERNEL="rmsnorm_deferred.tk")
