"""What unaligned rows cost: a row kernel and its narrower-piece variants timed at the same shape, on a GPU.

    python3 scripts/bench/unaligned_rows.py                                    # softmax_vocab, N = 4096
    python3 scripts/bench/unaligned_rows.py --kernel examples/softmax_vocab.tk --size N=16384 --size V=50257 \\
        --reps 30 --json out.json

Rows that do not start aligned to a kernel's 16-byte vector pieces (V = 50,257 bf16 columns: 100,514-byte
rows) run its variant with narrower pieces (docs/runtime.md, "Unaligned rows"). This times, interleaved in
one run (tkir.tools.timing.time_pair_ms: L2 flushed before each run, the order rotating), on the shape
rounded down to aligned rows (V - V % 8): the kernel itself and its 8-, 4- and 2-byte variants forced on
those same rows, so the table is the price of each piece width alone; then, at the shape as given, what a
call launches (the variant the launch chooses) beside torch.softmax. Every output is checked against
torch first (relative L2 error within CHECK_TOLERANCE). Needs torch and a CUDA GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if importlib.util.find_spec("tkir") is None and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tkir not installed: this checkout's

DEFAULT_KERNEL = "examples/softmax_vocab.tk"
DEFAULT_SIZES = {"N": 4096, "V": 50257}
PIECES = (16, 8, 4, 2)      # bytes: the kernel itself (16) and the variants the launch may choose
ALIGN_ELEMS = 8             # bf16 elements in 16 bytes: V rounded down to a multiple of this is aligned
CHECK_TOLERANCE = 2e-2      # bf16 outputs (the companion's TOLERANCE)
WARMUP = 5


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default=DEFAULT_KERNEL,
                    help="a softmax row kernel with a companion (default softmax_vocab)")
    ap.add_argument("--size", action="append", default=[], metavar="NAME=VALUE", help="N and V (default 4096, 50257)")
    ap.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--reps", type=int, default=30, help="timed runs per kernel (median)")
    ap.add_argument("--json", metavar="OUT", help="write the rows as JSON")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    import tkir
    from tkir.tools.examples import load_companion
    from tkir.tools.timing import rel_err, rotation_sets, time_pair_ms, to_torch

    sizes = dict(DEFAULT_SIZES, **{k: int(v) for k, v in (s.split("=", 1) for s in args.size)})
    consts = {k: int(v) for k, v in (d.split("=", 1) for d in args.defines)}
    comp = load_companion(args.kernel)
    k = tkir.compile(args.kernel, **consts)
    aligned = dict(sizes, V=sizes["V"] - sizes["V"] % ALIGN_ELEMS)
    rows = []

    def inputs_for(shape: dict) -> list:
        arrays = comp.make_inputs(np.random.default_rng(0), shape, consts)
        return [[to_torch(torch, a) for a in arrays] for _ in range(rotation_sets(sum(a.nbytes for a in arrays)))]

    def check(name: str, run, tensors: list) -> None:  # noqa: ANN001
        run(tensors)
        torch.cuda.synchronize()
        out = tensors[comp.PARAMS.index(comp.OUTPUTS[0])]
        ref = torch.softmax(tensors[0].float(), dim=1)
        err = rel_err(torch, out, ref)
        if not err <= CHECK_TOLERANCE:
            raise SystemExit(f"{name}: relative error {err:.3e} > {CHECK_TOLERANCE}: not timed")

    # 1. the price of each piece width alone: every variant forced on the same aligned rows
    sets = inputs_for(aligned)
    runners = {p: (k if p == 16 else k.variant(p)).launcher() for p in PIECES}
    for p, r in runners.items():
        check(f"{p}-byte pieces at V={aligned['V']}", lambda t, r=r: r(*t), sets[0])
    fns = [lambda i, r=r: (lambda: r(*sets[i])) for r in runners.values()]
    times = time_pair_ms(torch, fns, len(sets), args.reps, WARMUP)
    nbytes = comp.bytes_moved(aligned, consts)
    for p, ms in zip(PIECES, times, strict=True):
        rows.append({"shape": aligned, "kernel": "kernel" if p == 16 else f"variant {p} B", "piece": p, "ms": ms,
                     "GB/s": nbytes / ms / 1e6})

    # 2. the shape as given: what the launch chooses, beside torch
    sets = inputs_for(sizes)
    chosen = k.launcher().choose(*sets[0])
    piece = 16 if chosen is k.launcher() else next(p for p in PIECES if p != 16 and k.variant(p).launcher() is chosen)
    check(f"the launch at V={sizes['V']}", lambda t: k(*t), sets[0])
    peer = lambda t: torch.softmax(t[0], dim=1, dtype=torch.float32).to(torch.bfloat16)  # noqa: E731
    fns = [lambda i: (lambda: k(*sets[i])), lambda i: (lambda: peer(sets[i]))]
    times = time_pair_ms(torch, fns, len(sets), args.reps, WARMUP)
    nbytes = comp.bytes_moved(sizes, consts)
    rows.append({"shape": sizes, "kernel": f"launch ({'kernel' if piece == 16 else f'variant {piece} B'})",
                 "piece": piece, "ms": times[0], "GB/s": nbytes / times[0] / 1e6})
    rows.append({"shape": sizes, "kernel": "torch.softmax", "piece": None, "ms": times[1],
                 "GB/s": nbytes / times[1] / 1e6})

    print(f"{Path(args.kernel).name} on {torch.cuda.get_device_name()}, {args.reps} reps, median")
    print(f"{'N':>6} {'V':>6}  {'kernel':<24} {'ms':>8} {'GB/s':>7} {'x kernel':>9}")
    base = rows[0]["ms"]
    for r in rows:
        print(f"{r['shape']['N']:>6} {r['shape']['V']:>6}  {r['kernel']:<24} {r['ms']:>8.4f} {r['GB/s']:>7.0f} "
              f"{r['ms'] / base:>9.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"kernel": args.kernel, "device": torch.cuda.get_device_name(),
                                               "reps": args.reps, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
