"""The integer examples against torch: embedding.tk, cross_entropy.tk and argmax.tk.

    python3 scripts/bench/int_kernels.py [--only embedding,cross_entropy,argmax] [--reps 20] [--json PATH]
    python3 scripts/bench/int_kernels.py --dry-run      # no GPU, no torch: compile every configuration, print it

- embedding: Out[t, :] = Table[Ids[t], :] of a 128k x 4096 bf16 table (1 GiB) by 8192 i32 ids, against
  torch.nn.functional.embedding and against a device-to-device copy of the same bytes (an [8192, 4096] bf16
  tensor copied with Tensor.copy_), timed in the same run: the bar is tkir >= 85% of the copy's bandwidth.
- cross_entropy: the loss of each row of bf16 logits [N, V] against i32 labels, at N in {4096, 16384} and V in
  {32000, 128256}, against torch.nn.functional.cross_entropy(reduction="none") on the same bf16 logits (int64
  labels, converted once, outside the timing) and torch.compile (Inductor) of that call.
- argmax: the i32 argmax of each row of X [N, V] (the same shapes) against torch.argmax(X, dim=1).

tkir runs each kernel in a few configurations (CONFIGS: rows per block, chunk width, warpgroups), all timed
interleaved with the peers in one tkir.tools.timing.time_pair_ms group (an L2 flush and a GPU-side host lead
before every run, CUDA events, medians over --reps runs, the order rotated from rep to rep, input sets rotated
past the L2); the row reports the fastest configuration and lists them all. Before timing, every configuration's
output is checked on the first input set: embedding and argmax exactly (torch.equal with F.embedding /
torch.argmax), cross_entropy within CE_BOUND (relative L2) of F.cross_entropy on the f32 values of the logits.
GB/s counts the bytes each kernel must move once (embedding: the picked rows read and written and the ids;
cross_entropy: the logits, labels and losses; argmax: X and the indices); the copy moves the embedding's rows
(read and written).
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

EXAMPLES = ROOT / "examples"
KERNELS = ("embedding", "cross_entropy", "argmax")
EMBEDDING_SHAPE = dict(V=131072, D=4096, T=8192)  # the lookup: a 128k x 4096 table, 8192 ids
ROW_SHAPES = [dict(N=n, V=v) for n in (4096, 16384) for v in (32000, 128256)]
COPY_BAR = 0.85  # embedding: at least this fraction of the copy's bandwidth
CE_BOUND = 1e-5  # cross_entropy: ||tkir - torch f32|| / ||torch f32||
# The configurations timed per kernel (the first is the example's default): rows per block, chunk width,
# consumer warpgroups; each assembles without spills on both targets (--dry-run prints them). More blocks in
# flight or wider accesses per thread move the most bytes; which wins is measured here, in the same run.
CONFIGS: dict[str, list[dict[str, int]]] = {
    "embedding": [dict(ROWS=2, DC=4096, WG=1), dict(ROWS=1, DC=4096, WG=1), dict(ROWS=4, DC=4096, WG=2),
                  dict(ROWS=8, DC=2048, WG=2), dict(ROWS=1, DC=2048, WG=1)],
    "cross_entropy": [dict(ROWS=1, VC=4096, WG=4), dict(ROWS=1, VC=8192, WG=8), dict(ROWS=1, VC=2048, WG=2),
                      dict(ROWS=1, VC=1024, WG=1)],
    "argmax": [dict(ROWS=1, VC=4096, WG=4), dict(ROWS=1, VC=8192, WG=4), dict(ROWS=1, VC=2048, WG=2),
               dict(ROWS=1, VC=1024, WG=1)],
}


def compile_all(name: str, target: str = "sm_90a") -> list[Any]:
    """Every configuration of one example, compiled (no GPU needed)."""
    import tkir

    return [tkir.compile(str(EXAMPLES / f"{name}.tk"), target=target, **consts) for consts in CONFIGS[name]]


def config_label(consts: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in consts.items())


def bytes_moved(name: str, shape: dict[str, int]) -> int:
    if name == "embedding":
        return 2 * 2 * shape["T"] * shape["D"] + 4 * shape["T"]
    if name == "cross_entropy":
        return 2 * shape["N"] * shape["V"] + 8 * shape["N"]
    return 2 * shape["N"] * shape["V"] + 4 * shape["N"]


def _inputs(torch, name: str, shape: dict[str, int]) -> dict[str, Any]:  # noqa: ANN001
    """One input set: bf16 values, i32 indices, outputs to write (and what the peers read)."""
    if name == "embedding":
        v, d, t = shape["V"], shape["D"], shape["T"]
        table = torch.randn(v, d, device="cuda").to(torch.bfloat16)
        ids = torch.randint(0, v, (t,), device="cuda", dtype=torch.int32)
        return dict(table=table, ids=ids, out=torch.empty(t, d, device="cuda", dtype=torch.bfloat16),
                    src=torch.randn(t, d, device="cuda").to(torch.bfloat16),
                    dst=torch.empty(t, d, device="cuda", dtype=torch.bfloat16))
    n, v = shape["N"], shape["V"]
    x = (torch.randn(n, v, device="cuda") * 4).to(torch.bfloat16)
    if name == "argmax":
        return dict(x=x, out=torch.empty(n, device="cuda", dtype=torch.int32))
    labels = torch.randint(0, v, (n,), device="cuda", dtype=torch.int32)
    return dict(x=x, labels=labels, labels64=labels.long(), out=torch.empty(n, device="cuda"))


def _ce(torch, x, labels64):  # noqa: ANN001, ANN202
    return torch.nn.functional.cross_entropy(x, labels64, reduction="none")


def ways(torch, name: str, kernels: list[Any], sets: list[dict]) -> dict[str, Any]:  # noqa: ANN001
    """name -> fn_for_set(i) -> the call to time: tkir's configurations, then the peers."""
    out: dict[str, Any] = {}
    for consts, k in zip(CONFIGS[name], kernels, strict=True):
        if name == "embedding":
            out[f"tkir {config_label(consts)}"] = lambda i, k=k: (lambda: k(sets[i]["table"], sets[i]["ids"],
                                                                           sets[i]["out"]))
        elif name == "cross_entropy":
            out[f"tkir {config_label(consts)}"] = lambda i, k=k: (lambda: k(sets[i]["x"], sets[i]["labels"],
                                                                           sets[i]["out"]))
        else:
            out[f"tkir {config_label(consts)}"] = lambda i, k=k: (lambda: k(sets[i]["x"], sets[i]["out"]))
    if name == "embedding":
        out["torch"] = lambda i: (lambda: torch.nn.functional.embedding(sets[i]["ids"], sets[i]["table"]))
        out["copy"] = lambda i: (lambda: sets[i]["dst"].copy_(sets[i]["src"]))
    elif name == "cross_entropy":
        from tkir.tools.bench import inductor

        compiled = inductor(lambda x, labels64: _ce(torch, x, labels64))
        out["torch"] = lambda i: (lambda: _ce(torch, sets[i]["x"], sets[i]["labels64"]))
        out["compiled"] = lambda i: (lambda: compiled(sets[i]["x"], sets[i]["labels64"]))
    else:
        out["torch"] = lambda i: (lambda: torch.argmax(sets[i]["x"], dim=1))
    return out


