"""Session 15: the kernels whose PTX the session changed (contract-fma and cache-policy in the default
pipeline), as the session's starting commit and as its head compile them, timed interleaved in one
process on the GPU.

The PTX and launch description of each configuration are made on the CPU machine by each compiler
(`dump`), carried to the GPU, and loaded there by the head's runtime (`run`): each configuration is
benched twice with tkir.bench.bench_one, once with the head's kernel as "tkir" and the base's as the
peer, once the other way round, so both are checked against the reference on fresh inputs and each
side's median comes from runs interleaved with the other's (L2 flush, host lead, inputs rotated past
L2, as every tkir benchmark).

    PYTHONPATH=/tmp/basesite python3 docs/bench/session15_ab.py dump --label base --examples .base/examples --out .ab15
    python3 docs/bench/session15_ab.py dump --label head --out .ab15
    python3 docs/bench/session15_ab.py run --dir .ab15 --out DIR      # on the GPU
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

ROW_KERNELS = ("layernorm", "rmsnorm", "softmax")
# (label, example, sizes, consts, target): every example whose PTX changed, at its bench size, and
# issue 15's row points of the session's screen (docs/bench/session15_hints.py POINTS)
CONFIGS = [
    ("attn_d128", "attention_fwd", dict(B=8, H=16, N=4096), dict(D=128), "sm_90a"),
    ("attn_d128_causal", "attention_fwd", dict(B=8, H=16, N=4096), dict(D=128, CAUSAL=1), "sm_90a"),
    ("attn_sm80", "attention_fwd", dict(B=8, H=16, N=4096), dict(D=128, BQ=128, BKV=64), "sm_80"),
    ("based_4096", "based", dict(B=16, H=16, N=4096), {}, "sm_90a"),
    ("based_16384", "based", dict(B=16, H=16, N=16384), {}, "sm_90a"),
    ("linear_gelu", "linear", dict(M=4096, N=4096, K=4096), {"ACT": 1}, "sm_90a"),
    ("rotary_65536", "rotary", dict(T=65536), {}, "sm_90a"),
    ("softmax_65536", "softmax", dict(N=65536), {}, "sm_90a"),
    ("layernorm_65536", "layernorm", dict(N=65536), {}, "sm_90a"),
    ("rmsnorm_65536", "rmsnorm", dict(N=65536), {}, "sm_90a"),
    ("ln_4096x8192", "layernorm", dict(N=4096), dict(D=8192, DC=8192, ROWS=1, WG=1, OCC=4, HOIST=0), "sm_90a"),
    ("ln_4096x16384", "layernorm", dict(N=4096), dict(D=16384, DC=16384, ROWS=1, WG=2, OCC=0, HOIST=0), "sm_90a"),
    ("ln_65536x768", "layernorm", dict(N=65536), dict(D=768, DC=1024, ROWS=4, WG=1, OCC=0, HOIST=1), "sm_90a"),
    ("ln_65536x16384", "layernorm", dict(N=65536), dict(D=16384, DC=16384, ROWS=1, WG=2, OCC=0, HOIST=0), "sm_90a"),
    ("rms_4096x8192", "rmsnorm", dict(N=4096), dict(D=8192, DC=16384, ROWS=1, WG=2, OCC=0, HOIST=1), "sm_90a"),
    ("rms_4096x16384", "rmsnorm", dict(N=4096), dict(D=16384, DC=16384, ROWS=1, WG=4, OCC=0, HOIST=0), "sm_90a"),
    ("rms_65536x768", "rmsnorm", dict(N=65536), dict(D=768, DC=4096, ROWS=8, WG=4, OCC=0, HOIST=1), "sm_90a"),
    ("rms_65536x8192", "rmsnorm", dict(N=65536), dict(D=8192, DC=4096, ROWS=1, WG=4, OCC=4, HOIST=0), "sm_90a"),
    ("ln_65536x4096", "layernorm", dict(N=65536), dict(D=4096, DC=4096, ROWS=2, WG=2, OCC=4, HOIST=0), "sm_90a"),
    ("sm_65536x8192", "softmax", dict(N=65536), dict(D=8192, DC=8192, ROWS=1, WG=2, OCC=0), "sm_90a"),
    ("ln_65536x16384_c4096", "layernorm", dict(N=65536), dict(D=16384, DC=4096, ROWS=1, WG=4, OCC=4, HOIST=0),
     "sm_90a"),
    ("ln_4096x16384_c2048", "layernorm", dict(N=4096), dict(D=16384, DC=2048, ROWS=1, WG=4, OCC=4, HOIST=0),
     "sm_90a"),
    ("rms_4096x16384_c4096", "rmsnorm", dict(N=4096), dict(D=16384, DC=4096, ROWS=1, WG=4, OCC=0, HOIST=0),
     "sm_90a"),
]


def dump(a: argparse.Namespace) -> int:
    """PTX and launch description of every configuration, as this process's tkir compiles them."""
    import tkir

    out = Path(a.out) / a.label
    out.mkdir(parents=True, exist_ok=True)
    for label, name, _sizes, consts, target in CONFIGS:
        k = tkir.compile(str(Path(a.examples) / f"{name}.tk"), target=target, **consts)
        (out / f"{label}.ptx").write_text(k.asm["ptx"])
        (out / f"{label}.json").write_text(json.dumps(dict(launch=k.asm["launch"], consts=k.consts,
                                                           tkir=tkir.__version__, file=tkir.__file__)))
        print(f"{a.label} {label}: {len(k.asm['ptx'])} bytes of PTX", flush=True)
    return 0


