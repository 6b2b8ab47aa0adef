"""Session 20: three blocks per SM (`@blocks_per_sm(3)`) at the D = 16384 row points, where session 19's
tuned kernels hold two rows per SM (128 registers) and layernorm trails torch.compile by 1.4-2%. Each configuration is
checked against the reference on fresh inputs (sweep15's GPU-mirror inputs), then every variant of a point
is timed in one tkir.bench.time_pair_ms call beside eager torch and torch.compile (order rotated from rep to
rep, inputs rotated past L2). Columns: us, x compiled (compiled ms / variant ms), % of the copy bandwidth
measured in the same run (bytes = read X + write Y).

    python3 docs/bench/session20_rows.py --out DIR [--reps 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

from session19_cluster import _cfgs, run_points  # noqa: E402 - session 19's measurement, these points

# the tuned point of session 19's sweep first, then three blocks per SM (OCC = 3, outside the tune spaces'
# OCC = [0, 4, 8]): statistics from the whole row, the output pass re-reading X in DC chunks (79-80
# registers, no spills); the whole row kept (80 registers, 96 B of spills); and 2 x 512 threads
L16 = _cfgs("DC=16384 WG=2 OCC=0 HOIST=1", "DC=4096 WG=2 OCC=4", "REREAD=1 DC=4096 WG=2 OCC=3",
            "REREAD=1 DC=8192 WG=2 OCC=3", "REREAD=1 DC=4096 WG=2 OCC=0", "DC=16384 WG=2 OCC=3 HOIST=1",
            "DC=16384 WG=2 OCC=3", "REREAD=1 DC=4096 WG=4 OCC=2")
L16B = _cfgs("DC=4096 WG=2 OCC=4", "DC=16384 WG=2 OCC=0 HOIST=1", "REREAD=1 DC=4096 WG=2 OCC=3",
             "REREAD=1 DC=8192 WG=2 OCC=3", "DC=16384 WG=2 OCC=3 HOIST=1", "REREAD=1 DC=4096 WG=4 OCC=2")
R16 = _cfgs("ROWS=2 DC=8192 WG=4 OCC=0 REREAD=1", "REREAD=1 DC=4096 WG=2 OCC=3", "REREAD=1 DC=8192 WG=2 OCC=3",
            "DC=16384 WG=2 OCC=3")
S16 = _cfgs("DC=16384 WG=2 OCC=0", "DC=16384 WG=2 OCC=3", "DC=16384 WG=4 OCC=0")
POINTS = [  # (kernel, N, D, configurations); ROWS = 1 unless named
    ("layernorm", 65536, 16384, L16), ("layernorm", 4096, 16384, L16B), ("rmsnorm", 65536, 16384, R16),
    ("softmax", 65536, 16384, S16),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    return run_points(POINTS, Path(a.out), a.reps, "rows20.json", "session 20 three blocks per SM")


if __name__ == "__main__":
    raise SystemExit(main())
