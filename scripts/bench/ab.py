"""A/B of two compilers (a change and the commit before it) on the same kernels, timed interleaved in one process.

The PTX and launch description of each point are made on the CPU machine by each compiler (`dump`), carried to
the GPU, and loaded there by one runtime (`run`): each point is benched twice with tkir.tools.bench.bench_one, once
with the head's kernel as "tkir" and the base's as the peer, once the other way round, so both are checked
against the reference on fresh inputs and each side's median comes from runs interleaved with the other's (L2
flush, host lead, inputs rotated past the L2, order rotated, as every tkir benchmark). Timing the two sides one
process after the other instead moved a GEMM-sized kernel by 4.4% with byte-identical SASS
(docs/bench/README.md, "Comparing two builds").

    git worktree add --detach .base COMMIT                  # the base compiler, packages copied into one tree:
    mkdir -p /tmp/basesite && cp -r .base/tkir /tmp/basesite/ && \\
      for d in backend frontend passes; do cp -r .base/$d /tmp/basesite/tkir/$d; done
    PYTHONPATH=/tmp/basesite python3 scripts/bench/ab.py dump --label base --root .base --out .ab POINT...
    python3 scripts/bench/ab.py dump --label head --out .ab POINT...
    python3 scripts/bench/ab.py run --dir .ab --out DIR     # on the GPU, .ab carried

One compiler with and without a pass: `dump --label base --pass-edits=-NAME ...`, then `dump --label head ...`.

A POINT is LABEL=KERNEL[@TARGET]:SIZES[:CONSTS], e.g. `ln=layernorm:N=65536:D=768,ROWS=4` or
`g80=gemm@sm_80:M=4096,N=4096,K=4096:BM=256,BN=128`: KERNEL an example's name or a .tk path relative to the
root, SIZES and CONSTS comma-separated NAME=VALUE. `dump` writes DIR/LABEL/POINT.{ptx,json} and DIR/points.json
(run reads the points from there). Writes DIR/ab.json and prints base and head ms per point and
speed = base ms / head ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROW_KERNELS = ("layernorm", "rmsnorm", "softmax")  # inputs drawn on the GPU (sweep.GpuRowInputs)


def _pairs(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (kv.split("=", 1) for kv in text.split(",") if kv)}


def parse_point(text: str) -> dict:
    """LABEL=KERNEL[@TARGET]:SIZES[:CONSTS] -> {label, kernel, target, sizes, consts}."""
    label, rest = text.split("=", 1)
    parts = rest.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"point {text!r}: want LABEL=KERNEL[@TARGET]:SIZES[:CONSTS]")
    kernel, _, target = parts[0].partition("@")
    return dict(label=label, kernel=kernel, target=target or "sm_90a", sizes=_pairs(parts[1]),
                consts=_pairs(parts[2]) if len(parts) == 3 else {})


def kernel_path(root: Path, kernel: str) -> Path:
    """An example's name (examples/NAME.tk under `root`) or a .tk path relative to `root`."""
    return root / kernel if kernel.endswith(".tk") else root / "examples" / f"{kernel}.tk"


def dump(a: argparse.Namespace) -> int:
    """PTX and launch description of every point, as this process's tkir compiles them."""
    import tkir

    points = [parse_point(p) for p in a.points]
    out = Path(a.out)
    (out / a.label).mkdir(parents=True, exist_ok=True)
    keep = set(filter(None, a.keep_consts.split(","))) if a.keep_consts is not None else None
    if keep is not None:  # a rewritten kernel with fewer consts against the original at its tuned ones
        points = [{**p, "consts": {k: v for k, v in p["consts"].items() if k in keep}} for p in points]
    (out / "points.json").write_text(json.dumps(points, indent=1))
    for p in points:
        # the sizes choose a kernel's `auto` consts per size bucket, as a user's call does
        k = tkir.compile(str(kernel_path(Path(a.root), p["kernel"])), target=p["target"], sizes=p["sizes"],
                         pass_edits=a.pass_edits or None, **p["consts"])
        (out / a.label / f"{p['label']}.ptx").write_text(k.asm["ptx"])
        (out / a.label / f"{p['label']}.json").write_text(json.dumps(dict(
            launch=k.asm["launch"].to_json(), consts=k.consts, tkir=tkir.__version__, file=tkir.__file__)))
        print(f"{a.label} {p['label']}: {len(k.asm['ptx'])} bytes of PTX", flush=True)
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
    import sweep
    import torch  # noqa: F401 - CUDA up before the first launch

    import tkir.tools.bench as tb
    import tkir.tools.timing
    from tkir.tools.examples import load_companion

    sweep.patch_rel_err(tkir.tools.timing)
    d = Path(a.dir)
    only = set(filter(None, a.only.split(",")))
    recs, lines = [], []
    for p in json.loads((d / "points.json").read_text()):
        label = p["label"]
        if only and label not in only:
            continue
        path = str(kernel_path(ROOT, p["kernel"]))
        comp = load_companion(path)
        if p["kernel"] in ROW_KERNELS:
            comp = sweep.GpuRowInputs(comp, p["kernel"])
        base, head = Loaded(d / "base", label), Loaded(d / "head", label)
        sizes, consts = p["sizes"], p["consts"]
        t0 = time.time()
        try:
            r1 = tb.bench_one(path, AgainstKernel(comp, base, "base"), dict(sizes), dict(consts), reps=a.reps,
                              kernel=head)
            r2 = tb.bench_one(path, AgainstKernel(comp, head, "head"), dict(sizes), dict(consts), reps=a.reps,
                              kernel=base)
        except Exception as e:  # noqa: BLE001 - a point that fails is a record
            print(f"{label:22s} ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
            recs.append(dict(config=label, error=f"{type(e).__name__}: {e}"[:800]))
            continue
        head_ms, base_ms = [r1.ms, r2.peer_ms], [r1.peer_ms, r2.ms]
        speedup = sum(base_ms) / sum(head_ms)
        rec = dict(config=label, kernel=p["kernel"], sizes=sizes, consts=consts, head_ms=head_ms, base_ms=base_ms,
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
    (out / "ab.json").write_text(json.dumps(recs, indent=1))
    print("\n== A/B (each side timed twice, interleaved with the other; speed = base ms / head ms)")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="compile the points with this process's tkir")
    d.add_argument("--label", required=True, choices=("base", "head"))
    d.add_argument("--root", default=str(ROOT), help="the checkout whose examples/ are compiled")
    d.add_argument("--keep-consts", default=None, metavar="NAME[,NAME]",
                   help="compile with only these of each point's consts (a rewrite of the kernel that declares fewer: "
                        "dump the original with all of them as base, then the rewrite with --keep-consts as head)")
    d.add_argument("--pass-edits", default="", help="edit the pipeline of every point, as tkc --pass-edits "
                   "(an A/B of one pass: dump base with '-NAME', head without)")
    d.add_argument("--out", required=True)
    d.add_argument("points", nargs="+", metavar="POINT")
    r = sub.add_parser("run", help="time base against head on the GPU")
    r.add_argument("--dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--reps", type=int, default=30)
    r.add_argument("--only", default="", help="comma-separated point labels")
    a = ap.parse_args(argv)
    return dump(a) if a.cmd == "dump" else run(a)


if __name__ == "__main__":
    raise SystemExit(main())