class Loaded:
    """A dumped kernel, launched by this process's runtime; `consts` as bench_one reads them."""

    def __init__(self, d: Path, label: str):
        from tkir.backend.runtime import Kernel

        meta = json.loads((d / f"{label}.json").read_text())
        self.consts = meta["consts"]
        self._k = Kernel((d / f"{label}.ptx").read_text(), meta["launch"])

    def __call__(self, *args: object) -> None:
        self._k(*args)


class AgainstKernel:
    """A companion whose peer is another build of the same kernel (no extra peers)."""

    def __init__(self, companion: object, other: Loaded, name: str):
        self._c, self._other, self.PEER, self.EXTRA_PEERS = companion, other, name, {}

    def __getattr__(self, name: str) -> object:
        return getattr(self._c, name)

    def peer(self, inputs: list, sizes: dict, consts: dict):
        return lambda: self._other(*inputs)


def run(a: argparse.Namespace) -> int:
    import sweep15
    import torch  # noqa: F401 - CUDA up before the first launch

    import tkir.bench as tb
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    d = Path(a.dir)
    only = set(filter(None, a.only.split(",")))
    recs, lines = [], []
    for label, name, sizes, consts, _target in CONFIGS:
        if only and label not in only:
            continue
        path = str(ROOT / "examples" / f"{name}.tk")
        comp = load_companion(path)
        if name in ROW_KERNELS:
            comp = sweep15.GpuRowInputs(comp, name)
        base, head = Loaded(d / "base", label), Loaded(d / "head", label)
        t0 = time.time()
        try:
            r1 = tb.bench_one(path, AgainstKernel(comp, base, "base"), dict(sizes), dict(consts), reps=a.reps,
                              kernel=head)
            r2 = tb.bench_one(path, AgainstKernel(comp, head, "head"), dict(sizes), dict(consts), reps=a.reps,
                              kernel=base)
        except Exception as e:  # noqa: BLE001
            print(f"{label:22s} ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
            recs.append(dict(config=label, error=f"{type(e).__name__}: {e}"[:800]))
            continue
        head_ms, base_ms = [r1.ms, r2.peer_ms], [r1.peer_ms, r2.ms]
        speedup = sum(base_ms) / sum(head_ms)
        rec = dict(config=label, kernel=name, sizes=sizes, consts=consts, head_ms=head_ms, base_ms=base_ms,
                   head_err=r1.rel_err, base_err=r2.rel_err, ok=bool(r1.ok and r2.ok), speedup=speedup,
                   flops=r1.flops, bytes=r1.bytes, s=round(time.time() - t0, 1))
        recs.append(rec)
        line = (f"{label:22s} base {base_ms[0] * 1e3:9.2f} {base_ms[1] * 1e3:9.2f} us  head {head_ms[0] * 1e3:9.2f} "
                f"{head_ms[1] * 1e3:9.2f} us  head/base speed x{speedup:.3f}  err {r1.rel_err:.1e}/{r2.rel_err:.1e}"
                f" {'ok' if rec['ok'] else 'WRONG'}")
        print(line, flush=True)
        lines.append(line)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ab15.json").write_text(json.dumps(recs, indent=1))
    print("\n== A/B (each side timed twice, interleaved with the other; speed = base ms / head ms)")
    print("\n".join(lines))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--label", required=True)
    d.add_argument("--examples", default=str(ROOT / "examples"))
    d.add_argument("--out", required=True)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--reps", type=int, default=30)
    r.add_argument("--only", default="")
    a = ap.parse_args()
    return dump(a) if a.cmd == "dump" else run(a)


if __name__ == "__main__":
    raise SystemExit(main())
