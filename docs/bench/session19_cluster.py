"""Session 19: a block over a cluster of two CTAs (cluster-rows, `@cluster(CL)`) at the wide-row points:
each row example at its session 17/18 tuned configurations (CL = 1) and with CL = 2. Each configuration is
checked against the reference on fresh inputs (sweep15's GPU-mirror inputs), then every variant of a point
is timed in one tkir.bench.time_pair_ms call beside eager torch and torch.compile (order rotated from rep to
rep, inputs rotated past L2). Columns: us, x compiled (compiled ms / variant ms), % of the copy bandwidth
measured in the same run (bytes = read X + write Y).

    python3 docs/bench/session19_cluster.py --out DIR [--reps 30]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))


def _cfgs(*cs: str) -> list[dict]:
    return [dict(kv.split("=") for kv in c.split()) for c in cs]


L16 = _cfgs("DC=16384 WG=2 OCC=0 HOIST=1", "DC=4096 WG=2 OCC=4", "CL=2 DC=16384 WG=2 OCC=4",
            "CL=2 DC=16384 WG=2 OCC=4 HOIST=1", "CL=2 DC=16384 WG=4 OCC=4", "CL=2 DC=16384 WG=4 OCC=2",
            "CL=2 DC=4096 WG=2 OCC=4")
L8 = _cfgs("DC=8192 WG=1 OCC=4 HOIST=1", "DC=8192 WG=2 OCC=4", "CL=2 DC=8192 WG=2 OCC=8",
           "CL=2 DC=8192 WG=2 OCC=4", "CL=2 DC=8192 WG=1 OCC=8", "CL=2 DC=8192 WG=4 OCC=4")
R8 = _cfgs("DC=8192 WG=2 OCC=0", "DC=4096 WG=4 OCC=4 REREAD=1", "CL=2 DC=8192 WG=2 OCC=8",
           "CL=2 DC=8192 WG=2 OCC=4", "CL=2 DC=8192 WG=1 OCC=8", "CL=2 DC=8192 WG=4 OCC=4")
POINTS = [  # (kernel, N, D, configurations); ROWS = 1 everywhere
    ("layernorm", 65536, 16384, L16), ("layernorm", 4096, 16384, L16), ("layernorm", 65536, 8192, L8),
    ("layernorm", 4096, 8192, L8), ("rmsnorm", 65536, 8192, R8), ("rmsnorm", 4096, 8192, R8),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    return run_points(POINTS, Path(a.out), a.reps, "cluster19.json", "session 19 cluster-rows")


def run_points(points: list, out: Path, reps: int, json_name: str, title: str) -> int:
    """Each (kernel, N, D, configurations) point: every configuration checked on fresh inputs, then all
    timed in one rotated group beside eager torch and torch.compile; a table per point, JSON records."""
    import sweep15
    import torch

    torch._dynamo.config.cache_size_limit = 64   # one compiled peer per shape
    import tkir
    import tkir.bench as tb
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    out.mkdir(parents=True, exist_ok=True)
    copy = tb.copy_bandwidth(torch)
    recs, lines = [], [f"copy bandwidth, same run: {copy:.0f} GB/s"]
    print(lines[0], flush=True)
    for kern, n, d, configs in points:
        src = str(ROOT / "examples" / f"{kern}.tk")
        comp = sweep15.GpuRowInputs(load_companion(src), kern)
        sizes = {"N": n}
        variants = {}
        for cfg in configs:
            consts = {"ROWS": 1, **{k: int(v) for k, v in cfg.items()}, "D": d}
            label = " ".join(f"{k}={v}" for k, v in cfg.items())
            try:
                variants[label] = tkir.compile(src, **consts)
                variants[label].asm["ptx"]  # noqa: B018 - compile now: a refused point is left out here
            except Exception as e:  # noqa: BLE001 - reported, the point goes on
                print(f"  {label}: not compiled: {str(e).splitlines()[0]}", flush=True)
                variants.pop(label, None)
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
        ms = tb.time_pair_ms(torch, fns, nsets, reps, 5, rotate=True)
        t = dict(zip([*variants, "eager", "compiled"], ms, strict=True))
        ok = all(e < 1e-2 for e in errs.values())
        xb = 2 * n * d * 2   # X read, Y written
        head = (f"{kern} {n}x{d}: eager {1e3 * t['eager']:.2f} us, compiled {1e3 * t['compiled']:.2f} us "
                f"({100 * xb / t['compiled'] / 1e6 / copy:.1f}% of copy), max err {max(errs.values()):.1e} "
                f"{'ok' if ok else 'WRONG'}")
        print(head, flush=True)
        lines.append(head)
        for key in variants:
            line = (f"  {key:36s} {1e3 * t[key]:9.2f} us  x compiled {t['compiled'] / t[key]:.3f}  "
                    f"{100 * xb / t[key] / 1e6 / copy:5.1f}% of copy  err {errs[key]:.1e}")
            print(line, flush=True)
            lines.append(line)
        recs.append(dict(kernel=kern, N=n, D=d, ms=t, rel_err=errs, copy_gbps=copy))
        del sets, fns, variants
        torch.cuda.empty_cache()
    (out / json_name).write_text(json.dumps(recs, indent=1))
    print(f"\n== {title}: medians of {reps} rotated reps")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
