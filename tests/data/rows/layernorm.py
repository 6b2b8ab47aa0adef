"""Companion of tests/data/rows/layernorm.tk, the row kernel with every schedule knob: examples/layernorm.py (inputs,
reference, FLOPs, bytes, peers: run here, in this module, so its functions read the consts below) with the
knob version's defaults and check and bench points."""

from __future__ import annotations

from pathlib import Path

_DOC = __doc__
_EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "layernorm.py"
exec(compile(_EXAMPLE.read_text(encoding="utf-8"), str(_EXAMPLE), "exec"))  # noqa: S102 -- the example's companion
__doc__ = _DOC

DEFAULT_CONSTS = dict(ROWS=16, D=1024, DC=1024)

# N a multiple of ROWS=16; the second size also changes the row length D. The last two walk the
# rows in chunks (D > DC, two passes): four chunks of 1024, and three of 512.
CHECK_SIZES = [dict(N=256), dict(N=128), dict(N=32), dict(N=48), dict(N=64)]
CHECK_CONSTS = [{}, {"D": 512}, {"D": 4096, "DC": 1024}, {"D": 1536, "DC": 512},
                {"D": 2048, "DC": 512, "REREAD": 1}]
# The last: statistics from the whole row, then the output in chunks from a second read of X (REREAD).
# The third: the sweep's wide rows (D = 16384) in chunks, a point the tune space keeps that ptxas
# assembles without spills (its speed on the GPU is not measured yet; `tkc tune -D D=16384` picks).
BENCH_SIZES = [dict(N=16384), dict(N=65536), dict(N=4096)]
BENCH_CONSTS = [{}, {}, {"D": 16384, "DC": 4096, "ROWS": 2, "WG": 1}]