def check(torch, name: str, kernels: list[Any], s: dict) -> dict[str, float]:  # noqa: ANN001
    """Each configuration's error on input set `s`: 0 where exact (embedding, argmax: 1.0 where not), else the
    relative L2 error against torch in f32."""
    errs = {}
    for consts, k in zip(CONFIGS[name], kernels, strict=True):
        label = config_label(consts)
        s["out"].fill_(-1 if s["out"].dtype == torch.int32 else float("nan"))
        if name == "embedding":
            k(s["table"], s["ids"], s["out"])
            errs[label] = 0.0 if torch.equal(s["out"], torch.nn.functional.embedding(s["ids"], s["table"])) else 1.0
        elif name == "argmax":
            k(s["x"], s["out"])
            errs[label] = 0.0 if torch.equal(s["out"], torch.argmax(s["x"], dim=1).to(torch.int32)) else 1.0
        else:
            k(s["x"], s["labels"], s["out"])
            ref = _ce(torch, s["x"].float(), s["labels64"]).double()
            got = s["out"].double()
            errs[label] = float("inf") if torch.isnan(got).any() else float((got - ref).norm() / ref.norm())
    torch.cuda.synchronize()
    return errs


def bench_row(name: str, shape: dict[str, int], reps: int) -> dict:
    import torch

    from tkir.tools import timing

    kernels = compile_all(name)
    nbytes = bytes_moved(name, shape)
    nsets = timing.rotation_sets(nbytes + (2 * shape["V"] * shape["D"] if name == "embedding" else 0))
    sets = [_inputs(torch, name, shape) for _ in range(nsets)]
    errs = check(torch, name, kernels, sets[0])
    bound = CE_BOUND if name == "cross_entropy" else 0.0
    fns = ways(torch, name, kernels, sets)
    for f in fns.values():  # once outside the timing (torch.compile compiles here)
        f(0)()
    torch.cuda.synchronize()
    times = dict(zip(fns, timing.time_pair_ms(torch, list(fns.values()), nsets, reps, warmup=5), strict=True))
    tkir_times = {k.removeprefix("tkir "): v for k, v in times.items() if k.startswith("tkir ")}
    best = min(tkir_times, key=lambda c: tkir_times[c])
    ms = tkir_times[best]
    configs = {c: dict(ms=t, gbs=nbytes / t / 1e6, rel_err=errs[c]) for c, t in tkir_times.items()}
    row: dict[str, Any] = dict(kernel=name, **shape, best=best, tkir_ms=ms, tkir_gbs=nbytes / ms / 1e6,
                               configs=configs, rel_err=errs[best], bound=bound,
                               ok=all(e <= bound for e in errs.values()))
    for peer in ("torch", "compiled", "copy"):
        if peer in times:
            row[f"{peer}_ms"] = times[peer]
            row[f"{peer}_ratio"] = times[peer] / ms  # above 1: tkir is faster
    if name == "embedding":
        row["copy_gbs"] = nbytes / times["copy"] / 1e6
        row["of_copy"] = row["tkir_gbs"] / row["copy_gbs"]
        row["bar"] = COPY_BAR
        row["ok"] = row["ok"] and row["of_copy"] >= COPY_BAR
    print(json.dumps(row), flush=True)
    return row


