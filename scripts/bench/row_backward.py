"""The row backward kernels (rmsnorm, layernorm: DX and the weight and bias gradients) against torch's backward.

    python3 scripts/bench/row_backward.py [--kernel rmsnorm|layernorm|all] [--sizes 4096x4096,65536x768]
        [--reps 20] [--json PATH] [-D NAME=VALUE ...]
    python3 scripts/bench/row_backward.py --dry-run [...]     # no GPU, no torch: each row's configuration

Per kernel and size N x D, three ways to get the gradients of x, w (and b) from dy:
- tkir: the row kernel (examples/<kernel>_bwd.tk) then col_sum.tk on its partials, as a caller runs them (the
  companion's torch_backward: outputs allocated in the call), the row kernel compiled with G = partial_rows at
  its resident slots (one wave of blocks, each walking the same number of row tiles);
- eager: torch.autograd.grad of torch.nn.functional.rms_norm / layer_norm with respect to x, w (and b), the
  forward run before the timed region (its saved statistics are torch's to use);
- compile: the same with the forward compiled by torch.compile, so that AOTAutograd's backward graph is
  Inductor's code.
Each tkir row is first checked on fresh random inputs against f32 autograd on the same bf16 values (relative
L2 error of DX, DW, DB within BOUND). Then the three are timed interleaved with tkir.tools.timing.time_pair_ms
(warm-up, an L2 flush and a GPU-side host lead before every run, CUDA events, medians over --reps runs, the
order rotated from rep to rep, input sets rotated past the L2), in one process beside a copy-bandwidth
measurement. The table gives microseconds, the ratios eager / tkir and compile / tkir (above 1: tkir is
faster), and tkir's bytes (X and DY read, DX written, W read; the f32 partials written and read back) per
second as a share of the copy bandwidth. The bar: tkir >= 1.0x eager at (4096, 4096) and
(65536, 768).

Row kernel configurations per row width are CONSTS below (-D overrides them for every row); other widths take
the kernels' defaults with D set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if importlib.util.find_spec("tkir") is None and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tkir not installed: this checkout's (an installed tkir, or PYTHONPATH's, wins)

KERNELS = {"rmsnorm": "examples/rmsnorm_bwd.tk", "layernorm": "examples/layernorm_bwd.tk"}
COL_SUM = "examples/col_sum.tk"
DEFAULT_SIZES = "4096x4096,65536x768"
BAR_SIZES = {(4096, 4096), (65536, 768)}  # the bar: tkir >= 1.0x eager torch's backward at these sizes
BAR_RATIO = 1.0
BOUND = 1e-2  # relative L2 error of each bf16 gradient against f32 autograd (the companions' TOLERANCE)
# Per row width: a row a warp at 768 (shuffles only, no barrier in the loop), a row over 16 warps at 4096
# (8 elements a thread, two blocks of 512 threads an SM), over 32 warps in one block an SM at 8192 (rmsnorm:
# layernorm's estimate does not fit 1024 threads). The same as the GPU tests' (tests/gpu/test_row_backward_gpu.py).
CONSTS = {768: {"ROWS": 4, "WG": 1}, 1024: {}, 4096: {"ROWS": 1, "WG": 4}, 8192: {"ROWS": 1, "WG": 8, "OCC": 1}}


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """'4096x4096,65536x768' -> [(4096, 4096), (65536, 768)] (N rows of D)."""
    out = []
    for part in text.split(","):
        n, sep, d = part.strip().lower().partition("x")
        if not sep or not n.isdigit() or not d.isdigit() or int(n) < 1 or int(d) < 1:
            raise argparse.ArgumentTypeError(f"size {part!r}: expected NxD, e.g. 4096x4096")
        out.append((int(n), int(d)))
    return out


def parse_defines(items: list[str]) -> dict[str, int]:
    """['ROWS=2', 'WG=1'] -> {'ROWS': 2, 'WG': 1}."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier() or not value.lstrip("-").isdigit():
            raise argparse.ArgumentTypeError(f"-D {item!r}: expected NAME=INTEGER")
        out[name] = int(value)
    return out


