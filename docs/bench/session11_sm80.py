"""Session 11, issue 13 item 4: the mma.sync path on the H200, one process, every kernel checked first.

    python3 docs/bench/session11_sm80.py --json OUT.json [--reps 20] [--only gemm,attn,ceiling]

* ceiling: docs/bench/claims/mma_ceiling.tk (mma.sync on register operands, no memory traffic in the loop)
  with 132 x BPS blocks of 4 warps, BPS = 1, 2, 4 (4, 8, 16 warps per SM), and mma_smem_ceiling.tk (the
  gemm's k-tile, ldmatrix + mma.sync from shared memory, 8 warps of 64 x 64, one block per SM);
* gemm at 4096^3: gemm.tk on sm_80 in several tile shapes and warp counts (docs/bench/variants/gemm_warps:
  @warpgroups(consumers=WG) gives 4 x WG warps), beside the wgmma gemm (sm_90a), each against torch.matmul;
* attention at (8, 16, 4096, 128): attention_fwd.tk on sm_80 at BQ x BKV, against SDPA's cuDNN backend
  and FA2 (its flash backend), interleaved.
Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

GEMM_SIZES = dict(M=4096, N=4096, K=4096)
GEMM_ROWS = [  # (label, path, target, consts)
    ("wgmma gemm (sm_90a default)", "examples/gemm.tk", "sm_90a", {}),
    ("sm_80 256x128x64 S4, 8 warps", "examples/gemm.tk", "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4)),
    ("sm_80 128x256x64 S4, 8 warps", "examples/gemm.tk", "sm_80", dict(BM=128, BN=256, BK=64, STAGES=4)),
    ("sm_80 256x128x64 S3, 16 warps", "docs/bench/variants/gemm_warps/gemm_wg.tk", "sm_80",
     dict(BM=256, BN=128, BK=64, STAGES=3, WG=4)),
    ("sm_80 256x128x64 S4, 16 warps", "docs/bench/variants/gemm_warps/gemm_wg.tk", "sm_80",
     dict(BM=256, BN=128, BK=64, STAGES=4, WG=4)),
    ("sm_80 128x256x64 S4, 16 warps", "docs/bench/variants/gemm_warps/gemm_wg.tk", "sm_80",
     dict(BM=128, BN=256, BK=64, STAGES=4, WG=4)),
    ("sm_80 128x128x64 S3, 4 warps", "docs/bench/variants/gemm_warps/gemm_wg.tk", "sm_80",
     dict(BM=128, BN=128, BK=64, STAGES=3, WG=1)),
    ("sm_80 128x128x32 S4, 4 warps", "docs/bench/variants/gemm_warps/gemm_wg.tk", "sm_80",
     dict(BM=128, BN=128, BK=32, STAGES=4, WG=1)),
]
# session 12: the cp.async producer warps (plan-occupancy{producer_warps=P}, pipeline's sm_80 roles);
# "pwP" rows run the default pipeline with that parameter, "pwPnp" also without `persistent`
_G = "examples/gemm.tk"
GEMM_ROWS_S12 = [
    GEMM_ROWS[0],
    *[(f"sm_80 {bm}x{bn}x64 S4 {v}", _G, "sm_80", dict(BM=bm, BN=bn, BK=64, STAGES=4), v)
      for bm, bn in ((256, 128), (128, 256)) for v in ("pw0", "pw1", "pw4", "pw4np")],
]
GEMM_ROWS_S12B = [  # call 3: BK = 32 (half the copies and ldmatrix addresses per k-tile), 2 producer warps
    GEMM_ROWS[0],
    *[(f"sm_80 {bm}x{bn}x{bk} S{st} {v}", _G, "sm_80", dict(BM=bm, BN=bn, BK=bk, STAGES=st), v)
      for bm, bn, bk, st, v in ((256, 128, 32, 4, "pw0"), (256, 128, 32, 6, "pw0"), (256, 128, 32, 4, "pw4np"),
                                (256, 128, 32, 6, "pw4np"), (128, 256, 32, 4, "pw0"), (128, 256, 32, 6, "pw4np"),
                                (256, 128, 64, 4, "pw2np"), (256, 128, 64, 4, "pw0"), (256, 128, 64, 4, "pw4np"))],
]
GEMM_ROWS_S12C = [  # call 4: the new default (4 producer warps, not persistent) against its ablation, twice
    GEMM_ROWS[0],
    *[(f"sm_80 {bm}x{bn}x64 S4 {v or 'default'} #{i}", _G, "sm_80", dict(BM=bm, BN=bn, BK=64, STAGES=4),
       *([v] if v else [])) for i in (1, 2) for bm, bn in ((256, 128), (128, 256)) for v in (None, "pw0")],
]
ATTN_SIZES = dict(B=8, H=16, N=4096)
ATTN_ROWS = [  # call 1's rows
    ("sm_80 BQ=64 BKV=64 (default)", dict(D=128)),
    ("sm_80 BQ=128 BKV=64", dict(D=128, BQ=128, BKV=64)),
    ("sm_80 BQ=128 BKV=32", dict(D=128, BQ=128, BKV=32)),
    ("sm_80 BQ=192 BKV=64", dict(D=128, BQ=192, BKV=64)),
    ("sm_80 BQ=128 BKV=64 S3", dict(D=128, BQ=128, BKV=64, STAGES=3)),
    ("sm_80 BQ=128 BKV=64 causal", dict(D=128, BQ=128, BKV=64, CAUSAL=1)),
    ("sm_80 BQ=64 BKV=64 causal", dict(D=128, CAUSAL=1)),
]
def _with(replace: dict[str, str], drop: tuple[str, ...] = ()) -> str:
    """The default pipeline with some passes replaced (name -> entry) and some left out."""
    import tkir

    return ",".join(replace.get(p, p) for p in tkir.api.default_pipeline() if p not in drop)


PASS_VARIANTS = {  # a row's optional last field -> its pass pipeline
    "norot": lambda: _with({"pipeline-cp-async": "pipeline-cp-async{hold=0}"}),
    **{f"pw{n}": (lambda n=n: _with({"plan-occupancy": f"plan-occupancy{{producer_warps={n}}}"}))
       for n in (0, 1, 2, 4)},
    **{f"pw{n}np": (lambda n=n: _with({"plan-occupancy": f"plan-occupancy{{producer_warps={n}}}"}, ("persistent",)))
       for n in (1, 2, 4)},
}
ATTN_ROWS_CALL4 = [  # call 4: overlap-mma on the mma.sync path (a held stage: S >= 3), twice each, interleaved
    *[row for i in (1, 2) for row in (
        (f"BQ=128 BKV=64 S2 (call 1's best) #{i}", dict(D=128, BQ=128, BKV=64)),
        (f"BQ=128 BKV=32 S3 rotated #{i}", dict(D=128, BQ=128, BKV=32, STAGES=3)),
        (f"BQ=128 BKV=32 S3 not rotated #{i}", dict(D=128, BQ=128, BKV=32, STAGES=3), "norot"),
        (f"BQ=128 BKV=32 S4 rotated #{i}", dict(D=128, BQ=128, BKV=32, STAGES=4)))],
    ("BQ=128 BKV=32 S3 rotated causal", dict(D=128, BQ=128, BKV=32, STAGES=3, CAUSAL=1)),
    ("BQ=128 BKV=64 S2 causal", dict(D=128, BQ=128, BKV=64, CAUSAL=1)),
    ("D=64 BQ=128 BKV=64 S3 rotated", dict(D=64, BQ=128, BKV=64, STAGES=3)),
    ("D=64 BQ=128 BKV=64 S2", dict(D=64, BQ=128, BKV=64)),
]
ATTN_ROWS_CALL5 = [  # call 5: the rotation's ablation at equal stages, and the bar's row again
    *[row for i in (1, 2) for row in (
        (f"BQ=128 BKV=64 S2 #{i}", dict(D=128, BQ=128, BKV=64)),
        (f"D=64 BQ=128 BKV=64 S3 rotated #{i}", dict(D=64, BQ=128, BKV=64, STAGES=3)),
        (f"D=64 BQ=128 BKV=64 S3 not rotated #{i}", dict(D=64, BQ=128, BKV=64, STAGES=3), "norot"),
        (f"BQ=128 BKV=32 S4 rotated #{i}", dict(D=128, BQ=128, BKV=32, STAGES=4)),
        (f"BQ=128 BKV=32 S4 not rotated #{i}", dict(D=128, BQ=128, BKV=32, STAGES=4), "norot"))],
    ("BQ=128 BKV=64 S2 causal", dict(D=128, BQ=128, BKV=64, CAUSAL=1)),
    ("D=64 BQ=128 BKV=64 S3 rotated causal", dict(D=64, BQ=128, BKV=64, STAGES=3, CAUSAL=1)),
    ("D=64 BQ=128 BKV=64 S3 not rotated causal", dict(D=64, BQ=128, BKV=64, STAGES=3, CAUSAL=1), "norot"),
]
ATTN_ROWS_CALL8 = [  # call 8: the example's own tile (BQ = 64, 4 warps of 16 rows) at STAGES = 3, rotated or not
    *[row for i in (1, 2) for row in (
        (f"BQ=64 BKV=64 S3 rotated #{i}", dict(D=128, STAGES=3)),
        (f"BQ=64 BKV=64 S3 not rotated #{i}", dict(D=128, STAGES=3), "norot"),
        (f"BQ=128 BKV=64 S2 #{i}", dict(D=128, BQ=128, BKV=64)))],
]
ATTN_ROWS_CALL9 = [(f"BQ=128 BKV=64 S2 #{i}", dict(D=128, BQ=128, BKV=64)) for i in (1, 2)]
ATTN_ROWS_CALL9.append(("BQ=128 BKV=64 S2 causal", dict(D=128, BQ=128, BKV=64, CAUSAL=1)))
ATTN_ROWS_S12 = [  # session 12: attention with producer warps asked for (the default keeps one role)
    ("BQ=128 BKV=64 S2", dict(D=128, BQ=128, BKV=64)),
    ("BQ=128 BKV=64 S2 pw4", dict(D=128, BQ=128, BKV=64), "pw4"),
    ("BQ=128 BKV=64 S3 pw4", dict(D=128, BQ=128, BKV=64, STAGES=3), "pw4"),
    ("D=64 BQ=128 BKV=64 S3", dict(D=64, BQ=128, BKV=64, STAGES=3)),
    ("D=64 BQ=128 BKV=64 S3 pw4", dict(D=64, BQ=128, BKV=64, STAGES=3), "pw4"),
]
ATTN_ROWS_CALL3 = [  # call 3: BKV = 48 (255 registers, no spills) against 64 (76 bytes of spills), three times each
    *[(f"sm_80 BQ=128 BKV={bkv} #{i}", dict(D=128, BQ=128, BKV=bkv)) for i in (1, 2, 3) for bkv in (64, 48)],
    ("sm_80 BQ=128 BKV=48 causal", dict(D=128, BQ=128, BKV=48, CAUSAL=1)),
    ("sm_80 BQ=128 BKV=64 causal", dict(D=128, BQ=128, BKV=64, CAUSAL=1)),
]


def ceiling_rows(torch, reps: int) -> list[dict]:
    sys.path.insert(0, str(ROOT / "docs/bench"))
    from claims import mma_ceiling_rows

    out = []
    for c in mma_ceiling_rows(torch, reps):
        out.append(dict(kind="ceiling", label=f"{c['kernel']} {c['consts']} ({c['warps_per_sm']} warps/SM)",
                        ok=c["ok"], err=c["err"], tflops=c["tflops"], peer_tflops=None))
        print(out[-1], flush=True)
    return out


def bench_rows(rows, sizes: dict, reps: int, kind: str) -> list[dict]:
    from tkir.bench import bench_one
    from tkir.examples import load_companion

    out = []
    for label, path, target, consts, *how in rows:
        full = str(ROOT / path)
        kw = {"target": target, **({"passes": PASS_VARIANTS[how[0]]()} if how else {})}
        try:
            r = bench_one(full, load_companion(full), sizes, consts, reps=reps, compile_kw=kw)
        except Exception as e:  # noqa: BLE001 - a failing configuration is a row, not the end of the run
            out.append(dict(kind=kind, label=label, ok=False, err=None, tflops=0.0, error=f"{type(e).__name__}: {e}"))
            print(out[-1], flush=True)
            continue
        extra = {n: r.flops / ms / 1e9 for n, ms in (r.extra_ms or {}).items()}
        out.append(dict(kind=kind, label=label, ok=r.ok, err=r.rel_err, tflops=r.tflops, peer=r.peer,
                        peer_tflops=r.peer_tflops, extra=extra))
        print(out[-1], flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default="ceiling,gemm,attn",
                    help="comma-separated: ceiling, gemm, gemm4, gemm12, attn, attn3, attn4, attn5, attn8, attn9")
    args = ap.parse_args()
    import torch

    only = args.only.split(",")
    rows: list[dict] = []
    if "ceiling" in only:
        rows += ceiling_rows(torch, args.reps)
    if "gemm" in only:
        rows += bench_rows(GEMM_ROWS, GEMM_SIZES, args.reps, "gemm")
    if "gemm12" in only:  # session 12: producer warps
        rows += bench_rows(GEMM_ROWS_S12, GEMM_SIZES, args.reps, "gemm")
    if "gemm12b" in only:
        rows += bench_rows(GEMM_ROWS_S12B, GEMM_SIZES, args.reps, "gemm")
    if "gemm12c" in only:
        rows += bench_rows(GEMM_ROWS_S12C, GEMM_SIZES, args.reps, "gemm")
    if "gemm4" in only:  # call 4: the wgmma gemm and the two 8-warp sm_80 shapes
        rows += bench_rows(GEMM_ROWS[:3], GEMM_SIZES, args.reps, "gemm")
    for key, table in (("attn", ATTN_ROWS), ("attn3", ATTN_ROWS_CALL3), ("attn4", ATTN_ROWS_CALL4),
                       ("attn5", ATTN_ROWS_CALL5), ("attn8", ATTN_ROWS_CALL8),
                       ("attn9", ATTN_ROWS_CALL9), ("attn12", ATTN_ROWS_S12)):
        if key in only:
            rows += bench_rows([(r[0], "examples/attention_fwd.tk", "sm_80", *r[1:]) for r in table], ATTN_SIZES,
                               args.reps, "attn")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    wgmma = next((r["tflops"] for r in rows if r["label"].startswith("wgmma")), None)
    print(f"\n{'row':58} {'ok':>3} {'TFLOP/s':>8} {'peer':>8} {'x wgmma':>8} {'x FA2':>6}")
    for r in rows:
        fa2 = (r.get("extra") or {}).get("FA2")
        xw = f"{r['tflops'] / wgmma:.3f}" if wgmma and r["kind"] != "attn" else ""
        xf = f"{r['tflops'] / fa2:.3f}" if fa2 else ""
        print(f"{r['label'][:58]:58} {('ok' if r['ok'] else 'BAD'):>3} {r['tflops']:8.1f} "
              f"{(r.get('peer_tflops') or 0):8.1f} {xw:>8} {xf:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
