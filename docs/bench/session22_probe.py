"""Session 22, call 1: why the tuner picks BN = 128 for the GEMM at N = 128256 while the sweep's bench_one
harness measures BN = 256 faster (session 21 call 3: 1.013 / 1.022x cuBLAS against 0.942 / 0.958x), and
the row points at the edge of their bars, each in the sweep's own harness.

GEMM (M = 4096 and 16384, N = 128256, K = 4096): the same compiled kernels timed (a) all together with
cuBLAS in one interleaved group, (b) the tkir ones without cuBLAS, (c) each paired with cuBLAS alone (as
bench_one does), then `tune` at M = 4096 (forced: no cache), whole space and BM = 128 STAGES = 4 fixed.
Rows: tkir.bench.bench_one (eager and torch.compile peers), two rounds in opposite orders.

    python3 docs/bench/session22_probe.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

G = {"BK": 64}
GEMM_CFGS = {
    "BM128 BN128 ST4 SK1 SKI32": {**G, "BM": 128, "BN": 128, "STAGES": 4, "SK": 1, "SKI": 32},
    "BM128 BN128 ST4 SK0": {**G, "BM": 128, "BN": 128, "STAGES": 4, "SK": 0, "SKI": 16},
    "BM128 BN256 ST4 SK0": {**G, "BM": 128, "BN": 256, "STAGES": 4, "SK": 0, "SKI": 16},
    "BM128 BN256 ST4 SK1 SKI16": {**G, "BM": 128, "BN": 256, "STAGES": 4, "SK": 1, "SKI": 16},
    "BM64 BN256 ST4 SK1 SKI16": {**G, "BM": 64, "BN": 256, "STAGES": 4, "SK": 1, "SKI": 16},
}
LN768 = {"ROWS": 1, "D": 768, "DC": 1024, "OCC": 0, "REREAD": 0, "CL": 1, "WG": 1}
LN8K = {"ROWS": 1, "D": 8192, "DC": 8192, "REREAD": 0, "CL": 1}
ROWS = [  # (label, kernel, sizes, consts)
    ("ln 1x768 tuned", "layernorm", {"N": 1}, LN768),
    ("ln 1x768 HOIST FENCE", "layernorm", {"N": 1}, {**LN768, "HOIST": 1, "FENCE": 1}),
    ("rms 128x768 tuned", "rmsnorm", {"N": 128}, {"ROWS": 2, "D": 768, "DC": 1024, "WG": 1, "FENCE": 1}),
    ("rms 128x768 R1 HOIST FENCE", "rmsnorm", {"N": 128}, {"ROWS": 1, "D": 768, "DC": 1024, "WG": 1, "HOIST": 1,
                                                          "FENCE": 1}),
    ("ln 4096x8192 tuned", "layernorm", {"N": 4096}, {**LN8K, "WG": 1, "OCC": 4}),
    ("ln 4096x8192 WG2 OCC4 HOIST", "layernorm", {"N": 4096}, {**LN8K, "WG": 2, "OCC": 4, "HOIST": 1}),
    ("ln 4096x8192 WG1 OCC4 HOIST", "layernorm", {"N": 4096}, {**LN8K, "WG": 1, "OCC": 4, "HOIST": 1}),
]


def gemm_part(torch, out: dict, reps: int) -> None:
    import tkir
    from tkir.bench import _rel_err, time_pair_ms
    from tkir.examples import load_companion

    path = str(ROOT / "examples" / "gemm.tk")
    comp = load_companion(path)
    for M, names in ((4096, list(GEMM_CFGS)), (16384, ["BM128 BN128 ST4 SK0", "BM128 BN256 ST4 SK0",
                                                         "BM128 BN256 ST4 SK1 SKI16"])):
        sizes = {"M": M, "N": 128256, "K": 4096}
        flops = comp.flops(sizes, {})
        sets = [comp.torch_inputs(sizes, {}) for _ in range(2)]
        ref = sets[0][0].float() @ sets[0][1].float()
        ks = {}
        for n in names:
            k = tkir.compile(path, **GEMM_CFGS[n])
            k(*sets[0])
            torch.cuda.synchronize()
            err = _rel_err(torch, sets[0][2].float(), ref)
            ks[n] = k
            print(f"M={M} {n}: rel err {err:.2e}", flush=True)
            out.setdefault("gemm_err", {})[f"{M} {n}"] = err
        del ref
        tk = [(lambda i, k=ks[n], s=sets: (lambda: k(*s[i]))) for n in names]
        cub = lambda i, s=sets: (lambda: torch.matmul(s[i][0], s[i][1], out=s[i][2]))  # noqa: E731
        res = {}
        ms = time_pair_ms(torch, tk + [cub], 2, reps, 5)
        res["group+cublas"] = dict(zip(names + ["cublas"], ms, strict=True))
        ms = time_pair_ms(torch, tk, 2, reps, 5)
        res["group"] = dict(zip(names, ms, strict=True))
        res["pairs"] = {}
        for n, f in zip(names, tk, strict=True):
            a, b = time_pair_ms(torch, [f, cub], 2, reps, 5)
            res["pairs"][n] = {"tkir": a, "cublas": b}
        out[f"gemm M={M}"] = res
        print(f"\nM={M} N=128256 K=4096 (ms; TFLOP/s; x cuBLAS of the same group)")
        cb = res["group+cublas"]["cublas"]
        for n in names:
            g1, g2, p = res["group+cublas"][n], res["group"][n], res["pairs"][n]
            print(f"  {n:28s} group+cuBLAS {g1:7.3f} ({flops / g1 / 1e9:5.0f}, x{cb / g1:.3f})  group {g2:7.3f} "
                  f"({flops / g2 / 1e9:5.0f})  pair {p['tkir']:7.3f} x{p['cublas'] / p['tkir']:.3f}", flush=True)
        print(f"  cuBLAS in group: {cb:.3f} ms ({flops / cb / 1e9:.0f})", flush=True)
        del sets, ks
        torch.cuda.empty_cache()


def tune_part(out: dict, reps: int) -> None:
    from tkir.tune import format_result, tune

    path = str(ROOT / "examples" / "gemm.tk")
    for label, fixed in (("whole space", None), ("BM=128 STAGES=4", {"BM": 128, "STAGES": 4})):
        t0 = time.time()
        res = tune(path, {"M": 4096, "N": 128256, "K": 4096}, fixed=fixed, reps=reps, force=True)
        table = format_result(res)
        again = [(c.label(), c.ms, c.again_ms) for c in res.candidates if c.again_ms is not None]
        out[f"tune {label}"] = {"best": res.best, "s": time.time() - t0, "table": table, "again": again}
        print(f"\ntune {label}: best {res.best} in {time.time() - t0:.0f} s; re-timed: "
              + "; ".join(f"{lab} {a:.3f}->{b:.3f}" for lab, a, b in again), flush=True)
        print("\n".join(table.splitlines()[:10]), flush=True)


def rows_part(torch, out: dict, reps: int) -> None:
    import sweep15

    import tkir.bench as tb
    from tkir.examples import load_companion

    rows = []
    for rnd, order in enumerate((ROWS, ROWS[::-1])):
        for label, kern, sizes, consts in order:
            path = str(ROOT / "examples" / f"{kern}.tk")
            comp = sweep15.row_companion(load_companion(path), kern, False)[0]
            r = tb.bench_one(path, comp, sizes, consts, reps=reps)
            c = (r.extra_ms or {}).get("compiled")
            row = dict(round=rnd, label=label, us=1e3 * r.ms, x_eager=r.peer_ms / r.ms, x_compiled=c / r.ms,
                       gbps=r.gbps, ok=r.ok, rel_err=r.rel_err)
            rows.append(row)
            print(f"round {rnd} {label:30s} {row['us']:8.2f} us x eager {row['x_eager']:.3f} x compiled "
                  f"{row['x_compiled']:.3f} {row['gbps']:.0f} GB/s {'ok' if r.ok else 'WRONG'}", flush=True)
    out["rows"] = rows
    out["copy_gbps"] = tb.copy_bandwidth(torch)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--parts", default="gemm,tune,rows")
    a = ap.parse_args()
    import sweep15
    import torch

    import tkir.bench as tb

    sweep15.patch_rel_err(tb)
    torch._dynamo.config.cache_size_limit = 64
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out: dict = {"gpu": torch.cuda.get_device_name(0)}
    parts = a.parts.split(",")
    try:
        if "gemm" in parts:
            gemm_part(torch, out, a.reps)
        if "tune" in parts:
            tune_part(out, 10)
        if "rows" in parts:
            rows_part(torch, out, 30)
    finally:
        (out_dir / "probe22.json").write_text(json.dumps(out, indent=1, default=str))
    if "rows" in out:
        print(f"\n== rows (copy {out['copy_gbps']:.0f} GB/s): us per round, x eager, x compiled, % of copy")
        for label, *_ in ROWS:
            rs = [r for r in out["rows"] if r["label"] == label]
            print(f"{label:30s} " + "  |  ".join(f"{r['us']:.2f} {r['x_eager']:.3f} {r['x_compiled']:.3f} "
                                                 f"{100 * r['gbps'] / out['copy_gbps']:.1f}%" for r in rs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
