"""Session 17: issue 15's weakest row points, each as the sweep tuned it (session 15) and with the research
pass fence-loads added, timed in one tkir.bench.time_pair_ms call together with eager torch and
torch.compile (order rotated from rep to rep, so each kernel runs equally often in each position).

Every kernel is checked against the reference on fresh inputs first (sweep15's GPU-mirror inputs).
Speed columns are peer ms / variant ms (> 1: the variant is faster).

    python3 docs/bench/session17_rows.py --out DIR [--reps 40]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

# (kernel, N, D): session 15's misses and the neighbours that passed by a few percent
POINTS = [("layernorm", 1, 768), ("layernorm", 1, 4096), ("layernorm", 128, 768), ("layernorm", 128, 4096),
          ("layernorm", 4096, 768), ("rmsnorm", 1, 768), ("rmsnorm", 128, 768), ("softmax", 1, 768),
          ("layernorm", 4096, 8192), ("layernorm", 4096, 16384), ("layernorm", 65536, 768),
          ("layernorm", 65536, 16384), ("rmsnorm", 65536, 8192)]


def tuned(kern: str, n: int, d: int) -> dict:
    for line in (ROOT / "docs/bench/latest/session15/sweep/sweep.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("kernel") == kern and r["sizes"]["N"] == n and r["consts"]["D"] == d:
            return r["consts"]
    raise KeyError((kern, n, d))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=40)
    a = ap.parse_args()
    import sweep15
    import torch

    import tkir
    import tkir.bench as tb
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    fenced = ",".join(p + (",fence-loads" if p == "hoist-loads" else "") for p in tkir.api.default_pipeline())
    recs, lines = [], []
    for kern, n, d in POINTS:
        path = str(ROOT / "examples" / f"{kern}.tk")
        consts = tuned(kern, n, d)
        comp = sweep15.GpuRowInputs(load_companion(path), kern)
        sizes = {"N": n}
        variants = {"tuned": tkir.compile(path, **consts)}
        if n <= 128 or (n == 4096 and d == 768):   # latency-bound: where fence-loads could matter
            variants["fence"] = tkir.compile(path, passes=fenced, **consts)
        nbytes = comp.bytes_moved(sizes, consts)
        nsets = max(2, min(tb.MAX_ROTATE_SETS, -(-int(tb.ROTATE_FACTOR * tb.L2_BYTES) // nbytes),
                           max(1, tb.ROTATE_BUDGET // nbytes)))
        sets = [comp.torch_inputs(sizes, consts) for _ in range(nsets)]
        ref = comp.torch_reference(sets[0], sizes, consts)["Y"]
        errs = {}
        for name, k in variants.items():
            sets[0][-1].fill_(float("nan"))
            k(*sets[0])
            torch.cuda.synchronize()
            errs[name] = float(tb._rel_err(torch, sets[0][-1], ref))
        fns = [(lambda i, s=sets, k=k: (lambda: k(*s[i]))) for k in variants.values()]
        fns += [lambda i, s=sets, c=comp, z=sizes, q=consts: c.peer(s[i], z, q),
                lambda i, s=sets, c=comp, z=sizes, q=consts: c.extra_peer("compiled", s[i], z, q)]
        ms = tb.time_pair_ms(torch, fns, nsets, a.reps, 5, rotate=True)
        names = [*variants, "eager", "compiled"]
        t = dict(zip(names, ms, strict=True))
        recs.append(dict(kernel=kern, N=n, D=d, consts=consts, ms=t, rel_err=errs))
        cols = "  ".join(f"{v} {1e3 * t[v]:8.2f} us x{t['eager'] / t[v]:.3f}/x{t['compiled'] / t[v]:.3f}"
                         for v in variants)
        ok = all(e < 1e-2 for e in errs.values())
        line = (f"{kern:9s} {n:5d}x{d:<5d} {cols}  | eager {1e3 * t['eager']:8.2f}  compiled "
                f"{1e3 * t['compiled']:8.2f} us  err {max(errs.values()):.1e} {'ok' if ok else 'WRONG'}")
        print(line, flush=True)
        lines.append(line)
        del sets, fns, variants
        torch.cuda.empty_cache()
    (out / "rows17.json").write_text(json.dumps(recs, indent=1))
    print("\n== session 17 rows (x eager / x compiled; rotated order, medians of", a.reps, "reps)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
