"""fp8 GEMM: tkir's examples/gemm_fp8.tk (and gemm_fp8_block.tk) against torch._scaled_mm.

    python3 scripts/bench/gemm_fp8.py [--shapes M,N,K;M,N,K...] [--kernel gemm_fp8|gemm_fp8_block|both]
        [--tune] [-D NAME=VALUE ...] [--variant LABEL] [--reps 20] [--json PATH]
    python3 scripts/bench/gemm_fp8.py --dry-run [...]     # no GPU, no torch: each shape's kernel and consts

Shapes (default): 4096³, 8192³, and the LLM shapes M ∈ {1, 16, 64, 256, 4096} x (N, K) ∈ {(4096, 4096),
(14336, 4096), (4096, 14336)}. Per shape, on fresh inputs quantised as examples/gemm_fp8.py quantises them
(e4m3 rows of A [M, K] and of B [N, K], an f32 scale per row of each):
- tkir: gemm_fp8.tk, C = bf16((A · Bᵀ) ∘ (sa ⊗ sb)), at its defaults (its schedule consts are `auto`: the
  compiler's choice for the shape's size bucket, as a user's call gets it), with -D pins, or, with --tune, at the
  @tune point `tkc tune` chooses for the shape (tkir.tools.bench.tuned_consts: cached per size bucket, or tuned now);
- the peer: torch._scaled_mm(a, b.t(), scale_a=sa[M, 1], scale_b=sb[1, N], out_dtype=torch.bfloat16), the
  row-wise scaled fp8 GEMM of cuBLASLt / CUTLASS (its B is column-major K x N: our [N, K] rows, transposed);
- gemm_fp8_block.tk (--kernel gemm_fp8_block or both): DeepSeek-V3's 1 x 128 / 128 x 128 block scales (its
  inputs from examples/gemm_fp8_block.py), against the same peer on its operands (torch has no block-scaled
  fp8 GEMM: the bar is the row-wise one).
First the outputs are checked: tkir's against float64 of the dequantised inputs (relative L2 error within BOUND)
and against the peer's (their relative L2 difference is reported, not bounded). Then the two are timed
interleaved with tkir.tools.timing.time_pair_ms (warm-up, an L2 flush and a GPU-side host lead before every run,
CUDA events, medians over --reps runs, the order rotated from rep to rep, input sets rotated past the L2).
FLOPs 2 M N K. The table gives milliseconds, TFLOP/s and peer / tkir (above 1: tkir is faster). A peer that
refuses a shape (e.g. an M it does not take) is reported as n/a.
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

LLM_NK = [(4096, 4096), (14336, 4096), (4096, 14336)]
DEFAULT_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)] + [(m, n, k) for m in (1, 16, 64, 256, 4096)
                                                               for n, k in LLM_NK]
BOUND = 3e-2  # relative L2 error of C against float64 of the dequantised inputs (the acceptance bound)
TUNED = ["BM", "BN", "STAGES", "SK", "SKI"]  # gemm_fp8.tk's @tune names
TUNED_BLOCK = ["BM", "STAGES"]  # gemm_fp8_block.tk's
KERNELS = {"gemm_fp8": TUNED, "gemm_fp8_block": TUNED_BLOCK}


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """'4096,4096,4096;1,4096,14336' -> [(4096, 4096, 4096), (1, 4096, 14336)]."""
    out = []
    for part in text.split(";"):
        dims = part.split(",")
        if len(dims) != 3 or not all(d.strip().isdigit() and int(d) > 0 for d in dims):
            raise argparse.ArgumentTypeError(f"shape {part!r}: expected M,N,K (positive integers)")
        out.append(tuple(int(d) for d in dims))
    return out


def companion(name: str) -> Any:
    from tkir.tools.examples import load_companion

    return load_companion(str(ROOT / "examples" / f"{name}.tk"))


def consts_for(name: str, sizes: dict, tune: bool) -> tuple[dict, str | None]:
    """The consts to time `name` at: its defaults, or (--tune) the tuner's choice for these sizes."""
    if not tune:
        return {}, None
    from tkir.tools.bench import tuned_consts

    return tuned_consts(str(ROOT / "examples" / f"{name}.tk"), sizes, {}, KERNELS[name], compile_kw={}, tune_kw={})


def reference64(torch, comp: Any, inputs: list, sizes: dict) -> Any:  # noqa: ANN001
    """float64 of the dequantised inputs (the companion's torch_reference formula, in float64)."""
    a, b, sa, sb, _ = inputs
    if sa.dim() == 1:  # per-row scales
        return (a.double() * sa.double()[:, None]) @ (b.double() * sb.double()[:, None]).T
    kslice = torch.arange(sizes["K"], device=a.device) // comp.BLOCK
    return (a.double() * sa.double()[kslice, :].T) @ (b.double() * sb.double()[kslice, :].T).T


