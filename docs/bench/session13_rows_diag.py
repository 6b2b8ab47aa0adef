"""Session 13, call 1: where issue 15's 14 row misses lose, before changing anything.

For each missed point (docs/bench/latest/session12/call7_sweep_rows) this times, interleaved as the
sweep does (tkir.bench.bench_one: fresh inputs checked first, L2 flush + host lead, medians), the
sweep's tuned consts and a few variants against eager torch and torch.compile; it times the floor
(a kernel that only copies the rows through registers) at the small points; it keeps Inductor's
generated Triton code (TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR) for reading; and (--ncu) it
profiles tkir's and Inductor's kernels at two points with Nsight Compute.

    python3 docs/bench/session13_rows_diag.py --out DIR [--only NAME,...] [--set 1|2|3|4]

Set 4 is session 14's (docs/bench/session14_call1.sh): the wide-row misses with layernorm's shifted
per-position chunk loop and 8-byte vector accesses (2048-wide chunks over 16 warps).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))
VAR = ROOT / "docs" / "bench" / "variants"

# (name, kernel, N, D, consts the session-12 sweep tuned, extra variants: label -> (path or None, consts))
POINTS = [
    ("ln_1_768", "layernorm", 1, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("rms_1_768", "rmsnorm", 1, 768, dict(ROWS=1, DC=16384, WG=2, OCC=0)),
    ("sm_1_768", "softmax", 1, 768, dict(ROWS=1, DC=1024, WG=2, OCC=4)),
    ("ln_128_768", "layernorm", 128, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("ln_65536_768", "layernorm", 65536, 768, dict(ROWS=4, DC=1024, WG=1, OCC=4)),
    ("ln_4096_8192", "layernorm", 4096, 8192, dict(ROWS=1, DC=8192, WG=2, OCC=4)),
    ("ln_4096_16384", "layernorm", 4096, 16384, dict(ROWS=1, DC=16384, WG=2, OCC=0)),
    ("rms_4096_8192", "rmsnorm", 4096, 8192, dict(ROWS=1, DC=16384, WG=2, OCC=4)),
    ("ln_65536_16384", "layernorm", 65536, 16384, dict(ROWS=1, DC=16384, WG=2, OCC=0)),
    ("rms_65536_8192", "rmsnorm", 65536, 8192, dict(ROWS=1, DC=8192, WG=2, OCC=4)),
]


# call 2 (--set 2): after split_idle_warps and the chunk loops' element-wise accumulators, the small
# rows with and without W loaded first, and chunked points at the wide rows
POINTS2 = [
    ("ln_1_768", "layernorm", 1, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("rms_1_768", "rmsnorm", 1, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("sm_1_768", "softmax", 1, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("ln_128_768", "layernorm", 128, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("rms_128_768", "rmsnorm", 128, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("ln_4096_16384", "layernorm", 4096, 16384, dict(ROWS=1, DC=16384, WG=2, OCC=0)),
    ("ln_65536_16384", "layernorm", 65536, 16384, dict(ROWS=1, DC=16384, WG=2, OCC=0)),
    ("rms_4096_8192", "rmsnorm", 4096, 8192, dict(ROWS=1, DC=16384, WG=2, OCC=4)),
]


def variants2(kernel: str, n: int, d: int, consts: dict) -> list[tuple[str, Path, dict]]:
    ex = ROOT / "examples" / f"{kernel}.tk"
    if d == 768:
        out = [("R1WG2", ex, consts), ("R1WG1", ex, {**consts, "WG": 1})]
        if kernel != "softmax":
            wf = VAR / "rows_wfirst" / f"{kernel}_wfirst.tk"
            out += [("wfWG2", wf, consts), ("wfWG1", wf, {**consts, "WG": 1})]
        return out
    out = [("tuned", ex, consts)]
    for wg, dc, occ in ((1, 2048, 0), (2, 2048, 4), (2, 4096, 0), (4, 4096, 0)):
        out.append((f"c{dc}w{wg}o{occ}", ex, {**consts, "WG": wg, "DC": dc, "OCC": occ}))
    return out


# call 3 (--set 3): @hoist_loads (the pass) at the small rows; at the wide rows the examples' chunk loop
# (a reduction per chunk) against the element-wise accumulators (variants/rows13/*_deferred.tk), both
# with infer-layouts' chunk width taken from the narrowest tile of a class (16-byte loads in the loop)
POINTS3 = [
    ("ln_1_768", "layernorm", 1, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("rms_1_768", "rmsnorm", 1, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("sm_1_768", "softmax", 1, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("ln_128_768", "layernorm", 128, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("rms_128_768", "rmsnorm", 128, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("sm_128_768", "softmax", 128, 768, dict(ROWS=1, DC=1024, WG=2, OCC=0)),
    ("ln_4096_8192", "layernorm", 4096, 8192, dict(ROWS=1, DC=8192, WG=2, OCC=4)),
    ("ln_4096_16384", "layernorm", 4096, 16384, dict(ROWS=1, DC=16384, WG=2, OCC=0)),
    ("ln_65536_16384", "layernorm", 65536, 16384, dict(ROWS=1, DC=16384, WG=2, OCC=0)),
    ("rms_4096_8192", "rmsnorm", 4096, 8192, dict(ROWS=1, DC=8192, WG=2, OCC=0)),
    ("rms_4096_16384", "rmsnorm", 4096, 16384, dict(ROWS=1, DC=16384, WG=4, OCC=0)),
    ("rms_65536_8192", "rmsnorm", 65536, 8192, dict(ROWS=1, DC=8192, WG=2, OCC=0)),
]


def variants3(kernel: str, n: int, d: int, consts: dict) -> list[tuple[str, Path, dict]]:
    ex = ROOT / "examples" / f"{kernel}.tk"
    if d == 768:
        out = [("R1WG2", ex, consts), ("R1WG1", ex, {**consts, "WG": 1})]
        if kernel != "softmax":
            out += [("hWG2", ex, {**consts, "HOIST": 1}), ("hWG1", ex, {**consts, "WG": 1, "HOIST": 1})]
        return out
    out = [("tuned", ex, consts), ("tunedH", ex, {**consts, "HOIST": 1})]
    dv = VAR / "rows13" / f"{kernel}_deferred.tk"
    for wg, dc in ((2, 2048), (4, 4096), (2, 4096), (4, 2048)):
        cs = {**consts, "WG": wg, "DC": dc, "OCC": 0}
        out += [(f"c{dc}w{wg}", ex, cs), (f"d{dc}w{wg}", dv, cs)]
    return out


# session 14, call 1 (--set 4): the wide-row misses of session 13's sweep (its tuned consts first), against
# chunk loops of 2048 / 4096 / 8192 columns over 8 or 16 warps, ptxas asked for 4 blocks or not
POINTS4 = [
    ("ln_4096_8192", "layernorm", 4096, 8192, dict(ROWS=1, DC=8192, WG=2, OCC=4, HOIST=0)),
    ("ln_4096_16384", "layernorm", 4096, 16384, dict(ROWS=1, DC=16384, WG=2, OCC=0, HOIST=0)),
    ("ln_65536_16384", "layernorm", 65536, 16384, dict(ROWS=1, DC=16384, WG=2, OCC=0, HOIST=0)),
    ("rms_4096_8192", "rmsnorm", 4096, 8192, dict(ROWS=1, DC=8192, WG=4, OCC=0, HOIST=1)),
    ("rms_4096_16384", "rmsnorm", 4096, 16384, dict(ROWS=1, DC=16384, WG=4, OCC=0, HOIST=0)),
    ("rms_65536_768", "rmsnorm", 65536, 768, dict(ROWS=16, DC=8192, WG=4, OCC=0, HOIST=1)),
]


def variants4(kernel: str, n: int, d: int, consts: dict) -> list[tuple[str, Path, dict]]:
    ex = ROOT / "examples" / f"{kernel}.tk"
    out = [("tuned", ex, consts)]
    if d == 768:
        for rows, wg, occ in ((4, 1, 4), (8, 2, 4), (8, 1, 0), (2, 1, 4)):
            out.append((f"R{rows}w{wg}o{occ}", ex, {**consts, "ROWS": rows, "WG": wg, "OCC": occ, "HOIST": 0}))
        return out
    for dc, wg, occ in ((2048, 4, 4), (2048, 4, 0), (4096, 4, 4), (4096, 4, 0), (2048, 2, 4), (4096, 2, 4),
                        (1024, 2, 4), (8192, 4, 0)):
        if dc < d:
            out.append((f"c{dc}w{wg}o{occ}", ex, {**consts, "DC": dc, "WG": wg, "OCC": occ, "HOIST": 0}))
    return out


def variants(kernel: str, n: int, d: int, consts: dict) -> list[tuple[str, Path, dict]]:
    ex = ROOT / "examples" / f"{kernel}.tk"
    out = [("tuned", ex, consts)]
    if kernel in ("layernorm", "rmsnorm") and consts["DC"] >= d:
        out.append(("wfirst", VAR / "rows_wfirst" / f"{kernel}_wfirst.tk", consts))
    if d == 768 and n <= 128:
        out += [("R1WG1", ex, {**consts, "ROWS": 1, "WG": 1, "OCC": 0}),
                ("R4WG1", ex, {**consts, "ROWS": 4, "WG": 1, "OCC": 0})]
    if d >= 8192 and kernel == "layernorm":
        out.append(("WG4", ex, {**consts, "WG": 4, "OCC": 0}))
        out.append(("DC4096", ex, {**consts, "DC": 4096, "WG": 2, "OCC": 4}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--set", type=int, default=1, help="1, 2, 3: the points and variants of session 13's calls "
                                                      "1, 2, 3; 4: session 14's call 1")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import sweep15
    import torch

    import tkir
    import tkir.bench as tb
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    copy = tb.copy_bandwidth(torch)
    only = set(filter(None, a.only.split(",")))
    recs = []
    lines = [f"copy {copy:.0f} GB/s"]
    points, var = {1: (POINTS, variants), 2: (POINTS2, variants2), 3: (POINTS3, variants3),
                   4: (POINTS4, variants4)}[a.set]
    for name, kernel, n, d, consts in points:
        if only and name not in only:
            continue
        for label, path, cs in var(kernel, n, d, consts):
            torch._dynamo.reset()
            tb._INDUCTOR.clear()
            comp = load_companion(str(path))
            comp = sweep15.GpuRowInputs(comp, kernel)
            cs = {**cs, "D": d}
            t0 = time.time()
            try:
                row = tb.bench_one(str(path), comp, {"N": n}, cs, reps=a.reps)
            except Exception as e:  # noqa: BLE001
                lines.append(f"{name:16s} {label:8s} ERROR {type(e).__name__}: {str(e)[:200]}")
                continue
            comp_ms = (row.extra_ms or {}).get("compiled")
            rec = dict(point=name, variant=label, consts=cs, ms=row.ms, eager_ms=row.peer_ms, compiled_ms=comp_ms,
                       rel_err=row.rel_err, ok=bool(row.ok), gbps=row.gbps, pct_copy=100 * row.gbps / copy,
                       x_compiled=comp_ms / row.ms if comp_ms else None, s=round(time.time() - t0, 1))
            recs.append(rec)
            cms = comp_ms * 1e3 if comp_ms else 0.0
            lines.append(f"{name:16s} {label:8s} {row.ms * 1e3:9.2f} us  compiled {cms:9.2f} us"
                         f"  x{rec['x_compiled'] or 0:.3f} compiled  {rec['pct_copy']:5.1f}% copy"
                         f"  err {row.rel_err:.1e} {'ok' if row.ok else 'WRONG'}")
            print(lines[-1], flush=True)
    # the floor: rows copied through registers, nothing else
    rc = VAR / "rows13" / "rowcopy.tk"
    for n, d, wg in ((1, 768, 1), (1, 768, 2), (128, 768, 1), (4096, 16384, 4)):
        if (only and "floor" not in only) or a.set != 1:
            break
        k = tkir.compile(str(rc), D=d, WG=wg, ROWS=1)
        sets = [[torch.randn(n, d, device="cuda").to(torch.bfloat16), torch.empty(n, d, device="cuda",
                 dtype=torch.bfloat16)] for _ in range(4)]
        k(*sets[0])
        torch.cuda.synchronize()
        assert torch.equal(sets[0][0], sets[0][1])
        ms = tb.time_ms(torch, lambda i, k=k, sets=sets: (lambda: k(*sets[i])), 4, a.reps, 5)
        lines.append(f"floor rowcopy N={n} D={d} WG={wg}: {ms * 1e3:.2f} us  ({4 * n * d / ms / 1e6:.0f} GB/s)")
        print(lines[-1], flush=True)
    (out / "diag.json").write_text(json.dumps(recs, indent=1))
    (out / "diag.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
