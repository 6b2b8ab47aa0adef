"""Session 14: the same kernels compiled by the session's starting commit and by its head, timed on one
GPU in one device call (docs/bench/session14_call3.sh). The codegen changes of session 14 (4- and
8-byte vector accesses, edge tests left out where they cannot fail, bf16 -> f32 as a shift) change the
PTX of softmax, layernorm, rmsnorm, rotary, linear and based (scripts/ptx_md5.py); this is the check
that none got slower, and how much the row kernels gained.

    PYTHONPATH=/tmp/basesite:$PYTHONPATH python3 docs/bench/session14_ab.py --examples .base/examples \
        --label base --out DIR          # the starting commit (a copy of its packages in /tmp/basesite)
    python3 docs/bench/session14_ab.py --examples examples --label head --out DIR

Each run writes DIR/ab_LABEL.json (one record per configuration: ms, rel_err, the tkir that compiled
it) and prints a line per configuration. Timing is tkir.bench's (fresh inputs checked first, L2 flush
and host lead, medians, inputs rotated past L2); no peers (both runs time the same work, and a peer
adds nothing to an A/B).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

ROW_KERNELS = ("layernorm", "rmsnorm", "softmax")
# (label, example, sizes, consts): every example whose PTX changed, at a bench size of its companion,
# and the wide-row points of issue 15 that the chunk loops are for
CONFIGS = [
    ("based_4096", "based", dict(B=16, H=16, N=4096), {}),
    ("based_16384", "based", dict(B=16, H=16, N=16384), {}),
    ("linear_gelu", "linear", dict(M=4096, N=4096, K=4096), {"ACT": 1}),
    ("rotary_65536", "rotary", dict(T=65536), {}),
    ("softmax_65536", "softmax", dict(N=65536), {}),
    ("layernorm_65536", "layernorm", dict(N=65536), {}),
    ("rmsnorm_65536", "rmsnorm", dict(N=65536), {}),
    ("ln_4096x16384_row", "layernorm", dict(N=4096), dict(D=16384, DC=16384, ROWS=1, WG=2, OCC=0)),
    ("ln_4096x16384_c2048", "layernorm", dict(N=4096), dict(D=16384, DC=2048, ROWS=1, WG=4, OCC=4)),
    ("ln_4096x16384_c4096", "layernorm", dict(N=4096), dict(D=16384, DC=4096, ROWS=1, WG=4, OCC=4)),
    ("ln_65536x16384_c4096", "layernorm", dict(N=65536), dict(D=16384, DC=4096, ROWS=1, WG=4, OCC=4)),
    ("rms_4096x16384_c4096", "rmsnorm", dict(N=4096), dict(D=16384, DC=4096, ROWS=1, WG=4, OCC=0)),
    ("sm_4096x16384_c2048", "softmax", dict(N=4096), dict(D=16384, DC=2048, ROWS=1, WG=4, OCC=4)),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", required=True, help="the examples directory of the compiler under test")
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    import sweep15
    import torch  # noqa: F401 - CUDA up before the first compile

    import tkir
    import tkir.bench as tb
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    only = set(filter(None, a.only.split(",")))
    recs = []
    for label, name, sizes, consts in CONFIGS:
        if only and label not in only:
            continue
        path = str(Path(a.examples) / f"{name}.tk")
        comp = load_companion(path)
        if name in ROW_KERNELS:
            comp = sweep15.GpuRowInputs(comp, name)
        t0 = time.time()
        try:
            row = tb.bench_one(path, comp, dict(sizes), dict(consts), reps=a.reps, peer=False)
        except Exception as e:  # noqa: BLE001
            print(f"{a.label:5s} {label:22s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
            recs.append(dict(config=label, error=f"{type(e).__name__}: {e}"[:500]))
            continue
        recs.append(dict(config=label, kernel=name, sizes=sizes, consts=consts, ms=row.ms, rel_err=row.rel_err,
                         ok=bool(row.ok), gbps=row.gbps, tflops=row.tflops, tkir=tkir.__file__,
                         s=round(time.time() - t0, 1)))
        print(f"{a.label:5s} {label:22s} {row.ms * 1e3:10.2f} us  {row.gbps:7.0f} GB/s  {row.tflops:7.1f} TFLOP/s"
              f"  err {row.rel_err:.1e} {'ok' if row.ok else 'WRONG'}", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"ab_{a.label}.json").write_text(json.dumps(recs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
