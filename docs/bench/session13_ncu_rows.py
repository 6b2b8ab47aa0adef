"""Session 13: one launch each of tkir's and torch.compile's layernorm at a point, between
cudaProfilerStart/Stop, for `ncu --profile-from-start off` (docs/bench/session13_call1.sh).

    python3 docs/bench/session13_ncu_rows.py N D ROWS DC WG OCC
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    import torch

    import tkir

    n, d, rows, dc, wg, occ = map(int, sys.argv[1:7])
    k = tkir.compile(str(ROOT / "examples" / "layernorm.tk"), D=d, ROWS=rows, DC=dc, WG=wg, OCC=occ)
    x = torch.randn(n, d, device="cuda").to(torch.bfloat16)
    w = torch.randn(d, device="cuda").to(torch.bfloat16)
    b = torch.randn(d, device="cuda").to(torch.bfloat16)
    y = torch.empty_like(x)
    f = torch.compile(lambda x, w, b: torch.nn.functional.layer_norm(x, (d,), w, b, eps=1e-5))  # the sweep's peer
    for _ in range(3):
        k(x, w, b, y)
        f(x, w, b)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    k(x, w, b, y)
    f(x, w, b)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
