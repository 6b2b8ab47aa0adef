"""Session 18: fuse-row-stats measured. layernorm written with row_mean / row_var
(docs/bench/variants/layernorm_welford.tk) through the default pipeline ("fused": one exchange for
both) and without fuse-row-stats ("apart": a row-sum exchange for the mean, a Welford exchange for
the variance), beside examples/layernorm.tk (the mean's exchange, then the centred values': "s17"),
same configuration; every kernel checked first, then all timed in one rotated time_pair_ms call with
eager torch and torch.compile (dynamo's recompile limit raised: eleven shapes).

    python3 docs/bench/session18_fuse.py --out DIR [--reps 40]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

POINTS = [  # (N, D, configuration)
    (1, 768, dict(ROWS=1, DC=1024, WG=1, HOIST=1)), (128, 768, dict(ROWS=1, DC=1024, WG=1, OCC=4, HOIST=1, FENCE=1)),
    (128, 4096, dict(ROWS=1, DC=4096, WG=2, HOIST=1)), (4096, 768, dict(ROWS=2, DC=1024, WG=1, OCC=4, HOIST=1)),
    (4096, 16384, dict(ROWS=1, DC=16384, WG=2, HOIST=1)), (65536, 16384, dict(ROWS=1, DC=16384, WG=2, HOIST=1)),
]


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

    torch._dynamo.config.cache_size_limit = 64
    sweep15.patch_rel_err(tb)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    welford, s17 = str(ROOT / "docs/bench/variants/layernorm_welford.tk"), str(ROOT / "examples/layernorm.tk")
    apart = [p for p in tkir.api.default_pipeline() if p != "fuse-row-stats"]
    comp = sweep15.GpuRowInputs(load_companion(s17), "layernorm")
    recs, lines = [], []
    for n, d, cfg in POINTS:
        consts = {**cfg, "D": d}
        sizes = {"N": n}
        ks = {"fused": tkir.compile(welford, **consts), "apart": tkir.compile(welford, passes=apart, **consts),
              "s17": tkir.compile(s17, **consts)}
        assert "stats = 0" in ks["fused"].ir and "stats = " not in ks["apart"].ir
        nbytes = comp.bytes_moved(sizes, consts)
        nsets = max(2, min(tb.MAX_ROTATE_SETS, -(-int(tb.ROTATE_FACTOR * tb.L2_BYTES) // nbytes),
                           max(1, tb.ROTATE_BUDGET // nbytes)))
        sets = [comp.torch_inputs(sizes, consts) for _ in range(nsets)]
        ref = comp.torch_reference(sets[0], sizes, consts)["Y"]
        errs = {}
        for name, k in ks.items():
            sets[0][-1].fill_(float("nan"))
            k(*sets[0])
            torch.cuda.synchronize()
            errs[name] = float(tb._rel_err(torch, sets[0][-1], ref))
        fns = [(lambda i, s=sets, k=k: (lambda: k(*s[i]))) for k in ks.values()]
        fns += [lambda i, s=sets, q=consts, z=sizes: comp.peer(s[i], z, q),
                lambda i, s=sets, q=consts, z=sizes: comp.extra_peer("compiled", s[i], z, q)]
        ms = tb.time_pair_ms(torch, fns, nsets, a.reps, 5, rotate=True)
        t = dict(zip([*ks, "eager", "compiled"], ms, strict=True))
        ok = all(e < 1e-2 for e in errs.values())
        label = " ".join(f"{k}={v}" for k, v in cfg.items())
        line = (f"{n:5d}x{d:<5d} {label:38s} fused {1e3 * t['fused']:8.2f}  apart {1e3 * t['apart']:8.2f}  "
                f"s17 {1e3 * t['s17']:8.2f} us  apart/fused x{t['apart'] / t['fused']:.3f}  s17/fused "
                f"x{t['s17'] / t['fused']:.3f}  compiled {1e3 * t['compiled']:.2f} us  err {max(errs.values()):.1e} "
                f"{'ok' if ok else 'WRONG'}")
        print(line, flush=True)
        lines.append(line)
        recs.append(dict(N=n, D=d, consts=consts, ms=t, rel_err=errs,
                         regs={k: v.asm["ptxas"].registers for k, v in ks.items()}))
        del sets, fns, ks
        torch.cuda.empty_cache()
    (out / "fuse18.json").write_text(json.dumps(recs, indent=1))
    print(f"\n== session 18 fuse-row-stats; medians of {a.reps} rotated reps")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
