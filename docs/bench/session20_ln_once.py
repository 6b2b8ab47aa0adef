"""Session 20: run one side of issue 15's layernorm 65536 x 16384 point a few times, for Nsight Compute
(docs/bench/session20_call1.sh): `tkir` (session 19's tuned configuration) or `compiled` (torch.compile's
Inductor kernel, the peer it trails by 2%).

    python3 docs/bench/session20_ln_once.py tkir|compiled [N D]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))


def main() -> int:
    which = sys.argv[1]
    n, d = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (65536, 16384)
    import sweep15
    import torch

    import tkir
    from tkir.examples import load_companion

    src = str(ROOT / "examples" / "layernorm.tk")
    comp = sweep15.GpuRowInputs(load_companion(src), "layernorm")
    sizes, consts = {"N": n}, {"ROWS": 1, "D": d}
    x = comp.torch_inputs(sizes, consts)
    if which == "tkir":
        k = tkir.compile(src, ROWS=1, DC=16384, WG=2, OCC=0, HOIST=1, D=d)
        run = lambda: k(*x)  # noqa: E731
    else:
        run = comp.extra_peer("compiled", x, sizes, consts)   # a callable that runs the compiled peer once
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
