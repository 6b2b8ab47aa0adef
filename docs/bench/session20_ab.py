"""Session 20: the stream-K partial hand-off without a per-thread fence (a variant of
backend/rules_streamk.py's tk.partial_store: the warpgroup barrier, then the leader's release, as
CUTLASS's generic barrier; measured 0.970-1.040x and not landed, docs/experiments.md "Session 20"), as
the commit before it (`base`) and the variant (`head`) compile the skinny GEMMs the tuner picked Stream-K for, timed
interleaved on the GPU by docs/bench/session15_ab.py's `run` (each configuration benched twice, each
build once as tkir and once as the peer, both checked against the reference on fresh inputs first).

    git stash; python3 docs/bench/session20_ab.py dump --label base --out .ab20; git stash pop
    python3 docs/bench/session20_ab.py dump --label head --out .ab20
    python3 docs/bench/session20_ab.py run --dir .ab20 --out DIR      # on the GPU
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

import session16_ab as s16  # noqa: E402 - its dump, and session 15's runner

# (label, example, sizes, consts, target, pass replacements): the sweep's Stream-K points (call 2)
STREAM_K = [
    (f"gemm_{m}x{n}x{k}", "gemm", dict(M=m, N=n, K=k),
     dict(BM=bm, BN=bn, BK=64, STAGES=st, SK=1, SKI=ski), "sm_90a", {})
    for m, n, k, bm, bn, st, ski in (
        (64, 4096, 4096, 64, 64, 8, 32), (16, 4096, 4096, 64, 128, 8, 32), (1, 4096, 4096, 64, 128, 6, 16),
        (1, 4096, 14336, 64, 128, 6, 32), (64, 4096, 14336, 64, 128, 6, 16), (64, 14336, 4096, 64, 128, 6, 32),
        (1024, 14336, 4096, 128, 256, 4, 16), (16384, 4096, 14336, 128, 256, 4, 16))]
s16.SETS["streamk"] = STREAM_K

if __name__ == "__main__":
    if "--set" not in sys.argv:
        sys.argv += ["--set", "streamk"]
    raise SystemExit(s16.main())
