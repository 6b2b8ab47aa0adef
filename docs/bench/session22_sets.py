"""Session 22, call 4: does the tuner disagree with the bench harness at the few-microsecond row points
because it rotates 3 input sets where tkir.bench.bench_one rotates 16 (tkir.bench.rotation_sets)?

For each point: `tune` (forced, no cache) twice with the tuner's 3 sets and twice with bench_one's count,
then every distinct chosen configuration (and HOIST = FENCE = 1) through bench_one against eager torch and
torch.compile, two rounds in opposite orders.

    python3 docs/bench/session22_sets.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

POINTS = [("layernorm", {"N": 1}, {"D": 768}), ("rmsnorm", {"N": 128}, {"D": 768})]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import sweep15
    import torch

    import tkir.bench as tb
    import tkir.tune as tt
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    torch._dynamo.config.cache_size_limit = 64
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out: dict = {"points": []}
    three = tt.tune_sets

    def bench_like(comp, sizes, consts):
        return tb.rotation_sets(comp.bytes_moved(sizes, consts))

    for kern, sizes, fixed in POINTS:
        path = str(ROOT / "examples" / f"{kern}.tk")
        comp = sweep15.row_companion(load_companion(path), kern, False)[0]
        rec: dict = {"kernel": kern, "sizes": sizes, "tunes": []}
        for mode, fn in (("3 sets", three), ("bench sets", bench_like), ("3 sets", three), ("bench sets", bench_like)):
            tt.tune_sets = fn
            t0 = time.time()
            res = tt.tune(path, sizes, fixed=fixed, reps=20, force=True, companion=comp)
            again = sorted((c.again_ms, c.label()) for c in res.candidates if c.again_ms is not None)
            rec["tunes"].append({"mode": mode, "best": res.best, "s": time.time() - t0,
                                 "again": [(lab, ms) for ms, lab in again]})
            print(f"{kern} {sizes} tune with {mode}: best {res.best} ({time.time() - t0:.0f} s); re-timed: "
                  + "; ".join(f"{lab} {1e3 * ms:.2f}" for ms, lab in again[:4]), flush=True)
        tt.tune_sets = three
        cands = {json.dumps(t["best"], sort_keys=True) for t in rec["tunes"]}
        hf = dict(rec["tunes"][0]["best"], HOIST=1, FENCE=1)
        cands.add(json.dumps(hf, sort_keys=True))
        cands = [json.loads(c) for c in sorted(cands)]
        rows = []
        for rnd, order in enumerate((cands, cands[::-1])):
            for consts in order:
                r = tb.bench_one(path, comp, sizes, consts, reps=30)
                c = (r.extra_ms or {}).get("compiled")
                rows.append({"round": rnd, "consts": consts, "us": 1e3 * r.ms, "x_compiled": c / r.ms,
                             "x_eager": r.peer_ms / r.ms, "ok": r.ok})
        rec["bench"] = rows
        out["points"].append(rec)
        (out_dir / "sets22.json").write_text(json.dumps(out, indent=1, default=str))
    print("\n== which configuration each tune chose, and bench_one's view of them (x torch.compile, two rounds)")
    for rec in out["points"]:
        print(f"{rec['kernel']} {rec['sizes']}")
        for t in rec["tunes"]:
            b = {k: v for k, v in t["best"].items() if k in ("ROWS", "WG", "OCC", "HOIST", "FENCE")}
            print(f"  tune ({t['mode']:10s}): {b}")
        seen = []
        for row in rec["bench"]:
            key = json.dumps({k: v for k, v in row["consts"].items() if k in ("ROWS", "WG", "OCC", "HOIST", "FENCE")})
            if key in seen:
                continue
            seen.append(key)
            xs = [f"{r['us']:.2f} us x{r['x_compiled']:.3f}" for r in rec["bench"] if r["consts"] == row["consts"]]
            print(f"  bench {key}: " + " | ".join(xs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
