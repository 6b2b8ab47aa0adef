"""Companion of rmsnorm_rows_loop.tk: examples/rmsnorm.py's reference, inputs and peer."""

from pathlib import Path

_SRC = Path(__file__).resolve().parents[3] / "examples" / "rmsnorm.py"
exec(compile(_SRC.read_text(encoding="utf-8"), str(_SRC), "exec"))  # noqa: S102 - same definitions
KERNEL = "rmsnorm_rows_loop.tk"
DEFAULT_CONSTS = dict(ROWS=1, D=8192, DC=8192, WG=1, ITERS=4)
