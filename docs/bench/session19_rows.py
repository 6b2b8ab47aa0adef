"""Session 19: does a rows loop help layernorm's wide rows? docs/bench/variants/rows19/layernorm_rows.tk
normalizes RPB row tiles per block one after another (PF = 1: the next row's loads issued before the
current row's reductions) against examples/layernorm.tk's tuned configurations. Each configuration is
checked against the reference on fresh inputs (sweep15's GPU-mirror inputs), then every variant of a point
is timed in one tkir.bench.time_pair_ms call beside eager torch and torch.compile (order rotated from rep to
rep, inputs rotated past L2). Columns: us, x compiled (compiled ms / variant ms), % of the copy bandwidth
measured in the same run (bytes = read X + write Y).

    python3 docs/bench/session19_rows.py --out DIR [--reps 30]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))
EX = str(ROOT / "examples" / "layernorm.tk")
ROWS_V = str(ROOT / "docs" / "bench" / "variants" / "rows19" / "layernorm_rows.tk")


def _rows(wg: int, rpb: int, pf: int, occ: int = 0) -> tuple[str, dict]:
    return ROWS_V, dict(WG=wg, RPB=rpb, PF=pf, OCC=occ)


POINTS = [  # (N, D, [(source, consts)]); ROWS = 1 everywhere
    (65536, 16384, [(EX, dict(DC=16384, WG=2, OCC=0, HOIST=1)), (EX, dict(DC=4096, WG=2, OCC=0)),
                    _rows(2, 2, 0), _rows(2, 4, 0), _rows(2, 8, 0), _rows(2, 16, 0), _rows(2, 4, 1),
                    _rows(2, 16, 1), _rows(4, 4, 1, 1), _rows(4, 16, 1, 1), _rows(4, 4, 0, 1)]),
    (4096, 16384, [(EX, dict(DC=4096, WG=2, OCC=4)), (EX, dict(DC=16384, WG=2, OCC=0, HOIST=1)),
                   _rows(2, 2, 0), _rows(2, 2, 1), _rows(4, 2, 1, 1)]),
    (65536, 8192, [(EX, dict(DC=8192, WG=1, OCC=4, HOIST=1)), _rows(1, 4, 0, 4), _rows(1, 16, 0, 4),
                   _rows(2, 4, 1, 2), _rows(2, 16, 1, 2)]),
    (4096, 8192, [(EX, dict(DC=8192, WG=1, OCC=4, HOIST=1)), _rows(1, 2, 0, 4), _rows(2, 2, 1, 2)]),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    import sweep15
    import torch

    torch._dynamo.config.cache_size_limit = 64   # one compiled peer per shape
    import tkir
    import tkir.bench as tb
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    copy = tb.copy_bandwidth(torch)
    recs, lines = [], [f"copy bandwidth, same run: {copy:.0f} GB/s"]
    print(lines[0], flush=True)
    comp = sweep15.GpuRowInputs(load_companion(EX), "layernorm")
    for n, d, configs in POINTS:
        sizes = {"N": n}
        variants = {}
        for src, cfg in configs:
            consts = {"ROWS": 1, **cfg, "D": d}
            label = ("rows " if src == ROWS_V else "ex   ") + " ".join(f"{k}={v}" for k, v in cfg.items())
            variants[label] = tkir.compile(src, **consts)
        consts0 = {"ROWS": 1, "D": d}
        nbytes = comp.bytes_moved(sizes, {**consts0, "DC": d})
        nsets = max(2, min(tb.MAX_ROTATE_SETS, -(-int(tb.ROTATE_FACTOR * tb.L2_BYTES) // nbytes),
                           max(1, tb.ROTATE_BUDGET // nbytes)))
        sets = [comp.torch_inputs(sizes, consts0) for _ in range(nsets)]
        ref = comp.torch_reference(sets[0], sizes, consts0)["Y"]
        errs = {}
        for key, k in variants.items():
            sets[0][-1].fill_(float("nan"))
            k(*sets[0])
            torch.cuda.synchronize()
            errs[key] = float(tb._rel_err(torch, sets[0][-1], ref))
        fns = [(lambda i, s=sets, k=k: (lambda: k(*s[i]))) for k in variants.values()]
        fns += [lambda i, s=sets, c=comp, z=sizes, q=consts0: c.peer(s[i], z, q),
                lambda i, s=sets, c=comp, z=sizes, q=consts0: c.extra_peer("compiled", s[i], z, q)]
        ms = tb.time_pair_ms(torch, fns, nsets, a.reps, 5, rotate=True)
        t = dict(zip([*variants, "eager", "compiled"], ms, strict=True))
        ok = all(e < 1e-2 for e in errs.values())
        xb = 2 * n * d * 2   # X read, Y written
        head = (f"layernorm {n}x{d}: eager {1e3 * t['eager']:.2f} us, compiled {1e3 * t['compiled']:.2f} us "
                f"({100 * xb / t['compiled'] / 1e6 / copy:.1f}% of copy), max err {max(errs.values()):.1e} "
                f"{'ok' if ok else 'WRONG'}")
        print(head, flush=True)
        lines.append(head)
        for key in variants:
            line = (f"  {key:40s} {1e3 * t[key]:9.2f} us  x compiled {t['compiled'] / t[key]:.3f}  "
                    f"{100 * xb / t[key] / 1e6 / copy:5.1f}% of copy  err {errs[key]:.1e}")
            print(line, flush=True)
            lines.append(line)
        recs.append(dict(kernel="layernorm", N=n, D=d, ms=t, rel_err=errs, copy_gbps=copy))
        del sets, fns, variants
        torch.cuda.empty_cache()
    (out / "rows19.json").write_text(json.dumps(recs, indent=1))
    print(f"\n== session 19 rows loop: medians of {a.reps} rotated reps")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
