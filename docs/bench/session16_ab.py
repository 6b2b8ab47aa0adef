"""Session 16: the sm_80 (mma.sync) configurations whose PTX the session's cp.async changes touch, as the
session's starting commit and as its head compile them, timed interleaved on the GPU by
docs/bench/session15_ab.py's `run` (each configuration benched twice, each build once as tkir and once as
the peer; checked against the reference on fresh inputs first).

    PYTHONPATH=/tmp/basesite python3 docs/bench/session16_ab.py dump --label base --root .base --out .ab16
    python3 docs/bench/session16_ab.py dump --label head --out .ab16
    python3 docs/bench/session16_ab.py run --dir .ab16 --out DIR      # on the GPU
    (--set fence: fence-loads' A/B, row kernels large and small; .ab16f)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

import session15_ab as ab  # noqa: E402 - the A/B runner of session 15

_W = "../docs/bench/variants/gemm_warps/gemm_wg_occ"   # relative to examples/: gemm.tk with @warpgroups, @blocks_per_sm
_ONE = {"plan-occupancy": "plan-occupancy{producer_warps=0}"}
_G4096 = dict(M=4096, N=4096, K=4096)
# (label, example, sizes, consts, target, pass replacements)
CONFIGS = [
    ("gemm80_128x256x64", "gemm", _G4096, dict(BM=128, BN=256, BK=64, STAGES=4), "sm_80", {}),
    ("gemm80_256x128x64", "gemm", _G4096, dict(BM=256, BN=128, BK=64, STAGES=4), "sm_80", {}),
    ("gemm80_256x128x64_one", "gemm", _G4096, dict(BM=256, BN=128, BK=64, STAGES=4), "sm_80", _ONE),
    ("gemm80_4w_128x128x32_S4", _W, _G4096, dict(BM=128, BN=128, BK=32, STAGES=4, WG=1), "sm_80", _ONE),
    ("gemm80_4w_128x128x32_S3", _W, _G4096, dict(BM=128, BN=128, BK=32, STAGES=3, WG=1), "sm_80", _ONE),
    ("gemm80_4w_128x128x64_S3", _W, _G4096, dict(BM=128, BN=128, BK=64, STAGES=3, WG=1), "sm_80", _ONE),
    ("gemm80_ragged", "gemm", dict(M=4000, N=4040, K=4072), dict(BM=128, BN=256, BK=64, STAGES=4), "sm_80", {}),
    ("attn80_d128", "attention_fwd", dict(B=8, H=16, N=4096), dict(D=128, BQ=128, BKV=64), "sm_80", {}),
    ("attn80_d128_causal", "attention_fwd", dict(B=8, H=16, N=4096), dict(D=128, BQ=128, BKV=64, CAUSAL=1),
     "sm_80", {}),
    ("attn80_d64", "attention_fwd", dict(B=8, H=16, N=4096), dict(D=64, BQ=128, BKV=64, STAGES=3), "sm_80", {}),
]


# the fence-loads A/B: session 15's row configurations (large rows: the memory-bound side) and issue 15's
# small-row points (docs/bench/session16_small.py, the latency-bound side), against the commit before it
FENCE_CONFIGS = [(*c, {}) for c in ab.CONFIGS if c[1] in ab.ROW_KERNELS] + [
    (f"small_{k}_{n}x{c['D']}", k, {"N": n}, c, "sm_90a", {}) for k, n, c in __import__("session16_small").POINTS]
# Based (sm_90a: its loads are a cp.async ring, so the session's cp.async changes reach it)
BASED_CONFIGS = [(f"based_{n}", "based", dict(B=16, H=16, N=n), {}, "sm_90a", {}) for n in (4096, 16384)]
SETS = {"sm80": CONFIGS, "fence": FENCE_CONFIGS, "based": BASED_CONFIGS}


def dump(a: argparse.Namespace) -> int:
    import tkir

    out = Path(a.out) / a.label
    out.mkdir(parents=True, exist_ok=True)
    for label, name, _sizes, consts, target, repl in SETS[a.set]:
        kw: dict = {"target": target}
        if repl:
            kw["passes"] = ",".join(repl.get(p, p) for p in tkir.api.default_pipeline())
        k = tkir.compile(str(Path(a.root) / "examples" / f"{name}.tk"), **kw, **consts)
        (out / f"{label}.ptx").write_text(k.asm["ptx"])
        (out / f"{label}.json").write_text(json.dumps(dict(launch=k.asm["launch"], consts=k.consts,
                                                           tkir=tkir.__version__, file=tkir.__file__)))
        print(f"{a.label} {label}: {len(k.asm['ptx'])} bytes of PTX", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--label", required=True)
    d.add_argument("--root", default=str(ROOT))
    d.add_argument("--out", required=True)
    d.add_argument("--set", default="sm80", choices=sorted(SETS))
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--reps", type=int, default=30)
    r.add_argument("--only", default="")
    r.add_argument("--set", default="sm80", choices=sorted(SETS))
    a = ap.parse_args()
    if a.cmd == "dump":
        return dump(a)
    ab.CONFIGS = [c[:5] for c in SETS[a.set]]
    return ab.run(a)


if __name__ == "__main__":
    raise SystemExit(main())
