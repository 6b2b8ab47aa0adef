"""Session 21: blocks of 1 or 2 warps (`@warps(NW)`) at the narrow-row points, where every 4-warp
configuration of session 20's sweep ties within 2% and layernorm 1 x 768 trails torch.compile (0.97x). A
one-warp block reduces a row with shuffles only: no shared-memory exchange, no block barrier. Each
configuration is checked against the reference on fresh inputs (sweep15's GPU-mirror inputs), then every
variant of a point is timed in one tkir.bench.time_pair_ms call beside eager torch and torch.compile (order
rotated from rep to rep, inputs rotated past L2). The first configuration of each point is the one
session 19/20's sweep tuned there.

    python3 docs/bench/session21_warps.py --out DIR [--reps 40]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

from session19_cluster import _cfgs, run_points  # noqa: E402 - session 19's measurement, these points


def _narrow(best: str, extra: str = "") -> list[dict]:
    """The tuned point, then 1- and 2-warp blocks with and without the hoisted and fenced loads."""
    alts = [f"DC=1024 NW={w} HOIST={h} FENCE={f} {extra}" for w in (1, 2) for h in (0, 1) for f in (0, 1)]
    return _cfgs(best, *alts)


LN1 = _narrow("DC=1024 WG=1")
LN128 = _cfgs("ROWS=2 DC=1024 WG=1", "ROWS=1 DC=1024 NW=1 HOIST=1", "ROWS=1 DC=1024 NW=1 HOIST=1 FENCE=1",
              "ROWS=2 DC=1024 NW=1 HOIST=1", "ROWS=1 DC=1024 NW=2 HOIST=1", "ROWS=2 DC=1024 NW=2 HOIST=1",
              "ROWS=1 DC=1024 NW=1")
LN4096 = _cfgs("ROWS=16 DC=1024 WG=2 OCC=3 HOIST=1", "ROWS=1 DC=1024 NW=1 HOIST=1", "ROWS=2 DC=1024 NW=1 HOIST=1",
               "ROWS=4 DC=1024 NW=2 HOIST=1", "ROWS=2 DC=1024 NW=2 HOIST=1 OCC=8")
LN1W = _cfgs("DC=4096 WG=2", "DC=4096 NW=2", "DC=4096 NW=2 HOIST=1", "DC=4096 NW=1", "DC=4096 WG=1")
RMS1 = _narrow("DC=1024 WG=1")
RMS128 = _cfgs("ROWS=2 DC=1024 WG=1 FENCE=1", "ROWS=1 DC=1024 NW=1 FENCE=1", "ROWS=1 DC=1024 NW=1 HOIST=1",
               "ROWS=2 DC=1024 NW=1 FENCE=1", "ROWS=1 DC=1024 NW=2 FENCE=1", "ROWS=2 DC=1024 NW=2 FENCE=1")
SM1 = _cfgs("DC=1024 WG=1", "DC=1024 NW=1", "DC=1024 NW=1 FENCE=1", "DC=1024 NW=2", "DC=1024 NW=2 FENCE=1")
SM128 = _cfgs("DC=1024 WG=1", "DC=1024 NW=1", "DC=1024 NW=1 FENCE=1", "ROWS=2 DC=1024 NW=1 FENCE=1",
              "DC=1024 NW=2 FENCE=1")
POINTS = [  # (kernel, N, D, configurations); ROWS = 1 unless named
    ("layernorm", 1, 768, LN1), ("layernorm", 128, 768, LN128), ("rmsnorm", 1, 768, RMS1),
    ("rmsnorm", 128, 768, RMS128), ("softmax", 1, 768, SM1), ("softmax", 128, 768, SM128),
    ("layernorm", 1, 4096, LN1W), ("layernorm", 4096, 768, LN4096),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=40)
    a = ap.parse_args()
    return run_points(POINTS, Path(a.out), a.reps, "warps21.json", "session 21 one- and two-warp blocks")


if __name__ == "__main__":
    raise SystemExit(main())