def row_consts(d: int, overrides: dict[str, int]) -> dict[str, int]:
    return {**CONSTS.get(d, {}), **overrides, "D": d}


def plan_row(kernel: str, n: int, d: int, overrides: dict[str, int]) -> dict[str, Any]:
    """Compile a row's kernels (no GPU needed): its consts, G (unless -D G= gives it), the partials' bytes and
    the bytes moved."""
    import tkir
    from tkir.tools.examples import load_companion

    path = str(ROOT / KERNELS[kernel])
    comp = load_companion(path)
    consts = row_consts(d, overrides)
    row = tkir.compile(path, **consts)  # G does not change the registers: the resident slots of any G
    rows = int(row.module.kernel.attrs["consts"]["ROWS"])
    slots = comp.resident_slots(row)
    if "G" not in overrides:
        consts["G"] = comp.partial_rows(n, rows, slots)
        row = tkir.compile(path, **consts)
    g = int(row.module.kernel.attrs["consts"]["G"])
    col_sum = tkir.compile(str(ROOT / COL_SUM))
    width = d if kernel == "rmsnorm" else 2 * d  # DW's partials; layernorm's DW's then DB's
    nbytes = comp.bytes_moved(dict(N=n), consts) + 4 * g * width + 2 * width  # + col_sum reading them, writing sums
    return dict(kernel=kernel, N=n, D=d, consts=consts, G=g, slots=slots, partial_bytes=4 * g * width,
                bytes=nbytes, comp=comp, row=row, col_sum=col_sum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", choices=["rmsnorm", "layernorm", "all"], default="all")
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes(DEFAULT_SIZES), help="NxD,... (rows x width)")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per kernel (medians)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every row as JSON")
    ap.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                    help="a const of the row kernels for every row (overrides CONSTS)")
    ap.add_argument("--dry-run", action="store_true", help="compile and print each row's configuration; no GPU")
    args = ap.parse_args(argv)
    try:
        overrides = parse_defines(args.defines)
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    kernels = ["rmsnorm", "layernorm"] if args.kernel == "all" else [args.kernel]
    plans = [plan_row(k, n, d, overrides) for k in kernels for n, d in args.sizes]
    if args.dry_run:
        for p in plans:
            print(f"{p['kernel']} {p['N']}x{p['D']}: {p['consts']} G={p['G']} (of {p['slots']} resident slots), "
                  f"partials {p['partial_bytes'] / 1e6:.2f} MB, {p['bytes'] / 1e6:.1f} MB moved")
        return 0
    rows = [bench_row(p, args.reps) for p in plans]
    print(format_table(rows))
    if args.json:
        import torch

        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, python=platform.python_version(),
                    reps=args.reps, command=" ".join(sys.argv))
        Path(args.json).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


def bench_row(plan: dict, reps: int) -> dict:
    """Check tkir's gradients on fresh random inputs, then time tkir, eager and compiled backwards interleaved."""
    import torch

    from tkir.tools import timing

    kernel, n, d, comp = plan["kernel"], plan["N"], plan["D"], plan["comp"]
    nsets = timing.rotation_sets(plan["bytes"])
    sets = [make_inputs(torch, n, d) for _ in range(nsets)]

    def tkir_for_set(i: int):
        x, w, dy = sets[i]
        return lambda: comp.torch_backward(plan["row"], plan["col_sum"], x, w, dy)

    errs = check(torch, kernel, comp, tkir_for_set(0)(), *sets[0])
    compiled_forward = torch.compile(forward_of(torch, kernel, comp.EPS), dynamic=False)
    fns = [tkir_for_set, backward_for_set(torch, sets, kernel, forward_of(torch, kernel, comp.EPS)),
           backward_for_set(torch, sets, kernel, compiled_forward)]
    for f in fns[1:]:  # torch's backward once outside the timing (the compiled one compiles here)
        f(0)()
    torch.cuda.synchronize()
    copy_gbps = timing.copy_bandwidth(torch)
    ms, eager_ms, compile_ms = timing.time_pair_ms(torch, fns, nsets, reps, warmup=5)
    gbps = plan["bytes"] / ms / 1e6
    row = dict(kernel=kernel, N=n, D=d, consts=plan["consts"], G=plan["G"], rel_err=errs,
               ok=all(e <= BOUND for e in errs.values()), tkir_us=1e3 * ms, eager_us=1e3 * eager_ms,
               compile_us=1e3 * compile_ms, eager_ratio=eager_ms / ms, compile_ratio=compile_ms / ms,
               bytes=plan["bytes"], gbps=gbps, copy_gbps=copy_gbps, copy_fraction=gbps / copy_gbps)
    if (n, d) in BAR_SIZES:
        row["bar"] = f">= {BAR_RATIO}x eager"
        row["bar_met"] = row["eager_ratio"] >= BAR_RATIO
    print(json.dumps(row), flush=True)
    return row