def bench_row(name: str, m: int, n: int, k: int, reps: int, tune: bool, pinned: dict | None = None,
              variant: str = "tkir") -> dict:
    import torch

    import tkir
    from tkir.tools import timing

    comp = companion(name)
    sizes = dict(M=m, N=n, K=k)
    consts, note = consts_for(name, sizes, tune)
    consts = {**consts, **(pinned or {})}
    # auto consts (the header's): the kernel a call at these sizes launches, chosen by the compiler per size bucket
    kern = tkir.compile(str(ROOT / "examples" / comp.KERNEL), **consts).for_sizes(sizes)
    nsets = timing.rotation_sets(comp.bytes_moved(sizes, consts))
    sets = [comp.torch_inputs(sizes, consts) for _ in range(nsets)]
    c = sets[0][-1]
    kern(*sets[0])
    torch.cuda.synchronize()
    err = timing.rel_err(torch, c.double(), reference64(torch, comp, sets[0], sizes))
    row: dict[str, Any] = dict(kernel=name, variant=variant, M=m, N=n, K=k,
                               consts=dict(kern.module.kernel.attrs["consts"]), tune_note=note, rel_err=err,
                               ok=bool(err <= BOUND and torch.isfinite(c).all()))
    ways = [lambda i: (lambda: kern(*sets[i]))]
    try:
        peer_out = comp.peer(sets[0], sizes, consts)()
        torch.cuda.synchronize()
        row["peer_rel_diff"] = timing.rel_err(torch, c.double(), peer_out.double())
        ways.append(lambda i: comp.peer(sets[i], sizes, consts))
    except RuntimeError as e:  # e.g. a shape the peer does not take
        row["peer_refused"] = str(e).splitlines()[0]
        print(f"torch._scaled_mm refused {m}x{n}x{k}: {row['peer_refused']}", flush=True)
    times = timing.time_pair_ms(torch, ways, nsets, reps, warmup=5)
    work = 2 * m * n * k
    row |= dict(tkir_ms=times[0], tkir_tflops=work / times[0] / 1e9)
    peer_ms = times[1] if len(times) > 1 else None
    row |= dict(peer_ms=peer_ms, peer_tflops=None if peer_ms is None else work / peer_ms / 1e9,
                ratio=None if peer_ms is None else peer_ms / times[0])
    print(json.dumps(row), flush=True)
    return row


def format_table(rows: list[dict]) -> str:
    head = (f"{'kernel':>15} {'M x N x K':>20} {'tkir ms':>9} {'peer ms':>9} {'tkir TF/s':>9} {'peer TF/s':>9} "
            f"{'peer/tkir':>9}  check")
    lines = [head, "-" * len(head)]

    def num(x: float | None, width: int, digits: int) -> str:
        return f"{'n/a':>{width}}" if x is None else f"{x:>{width}.{digits}f}"
    for r in rows:
        verdict = ("ok" if r["ok"] else "FAIL") + f" {r['rel_err']:.1e}"
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        label = r["kernel"] + ("" if r.get("variant", "tkir") == "tkir" else ":" + r["variant"])
        lines.append(f"{label:>15} {shape:>20} {r['tkir_ms']:>9.4f} {num(r['peer_ms'], 9, 4)} "
                     f"{r['tkir_tflops']:>9.1f} {num(r['peer_tflops'], 9, 1)} {num(r['ratio'], 9, 3)}  {verdict}")
    return "\n".join(lines)


def dry_run(names: list[str], shapes: list[tuple[int, int, int]]) -> None:
    import tkir

    for name in names:
        k = tkir.compile(str(ROOT / "examples" / f"{name}.tk"))
        consts = dict(k.module.kernel.attrs["consts"])
        print(f"{name}: default consts {consts}; @tune over {', '.join(KERNELS[name])}")
        for m, n, kk in shapes:
            print(f"  {m}x{n}x{kk}: {2 * m * n * kk / 1e12:.3f} TFLOP")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=parse_shapes, default=DEFAULT_SHAPES, help="M,N,K;M,N,K;...")
    ap.add_argument("--kernel", choices=[*KERNELS, "both"], default="gemm_fp8")
    ap.add_argument("--tune", action="store_true", help="time each shape at the @tune point `tkc tune` chooses")
    ap.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                    help="pin a const (e.g. -D BM=128: the compiler's per-size choice left out for it)")
    ap.add_argument("--variant", default="tkir", help="a label for the rows (A/B runs)")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per way (medians)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every row as JSON")
    ap.add_argument("--dry-run", action="store_true", help="compile and print each kernel's consts; no GPU")
    args = ap.parse_args(argv)
    names = list(KERNELS) if args.kernel == "both" else [args.kernel]
    if args.dry_run:
        dry_run(names, args.shapes)
        return 0
    pinned = {}
    for d in args.defines:
        name_, _, value = d.partition("=")
        if not value:
            ap.error(f"-D {d}: expected NAME=VALUE")
        pinned[name_] = int(value) if value.lstrip("-").isdigit() else value
    rows = [bench_row(name, m, n, k, args.reps, args.tune, pinned, args.variant)
            for name in names for m, n, k in args.shapes]
    print(format_table(rows))
    if args.json:
        import torch

        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, python=platform.python_version(),
                    reps=args.reps, command=" ".join(sys.argv), flops="2 M N K",
                    peer="torch._scaled_mm(a, b.t(), scale_a=[M, 1] f32, scale_b=[1, N] f32, out_dtype=bf16)")
        Path(args.json).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
