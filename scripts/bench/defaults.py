"""Every kernel written plainly, at its defaults, against its peer in one run, with the bars issue 44 sets.

    python3 scripts/bench/defaults.py --json OUT.json [--reps 20] [--only NAME[,NAME]]   # on the GPU
    python3 scripts/bench/defaults.py --dry-run                                           # the rows and bars, no GPU

Rows: every examples/user/*.tk at its companion's BENCH_SIZES and BENCH_CONSTS (problem parameters such as CAUSAL
and WINDOW, never a schedule const: tests/ir/test_user_suite.py refuses those), and the examples at their defaults
where the issue sets a bar: examples/gemm.tk at M = 1 and 16 (N = K = 4096) and 1000^3 against torch.matmul
(cuBLAS), examples/attention_fwd.tk at D = 128, N = 2048 and 4096 (B = 8, H = 16), causal and not, against SDPA's
cuDNN backend; no -D, no tuning. Each row: the kernel compiled for the row's size bucket (`auto` consts chosen as a
user's call chooses them), its ptxas spill count, then correctness on fresh inputs and tkir and the peer timed
interleaved (tkir.tools.bench.bench_one: L2 flushed, inputs rotated, medians).

Bars (issue 44, "Done when"): 0.95x where the peer runs the same math through cuBLAS or cuDNN (BARS_SAME_MATH),
0.9x for every other suite kernel; the GEMM example 0.85x, the attention example 0.95x. A row passes when it is
correct, spills nothing and reaches its bar. Prints the table last; exit status 1 when a row fails, 2 for usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
USER = ROOT / "examples" / "user"

BAR_OTHER = 0.90
BAR_SAME_MATH = 0.95
# Suite kernels whose peer is cuBLAS or cuDNN on the same math (the 0.95x): the GEMMs and GQA's SDPA.
BARS_SAME_MATH = ("gemm_at", "gemm_bias_gelu", "swiglu", "gqa_attention")
BAR_GEMM_EXAMPLE = 0.85
BAR_ATTENTION_EXAMPLE = 0.95
EXAMPLE_ROWS = ([("gemm", dict(M=m, N=4096, K=4096), {}, BAR_GEMM_EXAMPLE) for m in (1, 16)]
                + [("gemm", dict(M=1000, N=1000, K=1000), {}, BAR_GEMM_EXAMPLE)]
                + [("attention_fwd", dict(B=8, H=16, N=n), {"CAUSAL": c}, BAR_ATTENTION_EXAMPLE)
                   for n in (2048, 4096) for c in (0, 1)])


def rows() -> list[dict]:
    """Every row: {name, path, sizes, consts, bar}."""
    from tkir.tools.examples import load_companion

    out = []
    for tk in sorted(USER.glob("*.tk")):
        comp = load_companion(str(tk))
        bar = BAR_SAME_MATH if tk.stem in BARS_SAME_MATH else BAR_OTHER
        for sizes, consts in zip(comp.BENCH_SIZES, comp.BENCH_CONSTS, strict=True):
            out.append(dict(name=f"user/{tk.stem}", path=str(tk.relative_to(ROOT)), sizes=dict(sizes),
                            consts=dict(consts), bar=bar))
    for name, sizes, consts, bar in EXAMPLE_ROWS:
        out.append(dict(name=name, path=f"examples/{name}.tk", sizes=sizes, consts=consts, bar=bar))
    return out


def spills(path: str, sizes: dict, consts: dict) -> int:
    """ptxas's spill bytes (stores or loads, the larger) for the kernel compiled for this size bucket."""
    import tkir

    k = tkir.compile(str(ROOT / path), **consts)
    if hasattr(k, "for_sizes"):
        k = k.for_sizes(sizes)
    stats = k.asm["ptxas"]
    return max(stats.spill_stores, stats.spill_loads)


def run_row(row: dict, reps: int) -> dict:
    from tkir.tools.bench import bench_one
    from tkir.tools.examples import load_companion

    rec = dict(row)
    try:
        rec["spill_bytes"] = spills(row["path"], row["sizes"], row["consts"])
        path = str(ROOT / row["path"])
        r = bench_one(path, load_companion(path), dict(row["sizes"]), dict(row["consts"]), reps=reps)
    except Exception as e:  # noqa: BLE001 - a row that fails is a record
        rec.update(error=f"{type(e).__name__}: {e}"[:600], passed=False)
        return rec
    rec.update(ok=r.ok, rel_err=r.rel_err, ms=r.ms, peer_ms=r.peer_ms, peer=r.peer, ratio=r.ratio,
               consts_used=r.consts)
    rec["passed"] = bool(r.ok and rec["spill_bytes"] == 0 and r.ratio is not None and r.ratio >= row["bar"])
    return rec


def _label(rec: dict) -> str:
    sizes = " ".join(f"{k}={v}" for k, v in rec["sizes"].items())
    consts = " ".join(f"{k}={v}" for k, v in rec["consts"].items())
    return f"{rec['name']} {sizes} {consts}".strip()


def format_table(recs: list[dict]) -> str:
    lines = [f"{'row':58s} {'tkir ms':>9s} {'peer ms':>9s} {'x peer':>7s} {'bar':>5s} {'spill':>5s}  verdict"]
    for r in recs:
        if "error" in r:
            lines.append(f"{_label(r):58s} ERROR {r['error'][:120]}")
            continue
        if "ms" not in r:  # --dry-run
            lines.append(f"{_label(r):58s} {'':>9s} {'':>9s} {'':>7s} {r['bar']:5.2f}")
            continue
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        peer = f"{r['peer_ms']:.4f}" if r["peer_ms"] else "-"
        verdict = "pass" if r["passed"] else ("WRONG" if not r["ok"] else "below bar" if r["spill_bytes"] == 0
                                              else "spills")
        lines.append(f"{_label(r):58s} {r['ms']:9.4f} {peer:>9s} {ratio:>7s} {r['bar']:5.2f} {r['spill_bytes']:5d}"
                     f"  {verdict}")
    if recs and "ms" in recs[0] or any("passed" in r for r in recs):
        lines.append(f"{sum(1 for r in recs if r.get('passed'))} of {len(recs)} rows pass")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20, help="timed runs per side (medians)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every row as JSON")
    ap.add_argument("--only", default="", help="comma-separated row names (user/NAME, gemm, attention_fwd)")
    ap.add_argument("--dry-run", action="store_true", help="print the rows and their bars; no GPU")
    a = ap.parse_args(argv)
    only = set(filter(None, a.only.split(",")))
    todo = [r for r in rows() if not only or r["name"] in only]
    if only and not todo:
        print(f"defaults.py: no row named {sorted(only)}", file=sys.stderr)
        return 2
    if a.dry_run:
        print(format_table(todo))
        return 0
    import torch  # CUDA up before the first launch

    device = torch.cuda.get_device_name()
    recs = []
    for row in todo:
        recs.append({**run_row(row, a.reps), "device": device})
        print(format_table(recs[-1:]).splitlines()[1], flush=True)
        if a.json:  # after every row: a run cut short keeps the rows it measured
            Path(a.json).write_text(json.dumps(recs, indent=1, default=str) + "\n")
    print("\n" + format_table(recs))
    return 0 if all(r.get("passed") for r in recs) else 1


if __name__ == "__main__":
    sys.exit(main())
