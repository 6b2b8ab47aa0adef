"""Session 16, call 8: does the position of a kernel in tkir.bench.time_pair_ms's interleaved order change
its time? And issue 15's latency-bound row points against eager torch and torch.compile with the order
rotated (the fix) beside the fixed order of sessions 8-15.

* A-vs-A: the same compiled kernel timed twice in one time_pair_ms call, fixed order (rotate=False:
  the first always first) and rotated; the ratio first / second should be 1.
* Peers: each point as bench_one times it (tkir, eager, torch.compile, interleaved), fixed and rotated.

Every kernel is checked against the reference on fresh inputs first (sweep15's GPU-mirror inputs).

    python3 docs/bench/session16_position.py --out DIR [--reps 30]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

AA_POINTS = [  # (kernel, N, consts): small and large
    ("layernorm", 1, dict(ROWS=1, D=768, DC=1024, WG=1, OCC=4, HOIST=1)),
    ("rmsnorm", 128, dict(ROWS=1, D=768, DC=1024, WG=1, OCC=4, HOIST=1)),
    ("softmax", 128, dict(ROWS=1, D=768, DC=1024, WG=1, OCC=8)),
    ("layernorm", 65536, {}),
]


def sweep_points() -> list[tuple[str, int, dict]]:
    """Issue 15's row points with N <= 128, and D = 768 at N = 4096, with session 15's tuned configurations."""
    pts = []
    for line in (ROOT / "docs/bench/latest/session15/sweep/sweep.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("part") == "rows" and r.get("status") == "ok" and (
                r["sizes"]["N"] <= 128 or (r["sizes"]["N"] == 4096 and r["consts"]["D"] == 768)):
            pts.append((r["kernel"], r["sizes"]["N"], r["consts"]))
    return pts


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    import sweep15
    import torch

    import tkir
    import tkir.bench as tb
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    recs, lines = [], []

    def setup(kern: str, n: int, consts: dict):
        path = str(ROOT / "examples" / f"{kern}.tk")
        comp = sweep15.GpuRowInputs(load_companion(path), kern)
        sizes = {"N": n}
        k = tkir.compile(path, **consts)
        nbytes = comp.bytes_moved(sizes, consts)
        nsets = max(2, min(tb.MAX_ROTATE_SETS, -(-int(tb.ROTATE_FACTOR * tb.L2_BYTES) // nbytes),
                           max(1, tb.ROTATE_BUDGET // nbytes)))
        sets = [comp.torch_inputs(sizes, consts) for _ in range(nsets)]
        sets[0][-1].fill_(float("nan"))
        k(*sets[0])
        torch.cuda.synchronize()
        err = float(tb._rel_err(torch, sets[0][-1], comp.torch_reference(sets[0], sizes, consts)["Y"]))
        return comp, sizes, k, sets, nsets, err

    for kern, n, consts in AA_POINTS:
        comp, sizes, k, sets, nsets, err = setup(kern, n, consts)
        fns = [(lambda i, s=sets, k=k: (lambda: k(*s[i]))) for _ in range(2)]
        fixed = tb.time_pair_ms(torch, fns, nsets, a.reps, 5, rotate=False)
        rot = tb.time_pair_ms(torch, fns, nsets, a.reps, 5, rotate=True)
        rec = dict(what="A-vs-A", kernel=kern, N=n, consts=consts, fixed_ms=fixed, rotated_ms=rot, rel_err=err)
        recs.append(rec)
        line = (f"A-vs-A {kern:9s} {n:5d}x{consts.get('D', 1024):<5d} fixed {1e3 * fixed[0]:7.2f} / "
                f"{1e3 * fixed[1]:7.2f} us"
                f" (first/second x{fixed[0] / fixed[1]:.3f})  rotated {1e3 * rot[0]:7.2f} / {1e3 * rot[1]:7.2f} us"
                f" (x{rot[0] / rot[1]:.3f})  err {err:.1e}")
        print(line, flush=True)
        lines.append(line)
    for kern, n, consts in sweep_points():
        comp, sizes, k, sets, nsets, err = setup(kern, n, consts)
        fns = [lambda i, s=sets, k=k: (lambda: k(*s[i])),
               lambda i, s=sets, c=comp, z=sizes, q=consts: c.peer(s[i], z, q),
               lambda i, s=sets, c=comp, z=sizes, q=consts: c.extra_peer("compiled", s[i], z, q)]
        fixed = tb.time_pair_ms(torch, fns, nsets, a.reps, 5, rotate=False)
        rot = tb.time_pair_ms(torch, fns, nsets, a.reps, 5, rotate=True)
        rec = dict(what="peers", kernel=kern, N=n, consts=consts, fixed_ms=fixed, rotated_ms=rot, rel_err=err)
        recs.append(rec)
        line = (f"peers  {kern:9s} {n:5d}x{consts['D']:<5d} tkir {1e3 * rot[0]:6.2f} us  x eager / x compiled:"
                f" fixed {fixed[1] / fixed[0]:.3f} / {fixed[2] / fixed[0]:.3f}  rotated {rot[1] / rot[0]:.3f} /"
                f" {rot[2] / rot[0]:.3f}  err {err:.1e}")
        print(line, flush=True)
        lines.append(line)
        del sets, fns
        torch.cuda.empty_cache()
    (out / "position.json").write_text(json.dumps(recs, indent=1))
    print("\n== position in the interleaved order (fixed: rotate=False, the order of sessions 8-15)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
