"""Companion of rmsnorm_v1.tk: examples/rmsnorm.py's reference, inputs and peer."""

from pathlib import Path

_SRC = Path(__file__).resolve().parents[3] / "examples" / "rmsnorm.py"
exec(compile(_SRC.read_text(encoding="utf-8"), str(_SRC), "exec"))  # noqa: S102 - same definitions
KERNEL = "rmsnorm_v1.tk"
DEFAULT_CONSTS = dict(ROWS=16, D=1024, DC=1024)
