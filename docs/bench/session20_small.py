"""Session 20, issue 15: the decode-time GEMMs (M = 1, 16, 64) in more configurations than gemm.tk's
@tune space holds (deeper rings, BK = 128, other Stream-K splits), beside cuBLAS and a read of B alone.

Each shape's variants are checked against torch.matmul on fresh inputs, then timed interleaved with
cuBLAS in one tkir.bench.time_pair_ms call (order rotated from rep to rep, inputs rotated past the L2, the
L2 flushed by zeroing 256 MB before every run as triton.testing.do_bench does). "read B" is
`torch.sum(B, dim=0)` into f32: a peer that reads B once and writes little, for the floor that the
flush's dirty lines leave (every kernel here first writes back what the flush left in the L2).

    python3 docs/bench/session20_small.py --out DIR [--reps 30] [--set call1]

Writes DIR/small20.json and prints a table last (us, x cuBLAS = cuBLAS us / variant us).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
GEMM = str(ROOT / "examples" / "gemm.tk")


def _v(spec: str, sk: str | None = None) -> tuple[str, dict, str | None]:
    """'BN=64 STAGES=12' (BM=64 BK=64 SK=1 unless given) and an optional stream-k parameter text."""
    consts = {"BM": 64, "BK": 64, "SK": 1, **{k: int(v) for k, v in (kv.split("=") for kv in spec.split())}}
    label = spec + (f" stream-k{{{sk}}}" if sk else "")
    return label, consts, sk


SETS = {
    "call1": {
        (64, 4096, 4096): [_v("BN=64 STAGES=8"), _v("BN=64 STAGES=12"), _v("BN=64 BK=128 STAGES=6"),
                           _v("BN=128 STAGES=8"), _v("BN=128 BK=128 STAGES=4"), _v("BN=256 STAGES=4"),
                           _v("BN=64 STAGES=8", "min_iters=32"), _v("BN=64 STAGES=12", "min_iters=32"),
                           _v("BN=64 STAGES=8", "min_iters=8"), _v("BN=64 STAGES=8 SK=0")],
        (16, 4096, 4096): [_v("BN=128 STAGES=6"), _v("BN=128 STAGES=8"), _v("BN=64 STAGES=12"),
                           _v("BN=128 BK=128 STAGES=4"), _v("BN=64 BK=128 STAGES=6"),
                           _v("BN=128 STAGES=8", "min_iters=32"), _v("BN=64 STAGES=12", "min_iters=32")],
        (1, 4096, 4096): [_v("BN=128 STAGES=8"), _v("BN=64 STAGES=12"), _v("BN=128 BK=128 STAGES=4"),
                          _v("BN=64 BK=128 STAGES=6"), _v("BN=128 STAGES=8", "min_iters=32")],
        (64, 4096, 14336): [_v("BN=64 STAGES=8"), _v("BN=64 STAGES=12"), _v("BN=64 BK=128 STAGES=6"),
                            _v("BN=128 STAGES=8"), _v("BN=64 STAGES=12", "min_iters=32")],
    },
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--set", default="call1", choices=sorted(SETS))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    import tkir
    from tkir.bench import L2_BYTES, MAX_ROTATE_SETS, ROTATE_FACTOR, _rel_err, time_pair_ms

    recs, lines = [], []
    for (m, n, k), variants in SETS[a.set].items():
        nbytes = 2 * (m * k + k * n + m * n)
        nsets = max(2, min(MAX_ROTATE_SETS, math.ceil(ROTATE_FACTOR * L2_BYTES / nbytes)))
        sets = [(torch.randn(m, k, device="cuda").bfloat16(), torch.randn(k, n, device="cuda").bfloat16(),
                 torch.empty(m, n, device="cuda", dtype=torch.bfloat16)) for _ in range(nsets)]
        sums = [torch.empty(n, device="cuda", dtype=torch.float32) for _ in range(nsets)]
        ref = sets[0][0].float() @ sets[0][1].float()
        labels, fns, errs = [], [], {}
        for label, consts, sk in variants:
            passes = None
            if sk:
                passes = ",".join(f"stream-k{{opt_in=true,{sk}}}" if p.startswith("stream-k") else p
                                  for p in tkir.api.default_pipeline())
            try:
                kern = tkir.compile(GEMM, **({"passes": passes} if passes else {}), **consts)
                c = sets[0][2]
                c.fill_(float("nan"))
                kern(*sets[0])
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - a configuration that does not compile or run is a row
                print(f"  {m}x{n}x{k} {label}: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
                continue
            errs[label] = float(_rel_err(torch, sets[0][2].float(), ref))
            labels.append(label)
            fns.append(lambda i, kern=kern, s=sets: (lambda: kern(*s[i])))
        labels += ["cuBLAS", "read B"]
        fns += [lambda i, s=sets: (lambda: torch.matmul(s[i][0], s[i][1], out=s[i][2])),
                lambda i, s=sets, u=sums: (lambda: torch.sum(s[i][1], dim=0, dtype=torch.float32, out=u[i]))]
        ms = dict(zip(labels, time_pair_ms(torch, fns, nsets, a.reps, 5), strict=True))
        head = (f"M={m} N={n} K={k}: cuBLAS {1e3 * ms['cuBLAS']:.2f} us, read B {1e3 * ms['read B']:.2f} us "
                f"({k * n * 2 / ms['read B'] / 1e6:.0f} GB/s)")
        print(head, flush=True)
        lines.append(head)
        for label in labels[:-2]:
            ok = errs[label] < 1e-2
            line = (f"  {label:44s} {1e3 * ms[label]:8.2f} us  x cuBLAS {ms['cuBLAS'] / ms[label]:.3f}  "
                    f"err {errs[label]:.1e}{'' if ok else ' WRONG'}")
            print(line, flush=True)
            lines.append(line)
        recs.append(dict(M=m, N=n, K=k, ms=ms, rel_err=errs))
        del sets, sums
        torch.cuda.empty_cache()
    (out / "small20.json").write_text(json.dumps(recs, indent=1))
    print(f"\n== session 20 small-M GEMM: medians of {a.reps} rotated reps")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
