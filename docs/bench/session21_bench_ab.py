"""Session 21: the points the one-call sweep (call 2) missed, in the sweep's own harness: each variant is
one tkir.bench.bench_one (correctness first, then tkir, eager torch / cuBLAS and torch.compile timed
interleaved, L2 flushed, rotated order, median of --reps), the whole list run twice in opposite orders.
Layernorm 1 x 768 measured 1.009x torch.compile among 11 interleaved kernels (call 1) but 0.953x in
the sweep's 3-kernel bench_one; the GEMM at N = 128256 0.941x cuBLAS (0.958x in session 20).

    python3 docs/bench/session21_bench_ab.py --out DIR [--reps 30]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

DEFAULT = ("canonicalize,legalize-mma,fold-scale,contract-fma,fuse-row-stats,hoist-loads,fence-loads{opt_in=true},"
           "infer-layouts,select-swizzle,bank-conflicts,create-tma,cache-policy,readonly-loads,cluster-rows,"
           "plan-occupancy,pipeline,pipeline-cp-async,early-release,persistent,stream-k{opt_in=true},split-masks,"
           "overlap-mma,pingpong,canonicalize")
NO_POLICY = DEFAULT.replace("cache-policy,", "")
LN = {"ROWS": 1, "D": 768, "DC": 1024, "OCC": 0, "REREAD": 0, "CL": 1}
VARIANTS = [  # (label, kernel, sizes, consts, compile kwargs)
    ("ln tuned WG=1", "layernorm", {"N": 1}, {**LN, "WG": 1}, {}),
    ("ln WG=1 HOIST", "layernorm", {"N": 1}, {**LN, "WG": 1, "HOIST": 1}, {}),
    ("ln WG=1 HOIST FENCE", "layernorm", {"N": 1}, {**LN, "WG": 1, "HOIST": 1, "FENCE": 1}, {}),
    ("ln NW=2 HOIST", "layernorm", {"N": 1}, {**LN, "NW": 2, "HOIST": 1}, {}),
    ("ln NW=1 HOIST", "layernorm", {"N": 1}, {**LN, "NW": 1, "HOIST": 1}, {}),
    ("ln WG=1 no cache-policy", "layernorm", {"N": 1}, {**LN, "WG": 1}, {"passes": NO_POLICY}),
    ("ln WG=1 HOIST no cache-policy", "layernorm", {"N": 1}, {**LN, "WG": 1, "HOIST": 1}, {"passes": NO_POLICY}),
    ("rms128 tuned", "rmsnorm", {"N": 128}, {"ROWS": 2, "D": 768, "DC": 1024, "WG": 1, "FENCE": 1}, {}),
    ("rms128 NW=2", "rmsnorm", {"N": 128}, {"ROWS": 2, "D": 768, "DC": 1024, "NW": 2, "HOIST": 1}, {}),
    ("gemm 4096x128256 tuned", "gemm", {"M": 4096, "N": 128256, "K": 4096},
     {"BM": 128, "BN": 128, "BK": 64, "STAGES": 4, "SK": 1, "SKI": 32}, {}),
    ("gemm 4096x128256 BN=256", "gemm", {"M": 4096, "N": 128256, "K": 4096},
     {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "SK": 0, "SKI": 16}, {}),
    ("gemm 4096x128256 group 16", "gemm", {"M": 4096, "N": 128256, "K": 4096},
     {"BM": 128, "BN": 128, "BK": 64, "STAGES": 4, "SK": 1, "SKI": 32},
     {"passes": DEFAULT.replace("persistent,", "persistent{group_m=16},")}),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    import sweep15
    import torch

    import tkir.bench as tb
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    torch._dynamo.config.cache_size_limit = 64
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for rnd, order in enumerate((VARIANTS, VARIANTS[::-1])):
        for label, kern, sizes, consts, kw in order:
            path = str(ROOT / "examples" / f"{kern}.tk")
            comp = load_companion(path)
            if kern != "gemm":
                comp = sweep15.row_companion(comp, kern, False)[0]
            r = tb.bench_one(path, comp, sizes, consts, reps=a.reps, compile_kw=kw)
            comp_ms = (r.extra_ms or {}).get("compiled")
            row = dict(round=rnd, label=label, us=1e3 * r.ms, peer_us=1e3 * r.peer_ms,
                       compiled_us=1e3 * comp_ms if comp_ms else None, x_peer=r.peer_ms / r.ms,
                       x_compiled=comp_ms / r.ms if comp_ms else None, rel_err=r.rel_err, ok=r.ok)
            rows.append(row)
            print(f"round {rnd} {label:32s} {row['us']:10.2f} us  peer {row['peer_us']:10.2f}  x{row['x_peer']:.3f}  "
                  + (f"compiled {row['compiled_us']:.2f} x{row['x_compiled']:.3f}" if comp_ms else "")
                  + f"  err {r.rel_err:.1e} {'ok' if r.ok else 'WRONG'}", flush=True)
            torch.cuda.empty_cache()
    (out / "bench_ab21.json").write_text(json.dumps(rows, indent=1))
    print("\n== session 21 bench_one A/B (x_peer: eager or cuBLAS; x_compiled: torch.compile)")
    for label, *_ in VARIANTS:
        rs = [r for r in rows if r["label"] == label]
        xs = " ".join(f"{r['x_peer']:.3f}" for r in rs)
        xc = " ".join(f"{r['x_compiled']:.3f}" for r in rs if r["x_compiled"])
        us = " ".join(f"{r['us']:.2f}" for r in rs)
        print(f"{label:32s} us {us:24s} x peer {xs:14s} x compiled {xc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
