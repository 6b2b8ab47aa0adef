"""Session 18: the readonly-loads pass (ld.global.nc on tensors a kernel never writes) at issue 15's row
misses. Each configuration is compiled twice, with the default pipeline ("nc") and without
readonly-loads ("plain"), checked against the reference on fresh inputs (sweep15's GPU-mirror inputs),
then every variant of a point is timed in one tkir.bench.time_pair_ms call beside eager torch and
torch.compile (order rotated from rep to rep). Columns: variant us, and nc / plain speed (plain ms / nc
ms, > 1: the pass is faster), and x compiled (compiled ms / variant ms).

    python3 docs/bench/session18_rows.py --out DIR [--reps 30]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

L16 = [dict(DC=16384, WG=2, OCC=0), dict(DC=8192, WG=2, OCC=0), dict(DC=4096, WG=2, OCC=0),
       dict(DC=2048, WG=4, OCC=4), dict(DC=4096, WG=2, OCC=0, REREAD=1), dict(DC=4096, WG=4, OCC=4)]
L8 = [dict(DC=8192, WG=2, OCC=4), dict(DC=4096, WG=2, OCC=0), dict(DC=2048, WG=2, OCC=4),
      dict(DC=2048, WG=4, OCC=4), dict(DC=4096, WG=2, OCC=0, REREAD=1)]
POINTS = [  # (kernel, N, D, configurations; ROWS = 1 unless given)
    ("layernorm", 65536, 16384, L16), ("layernorm", 4096, 16384, L16), ("layernorm", 4096, 8192, L8),
    ("rmsnorm", 65536, 8192, [dict(DC=8192, WG=2, OCC=0, HOIST=1), dict(DC=4096, WG=2, OCC=0),
                              dict(DC=2048, WG=4, OCC=4)]),
    ("rmsnorm", 65536, 16384, [dict(DC=16384, WG=4, OCC=0), dict(DC=4096, WG=2, OCC=0)]),
    ("softmax", 65536, 16384, [dict(DC=16384, WG=2, OCC=0), dict(DC=4096, WG=2, OCC=0)]),
    ("layernorm", 1, 768, [dict(DC=1024, WG=1, OCC=0, HOIST=1), dict(DC=1024, WG=1, OCC=0, HOIST=1, FENCE=1)]),
    ("layernorm", 65536, 768, [dict(ROWS=4, DC=1024, WG=1, OCC=8, FENCE=1)]),
    ("softmax", 4096, 4096, [dict(DC=4096, WG=1, OCC=0)]),
]


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
    plain = ",".join(p for p in tkir.api.default_pipeline() if p != "readonly-loads")
    recs, lines = [], []
    for kern, n, d, configs in POINTS:
        path = str(ROOT / "examples" / f"{kern}.tk")
        comp = sweep15.GpuRowInputs(load_companion(path), kern)
        sizes = {"N": n}
        variants = {}
        for cfg in configs:
            consts = {"ROWS": 1, **cfg, "D": d}
            if kern == "softmax":
                consts = {k: v for k, v in consts.items() if k not in ("HOIST", "REREAD")}
            label = " ".join(f"{k}={v}" for k, v in cfg.items())
            variants[("nc", label)] = (consts, tkir.compile(path, **consts))
            variants[("plain", label)] = (consts, tkir.compile(path, passes=plain, **consts))
        consts0 = next(iter(variants.values()))[0]
        nbytes = comp.bytes_moved(sizes, consts0)
        nsets = max(2, min(tb.MAX_ROTATE_SETS, -(-int(tb.ROTATE_FACTOR * tb.L2_BYTES) // nbytes),
                           max(1, tb.ROTATE_BUDGET // nbytes)))
        sets = [comp.torch_inputs(sizes, consts0) for _ in range(nsets)]
        ref = comp.torch_reference(sets[0], sizes, consts0)["Y"]
        errs = {}
        for key, (_, k) in variants.items():
            sets[0][-1].fill_(float("nan"))
            k(*sets[0])
            torch.cuda.synchronize()
            errs[key] = float(tb._rel_err(torch, sets[0][-1], ref))
        fns = [(lambda i, s=sets, k=k: (lambda: k(*s[i]))) for _, k in variants.values()]
        fns += [lambda i, s=sets, c=comp, z=sizes, q=consts0: c.peer(s[i], z, q),
                lambda i, s=sets, c=comp, z=sizes, q=consts0: c.extra_peer("compiled", s[i], z, q)]
        ms = tb.time_pair_ms(torch, fns, nsets, a.reps, 5, rotate=True)
        t = dict(zip([*variants, "eager", "compiled"], ms, strict=True))
        ok = all(e < 1e-2 for e in errs.values())
        head = (f"{kern} {n}x{d}: eager {1e3 * t['eager']:.2f} us, compiled {1e3 * t['compiled']:.2f} us, "
                f"max err {max(errs.values()):.1e} {'ok' if ok else 'WRONG'}")
        print(head, flush=True)
        lines.append(head)
        for cfg in configs:
            label = " ".join(f"{k}={v}" for k, v in cfg.items())
            tn, tp = t[("nc", label)], t[("plain", label)]
            line = (f"  {label:34s} nc {1e3 * tn:9.2f} us  plain {1e3 * tp:9.2f} us  nc/plain x{tp / tn:.3f}  "
                    f"x compiled: nc {t['compiled'] / tn:.3f} plain {t['compiled'] / tp:.3f}")
            print(line, flush=True)
            lines.append(line)
        recs.append(dict(kernel=kern, N=n, D=d, ms={" / ".join(k) if isinstance(k, tuple) else k: v
                                                    for k, v in t.items()},
                         rel_err={" / ".join(k): v for k, v in errs.items()}))
        del sets, fns, variants
        torch.cuda.empty_cache()
    # the other examples whose PTX the pass changes (scripts/ptx_md5.py): the companion's numpy inputs
    others = (("rotary", {"T": 65536}), ("rotary", {"T": 262144}), ("linear", {"M": 4096, "N": 4096, "K": 4096}))
    for name, sizes in others:
        import numpy as np

        path = str(ROOT / "examples" / f"{name}.tk")
        comp = load_companion(path)
        kn, kp = tkir.compile(path), tkir.compile(path, passes=plain)
        host = [comp.make_inputs(np.random.default_rng(s), sizes, {}) for s in range(3)]
        sets = [[tb._to_torch(torch, x) for x in h] for h in host]
        ref = comp.reference(host[0], sizes, {})
        errs = []
        for k in (kn, kp):
            k(*sets[0])
            torch.cuda.synchronize()
            for o, r in ref.items():
                errs.append(float(tb._rel_err(torch, sets[0][comp.PARAMS.index(o)].cpu(), torch.from_numpy(r))))
        fns = [(lambda i, k=k, s=sets: (lambda: k(*s[i]))) for k in (kn, kp)]
        fns.append(lambda i, c=comp, z=sizes, s=sets: c.peer(s[i], z, {}))
        tn, tp, tpeer = tb.time_pair_ms(torch, fns, len(sets), a.reps, 5, rotate=True)
        line = (f"{name} {sizes}: nc {1e3 * tn:.2f} us  plain {1e3 * tp:.2f} us  nc/plain x{tp / tn:.3f}  "
                f"peer {1e3 * tpeer:.2f} us  max err {max(errs):.1e}")
        print(line, flush=True)
        lines.append(line)
        recs.append(dict(kernel=name, sizes=sizes, ms=dict(nc=tn, plain=tp, peer=tpeer), rel_err=max(errs)))
        del sets, fns
        torch.cuda.empty_cache()
    (out / "rows18.json").write_text(json.dumps(recs, indent=1))
    print(f"\n== session 18 rows: readonly-loads on (nc) and off (plain); medians of {a.reps} rotated reps")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