def make_inputs(torch, n: int, d: int) -> tuple:  # noqa: ANN001
    """Fresh random bf16 x (a scale and an offset per row), w and dy on the GPU."""
    x = (torch.randn(n, d, device="cuda") * torch.randn(n, 1, device="cuda").exp()
         + torch.randn(n, 1, device="cuda")).to(torch.bfloat16)
    return x, torch.randn(d, device="cuda").to(torch.bfloat16), torch.randn(n, d, device="cuda").to(torch.bfloat16)


def forward_of(torch, kernel: str, eps: float):  # noqa: ANN001, ANN201
    """The forward whose backward torch runs: (x, w, b) -> y (b is None for rmsnorm)."""
    f = torch.nn.functional
    if kernel == "rmsnorm":
        return lambda x, w, b: f.rms_norm(x, (x.shape[1],), w, eps=eps)
    return lambda x, w, b: f.layer_norm(x, (x.shape[1],), w, b, eps=eps)


def backward_for_set(torch, sets: list, kernel: str, forward):  # noqa: ANN001, ANN201
    """For input set i: run the forward now (before the timed region) and return the backward to time."""
    def for_set(i: int):
        x, w, dy = sets[i]
        xr, wr = x.detach().requires_grad_(), w.detach().requires_grad_()
        br = torch.zeros_like(w, requires_grad=True) if kernel == "layernorm" else None
        y = forward(xr, wr, br)
        wrt = (xr, wr) if br is None else (xr, wr, br)
        return lambda: torch.autograd.grad(y, wrt, dy)
    return for_set


def check(torch, kernel: str, comp, got: tuple, x, w, dy) -> dict[str, float]:  # noqa: ANN001
    """Relative L2 error of each tkir gradient against torch autograd in f32 on the same bf16 values."""
    from tkir.tools.timing import rel_err

    torch.cuda.synchronize()
    xf, wf = x.float().requires_grad_(), w.float().requires_grad_()
    bf = torch.zeros_like(wf, requires_grad=True) if kernel == "layernorm" else None
    y = forward_of(torch, kernel, comp.EPS)(xf, wf, bf)
    want = torch.autograd.grad(y, (xf, wf) if bf is None else (xf, wf, bf), dy.float())
    return {name: rel_err(torch, g.float(), r) for name, g, r in zip(("DX", "DW", "DB"), got, want, strict=False)}


def format_table(rows: list[dict]) -> str:
    head = (f"{'kernel':<10} {'N x D':>12} {'tkir us':>9} {'eager us':>9} {'compile us':>10} {'eager/tkir':>10} "
            f"{'compile/tkir':>12} {'% copy':>7}  check")
    lines = [head, "-" * len(head)]
    for r in rows:
        verdict = "ok" if r["ok"] else "FAIL " + ", ".join(f"{k} {v:.1e}" for k, v in r["rel_err"].items())
        bar = "" if "bar_met" not in r else ("  bar met" if r["bar_met"] else "  BAR MISSED")
        size = f"{r['N']}x{r['D']}"
        lines.append(f"{r['kernel']:<10} {size:>12} {r['tkir_us']:>9.1f} {r['eager_us']:>9.1f} "
                     f"{r['compile_us']:>10.1f} {r['eager_ratio']:>10.3f} {r['compile_ratio']:>12.3f} "
                     f"{100 * r['copy_fraction']:>6.1f}%  {verdict}{bar}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
