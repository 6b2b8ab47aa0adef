"""Companion of tests/data/rows/rmsnorm.tk, the row kernel with every schedule knob: examples/rmsnorm.py (inputs,
reference, FLOPs, bytes, peers: run here, in this module, so its functions read the consts below) with the
knob version's defaults and check and bench points."""

from __future__ import annotations

from pathlib import Path

_DOC = __doc__
_EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "rmsnorm.py"
exec(compile(_EXAMPLE.read_text(encoding="utf-8"), str(_EXAMPLE), "exec"))  # noqa: S102 -- the example's companion
__doc__ = _DOC

DEFAULT_CONSTS = dict(ROWS=16, D=1024, DC=1024)

# N a multiple of ROWS=16; the second size walks rows of D=512 in four DC=128 chunks (two passes).
CHECK_SIZES = [dict(N=256), dict(N=128), dict(N=64)]
CHECK_CONSTS = [{}, {"D": 512, "DC": 128}, {"D": 2048, "DC": 512, "REREAD": 1}]
# The bandwidth targets: 8192 rows of 8192 and 65536 rows of 4096 (both 128 MiB of X),
# and layernorm's default width for comparison with its table.
# Wide rows: one row per block of 2 warpgroups, the row split over its 8 warps (infer-layouts'
# row `parts`), one read of X (measured 91% and 97% of copy; the two-pass DC=1024 path 61% and 70%,
# docs/bench/results/rmsnorm.json).
BENCH_SIZES = [dict(N=8192), dict(N=65536), dict(N=65536)]
BENCH_CONSTS = [{"D": 8192, "DC": 8192, "ROWS": 1, "WG": 2}, {"D": 4096, "DC": 4096, "ROWS": 1, "WG": 2}, {}]