def format_table(rows: list[dict]) -> str:
    head = (f"{'kernel':>14} {'shape':>22} {'best config':>24} {'tkir ms':>9} {'GB/s':>7} {'torch/tkir':>10} "
            f"{'compiled/tkir':>13} {'of copy':>8}  check")
    lines = [head, "-" * len(head)]
    for r in rows:
        shape = f"V={r['V']} D={r['D']} T={r['T']}" if r["kernel"] == "embedding" else f"N={r['N']} V={r['V']}"
        comp = f"{r['compiled_ratio']:>13.3f}" if "compiled_ratio" in r else f"{'':>13}"
        copy = f"{r['of_copy']:>8.3f}" if "of_copy" in r else f"{'':>8}"
        verdict = "ok" if r["ok"] else f"FAIL (rel_err {r['rel_err']:.1e}, bound {r['bound']:.0e})"
        lines.append(f"{r['kernel']:>14} {shape:>22} {r['best']:>24} {r['tkir_ms']:>9.3f} {r['tkir_gbs']:>7.0f} "
                     f"{r['torch_ratio']:>10.3f} {comp} {copy}  {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(KERNELS), help=f"kernels, comma separated ({', '.join(KERNELS)})")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per way (medians)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every row as JSON")
    ap.add_argument("--dry-run", action="store_true", help="compile every configuration and print it; no GPU")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in KERNELS]
    if unknown:
        ap.error(f"unknown kernel(s) {', '.join(unknown)}: expected {', '.join(KERNELS)}")
    if args.dry_run:
        for name in names:
            for target in ("sm_90a", "sm_80"):
                for consts, k in zip(CONFIGS[name], compile_all(name, target), strict=True):
                    res = k.asm["ptxas"]
                    print(f"{name} {target} {config_label(consts)}: {res.registers} registers, "
                          f"{res.spill_stores + res.spill_loads} spill bytes, block {k.launch.block}")
        return 0
    rows = []
    for name in names:
        shapes = [EMBEDDING_SHAPE] if name == "embedding" else ROW_SHAPES
        rows += [bench_row(name, shape, args.reps) for shape in shapes]
    print(format_table(rows))
    if args.json:
        import torch

        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, python=platform.python_version(),
                    reps=args.reps, command=" ".join(sys.argv), copy_bar=COPY_BAR, ce_bound=CE_BOUND,
                    bytes="embedding: picked rows read + written + ids; cross_entropy: logits + labels + losses; "
                          "argmax: X + indices")
        Path(args.json).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
