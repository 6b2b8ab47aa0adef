"""Session 16: a screen for issue 15's latency-bound row kernels (few rows). ptxas issues layernorm's
hoisted W and Bias loads after the first shuffles of X's row sum, i.e. after X has arrived: two DRAM
round trips where one would do (docs/experiments.md, session 15). Variant `fence` puts a
`fence.acq_rel.cta` right after the last global load before the first shuffle, which ptxas does not
move loads across (the SASS then issues every LDG before the first SHFL). As session15_hints.py: each
point compiled once with its session-15 tuned configuration, the PTX rewritten, every variant checked
against the reference on fresh inputs first, then all variants and torch.compile timed interleaved
(tkir.bench.time_pair_ms). A screen to pick what to build, not a product path.

Biased, found afterwards (call 8, docs/bench/session16_position.py): it ran before time_pair_ms rotated its
order, so "base" was always timed first and the fenced kernel second, and at ~4 us the second of two
kernels reading the same inputs runs 10-15% faster. Its 5-15% for the fence was that; the A/B with both
orders (docs/bench/session16_ab.py --set fence) found none.

    python3 docs/bench/session16_small.py --out DIR [--reps 50]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

# issue 15's small-row points with the configuration session 15's sweep tuned for each (its x compiled)
POINTS = [
    ("layernorm", 1, dict(ROWS=1, D=768, DC=1024, WG=1, OCC=4, HOIST=1)),      # 0.919
    ("layernorm", 1, dict(ROWS=1, D=4096, DC=4096, WG=2, OCC=0, HOIST=1)),     # 1.051
    ("layernorm", 128, dict(ROWS=1, D=768, DC=1024, WG=1, OCC=0, HOIST=1)),    # 0.961
    ("layernorm", 128, dict(ROWS=1, D=4096, DC=4096, WG=2, OCC=0, HOIST=1)),   # 0.977
    ("layernorm", 4096, dict(ROWS=8, D=768, DC=1024, WG=2, OCC=4, HOIST=0)),   # 0.946
    ("rmsnorm", 1, dict(ROWS=1, D=4096, DC=4096, WG=2, OCC=0, HOIST=1)),       # 0.959
    ("rmsnorm", 128, dict(ROWS=1, D=768, DC=1024, WG=1, OCC=4, HOIST=1)),      # 0.919
    ("rmsnorm", 128, dict(ROWS=1, D=8192, DC=16384, WG=2, OCC=4, HOIST=0)),    # 0.944
    ("rmsnorm", 4096, dict(ROWS=8, D=768, DC=1024, WG=4, OCC=4, HOIST=1)),     # 0.934
    ("softmax", 128, dict(ROWS=1, D=768, DC=1024, WG=1, OCC=8)),               # 0.940
]
FENCE = "\tfence.acq_rel.cta;\n"


def fence_after_loads(ptx: str) -> str:
    """A fence after the last global load that precedes the first shuffle (unchanged without either)."""
    i = ptx.find("shfl.sync")
    j = ptx.rfind("ld.global", 0, i) if i >= 0 else -1
    if j < 0:
        return ptx
    k = ptx.index("\n", j)
    return ptx[:k + 1] + FENCE + ptx[k + 1:]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    import sweep15
    import torch

    import tkir
    import tkir.bench as tb
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    names = ["base", "fence"]
    recs, table = [], []
    for idx, (kern, n, consts) in enumerate(POINTS):
        path = str(ROOT / "examples" / f"{kern}.tk")
        comp = sweep15.GpuRowInputs(load_companion(path), kern)
        sizes = {"N": n}
        kernels = {}
        for v in names:
            k = tkir.compile(path, **consts)
            k.lower()
            if v == "fence":
                k.asm["ptx"] = fence_after_loads(k.asm["ptx"])
            (out / f"p{idx}_{v}.ptx").write_text(k.asm["ptx"])
            kernels[v] = k
        nbytes = comp.bytes_moved(sizes, consts)
        nsets = max(2, min(tb.MAX_ROTATE_SETS, -(-int(tb.ROTATE_FACTOR * tb.L2_BYTES) // nbytes),
                           max(1, tb.ROTATE_BUDGET // nbytes)))
        sets = [comp.torch_inputs(sizes, consts) for _ in range(nsets)]
        errs = {}
        for v, k in kernels.items():   # correctness first: fresh NaN output, every variant
            sets[0][-1].fill_(float("nan"))
            k(*sets[0])
            torch.cuda.synchronize()
            ref = comp.torch_reference(sets[0], sizes, consts)["Y"]
            errs[v] = float(tb._rel_err(torch, sets[0][-1], ref))
        fns = [(lambda i, k=k, s=sets: (lambda: k(*s[i]))) for k in kernels.values()]
        fns.append(lambda i, s=sets, c=comp, z=sizes, q=consts: c.extra_peer("compiled", s[i], z, q))
        ms = tb.time_pair_ms(torch, fns, nsets, a.reps, 5)
        rec = dict(point=idx, kernel=kern, N=n, consts=consts, ms=dict(zip([*names, "compiled"], ms, strict=True)),
                   rel_err=errs)
        recs.append(rec)
        base, fence, comp_ms = rec["ms"]["base"], rec["ms"]["fence"], rec["ms"]["compiled"]
        line = (f"{kern:9s} {n:5d}x{consts['D']:<5d} base {1e3 * base:6.2f} us  fence {1e3 * fence:6.2f} us "
                f"(x{base / fence:.3f})  compiled {1e3 * comp_ms:6.2f} us  x compiled: base {comp_ms / base:.3f} "
                f"fence {comp_ms / fence:.3f}  maxerr {max(errs.values()):.1e}")
        print(line, flush=True)
        table.append(line)
        del sets, fns
        torch.cuda.empty_cache()
    (out / "small.json").write_text(json.dumps(recs, indent=1))
    print("\n== small rows: base, fence after the hoisted loads, torch.compile (medians, interleaved)")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
