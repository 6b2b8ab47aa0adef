"""Session 22: the consts table for the one-call sweep (docs/bench/session22_call2.sh --consts-from).

Session 20's merged sweep records (docs/bench/latest/session20/sweep_merged: each point's consts chosen
by the tuner then), changed at three points:
- gemm M = 4096 and M = 16384, N = 128256, K = 4096: left out, so the sweep tunes them again in the same
  call, with the tuner's re-timing band widened to 6% (tkir/tune.py REFINE_WITHIN; session 20's tuner had
  BN = 256 4.4% behind in its first round and never timed it again; measured in the sweep's harness it is
  1.013-1.025x cuBLAS where the chosen BN = 128 is 0.941-0.958x: session 21 call 3, session 22 call 1).
- layernorm N = 1, D = 768: HOIST = 1, FENCE = 1 (WG = 1) in place of the tuner's HOIST = 0, FENCE = 0.
  Chosen by A/B in the sweep's own harness (tkir.bench.bench_one, four rounds over two calls: 1.004,
  1.047, 1.026, 1.044x torch.compile against 0.948, 0.956, 0.959, 0.996x), not by the tuner: its second
  round ranks the points of this 3.6 us space within 1-3% of each other, in an order the bench harness does
  not reproduce (docs/tuning.md, "Timing and the cache").

    python3 docs/bench/session22_consts.py > docs/bench/latest/session22/consts.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

RETUNE = {"gemm M=4096 N=128256 K=4096", "gemm M=16384 N=128256 K=4096"}
OVERRIDE = {"layernorm N=1 D=768": {"HOIST": 1, "FENCE": 1, "WG": 1}}
WHY = {"layernorm N=1 D=768": "bench_one A/B, session 21 call 3 and session 22 call 1"}


def main() -> int:
    from sweep15 import load_given_consts

    given = load_given_consts(ROOT / "docs" / "bench" / "latest" / "session20" / "sweep_merged")
    for pid in sorted(given):
        if pid in RETUNE:
            continue
        consts = {**given[pid], **OVERRIDE.get(pid, {})}
        rec = {"id": pid, "status": "ok", "consts": consts,
               "source": WHY.get(pid, "session 20 sweep_merged (tuned there)")}
        print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
