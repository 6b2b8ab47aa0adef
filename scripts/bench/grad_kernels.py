"""The backward examples against eager torch and torch.compile: softmax_bwd, linear_dgrad, linear_wgrad.

    python3 scripts/bench/grad_kernels.py                                   # all three, their BENCH_SIZES
    python3 scripts/bench/grad_kernels.py --kernel softmax_bwd --sizes N=4096,D=4096 N=65536,D=768 --tune
    python3 scripts/bench/grad_kernels.py --kernel linear_dgrad --sizes M=8192,N=4096,K=14336,ACT=2 --json out.json

On the GPU (torch, tkir). Each size is one row of `tkc bench` (tkir.tools.bench.bench_one): the kernel is
compiled, run once on fresh random inputs (outputs NaN-poisoned) and compared with the companion's torch
reference (||out - ref|| / ||ref|| against the companion's TOLERANCE); then it is timed against the
companion's peer (eager torch: `torch._softmax_backward_data`, the kernel autograd runs for a bf16
softmax; `torch.matmul` of the same layouts, plus aten.silu_backward / gelu_backward for the data
gradient's epilogue, and `DZ.sum(0)` for the bias) and the same math under torch.compile, interleaved
run by run, with CUDA events: warm-up runs, the median of --reps, inputs rotated and a 256 MB buffer
zeroed before each run so that every run starts with a cold L2 (tkir/tools/timing.py). A size entry
is comma-separated NAME=VALUE pairs; names that are constants of the kernel (D, ACT, ROWS, BN, ...)
are compile-time constants, the others sizes. Without --sizes, the companion's BENCH_SIZES and
BENCH_CONSTS. --tune lets the tuner choose the constants of the kernel's @tune space per size
(the cached choice when there is one; the rows' own constants pinned).

The table at the end has one line per row (GB/s for the memory-bound softmax backward, TFLOP/s for
the GEMMs), each peer's figure and ratio (their time / tkir's: > 1 is faster than them), then the
softmax backward's bar: >= 1.0x eager torch's backward at 4096 x 4096 and 65536 x 768, where measured.
The exit status is 1 if a row failed its correctness check or a measured bar was missed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ("softmax_bwd", "linear_dgrad", "linear_wgrad")
BAR_SIZES = ({"N": 4096, "D": 4096}, {"N": 65536, "D": 768})  # the softmax backward must be >= 1.0x eager torch here
BAR_RATIO = 1.0  # >= 1.0x eager torch's backward there


def parse_size(text: str, const_names: set[str]) -> tuple[dict, dict]:
    """'N=4096,D=4096' -> (sizes, consts), a name in const_names going to consts."""
    sizes, consts = {}, {}
    for part in filter(None, text.split(",")):
        name, eq, value = part.partition("=")
        if not eq or not name.strip():
            raise SystemExit(f"grad_kernels: size entry {text!r}: expected NAME=VALUE pairs, got {part!r}")
        try:
            num = int(value)
        except ValueError:
            raise SystemExit(f"grad_kernels: size entry {text!r}: {name}={value!r} is not an integer") from None
        (consts if name.strip() in const_names else sizes)[name.strip()] = num
    return sizes, consts


def const_names(path: str) -> set[str]:
    """The kernel's compile-time constants (its header's, as the front end records them)."""
    from tkir.frontend import compile_file

    return set(compile_file(path).kernel.attrs["consts"])


def cases(kernel: str, size_texts: list[str] | None) -> list[tuple[dict, dict]]:
    from tkir.tools.examples import load_companion

    path = str(ROOT / "examples" / f"{kernel}.tk")
    if not size_texts:
        comp = load_companion(path)
        return [(dict(s), dict(c)) for s, c in zip(comp.BENCH_SIZES, comp.BENCH_CONSTS, strict=True)]
    names = const_names(path)
    return [parse_size(t, names) for t in size_texts]


def bar_verdicts(rows: list) -> list[tuple[str, float, bool]]:
    """(what, ratio against eager torch, met) for each bar size that was measured."""
    out = []
    for r in rows:
        if r.kernel != "softmax_bwd" or r.ratio is None:
            continue
        at = {"N": r.sizes.get("N"), "D": r.consts.get("D")}
        if at in BAR_SIZES:
            out.append((f"softmax_bwd {at['N']} x {at['D']}", r.ratio, r.ratio >= BAR_RATIO))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", choices=[*KERNELS, "all"], default="all")
    ap.add_argument("--sizes", nargs="+", metavar="NAME=V,...", help="sizes (and constants) per row")
    ap.add_argument("--reps", type=int, default=50, help="timed runs per kernel (the median is reported)")
    ap.add_argument("--tune", action="store_true", help="the tuner picks the @tune constants per row")
    ap.add_argument("--json", help="write the rows here (tkc bench's row format)")
    args = ap.parse_args(argv)

    import torch

    from tkir.tools import bench, timing
    from tkir.tools.examples import load_companion
    from tkir.tools.tune import read_space

    kernels = KERNELS if args.kernel == "all" else (args.kernel,)
    if args.sizes and len(kernels) > 1:
        raise SystemExit("grad_kernels: --sizes needs one --kernel (their size names differ)")
    rows, notes = [], []
    for kernel in kernels:
        path = str(ROOT / "examples" / f"{kernel}.tk")
        comp = load_companion(path)
        for sizes, consts in cases(kernel, args.sizes):
            if args.tune:
                names = [n for n in read_space(path).values if n not in consts]
                consts, note = bench.tuned_consts(path, sizes, consts, names, compile_kw={}, tune_kw={})
                notes.append(f"  {kernel} {sizes}: {note}")
            row = bench.bench_one(path, comp, sizes, consts, reps=args.reps)
            rows.append(row)
            print(f"{kernel} {sizes} {consts}: rel_err {row.rel_err:.2e} ({'ok' if row.ok else 'FAIL'}), "
                  f"{row.ms * 1e3:.1f} us, eager {row.peer_ms * 1e3:.1f} us", flush=True)
    if notes:
        print("tuned per row (the tuner's own timings, fastest first):", *notes, sep="\n")
    for memory_bound in (True, False):
        part = [r for r in rows if bool(getattr(load_companion(str(ROOT / "examples" / f"{r.kernel}.tk")),
                                                "MEMORY_BOUND", False)) == memory_bound]
        if part:
            print(bench.format_rows(part, memory_bound))
    if any(r.kernel == "softmax_bwd" for r in rows):
        print(f"device-to-device copy, same run: {timing.copy_bandwidth(torch):.0f} GB/s")
    verdicts = bar_verdicts(rows)
    for what, ratio, met in verdicts:
        print(f"bar: {what}: {ratio:.3f}x eager torch's backward (>= {BAR_RATIO}): {'met' if met else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps([r.as_dict() for r in rows], indent=2) + "\n")
    failed = [r for r in rows if not r.ok]
    for r in failed:
        print(f"FAIL: {r.kernel} {r.sizes} {r.consts}: rel_err {r.rel_err:.2e} > {r.bound:.0e}", file=sys.stderr)
    return 1 if failed or not all(met for _, _, met in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
