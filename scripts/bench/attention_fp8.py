"""fp8 attention forward: tkir's examples/attention_fp8.tk beside tkir's bf16 forward and SDPA, in one run.

    python3 scripts/bench/attention_fp8.py [--shapes B,H,N,D;...] [--causal 0|1|both] [--tune] [--reps 20]
        [--json PATH]
    python3 scripts/bench/attention_fp8.py --variant "b192:BKV=192" --variant "b192np:BKV=192:-pingpong" [...]
    python3 scripts/bench/attention_fp8.py --dry-run [...]     # no GPU, no torch: each kernel's consts

Shape (default): (B, H, N, D) = (8, 16, 4096, 128), causal and not. Per shape, on fresh inputs quantised as
examples/attention_fp8.py quantises them (e4m3 Q, K, V with a scale per (batch, head); V transposed):
- tkir fp8: attention_fp8.tk at its default consts (BQ = BKV = 128) or, with --tune, at the @tune point `tkc tune`
  chooses for the shape (tkir.tools.bench.tuned_consts);
- tkir bf16: examples/attention_fwd.tk as examples/attention_fwd.py's bench rows compile it (BQ, BKV `auto`,
  STAGES 2; its default passes), on bf16 of the same dequantised values;
- SDPA cuDNN bf16: torch.nn.functional.scaled_dot_product_attention under SDPBackend.CUDNN_ATTENTION on those
  bf16 values (the bar: torch's SDPA has no fp8 path);
- SDPA fp8: the same call on the e4m3 tensors, tried; torch refuses fp8 inputs to SDPA today, and the refusal
  is reported (n/a), not hidden.
First the outputs are checked: tkir fp8's O against float64 of the dequantised inputs (relative L2 within
BOUND, examples/attention_fp8.py's TOLERANCE for O), the bf16 ways against the same reference (reported). Then
all ways are timed interleaved with tkir.tools.timing.time_pair_ms (warm-up, an L2 flush and a GPU-side host
lead before every run, CUDA events, medians over --reps runs, the order rotated from rep to rep, input sets
rotated past the L2). FLOPs 4 B H N² D (two matmuls; half that causal). The table gives TFLOP/s and fp8 / bf16
(the issue's bar: >= 1.4x tkir's own bf16 forward) and fp8 / cuDNN. Each `--variant LABEL:CONSTS[:EDITS]` adds
one more fp8 way, timed in the same interleaved runs and checked against the same reference: attention_fp8.tk
with CONSTS (`BKV=192,STAGES=3`) over the row's and the pass-pipeline edits EDITS (`-pingpong`, as `tkc compile
--pass-edits` takes them); its row gives TFLOP/s and the ratio to the default fp8 kernel.
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

DEFAULT_SHAPES = [(8, 16, 4096, 128)]
BAR_VS_BF16 = 1.4  # the bar: fp8 >= 1.4x tkir's bf16 forward
TUNED = ["BQ", "BKV", "STAGES"]  # attention_fp8.tk's @tune names
BF16_CONSTS: dict = {}  # attention_fwd.tk at its defaults (BQ, BKV auto in its header), as its bench rows compile it
WAYS = ["tkir fp8", "tkir bf16", "SDPA cuDNN bf16", "SDPA fp8"]


def parse_variant(text: str) -> tuple[str, dict, str | None]:
    """'b192:BKV=192,STAGES=3:-pingpong' -> ('b192', {'BKV': 192, 'STAGES': 3}, '-pingpong')."""
    label, _, rest = text.partition(":")
    consts_text, _, edits = rest.partition(":")
    try:
        consts = {k.strip(): int(v) for k, v in (kv.split("=", 1) for kv in consts_text.split(",") if kv.strip())}
    except ValueError:
        raise argparse.ArgumentTypeError(f"variant {text!r}: want LABEL:NAME=INT,...[:PASS_EDITS]") from None
    if not label or label in WAYS:
        raise argparse.ArgumentTypeError(f"variant {text!r}: want a label of its own before the first ':'")
    return label, consts, edits or None


def parse_shapes(text: str) -> list[tuple[int, int, int, int]]:
    """'8,16,4096,128;4,16,8192,128' -> [(8, 16, 4096, 128), (4, 16, 8192, 128)]."""
    out = []
    for part in text.split(";"):
        dims = part.split(",")
        if len(dims) != 4 or not all(d.strip().isdigit() and int(d) > 0 for d in dims):
            raise argparse.ArgumentTypeError(f"shape {part!r}: expected B,H,N,D (positive integers)")
        if int(dims[3]) not in (64, 128):
            raise argparse.ArgumentTypeError(f"shape {part!r}: attention_fp8.tk takes D = 64 or 128")
        out.append(tuple(int(d) for d in dims))
    return out


def flops(b: int, h: int, n: int, d: int, causal: bool) -> float:
    """Q Kᵀ and P V, 2 N² D each per (batch, head); causal does half."""
    full = 2 * 2 * b * h * n * n * d
    return full / 2 if causal else full


def companion(name: str) -> Any:
    from tkir.tools.examples import load_companion

    return load_companion(str(ROOT / "examples" / f"{name}.tk"))


def fp8_consts(sizes: dict, d: int, causal: bool, tune: bool) -> tuple[dict, str | None]:
    consts = {"D": d, "CAUSAL": int(causal)}
    if not tune:
        return consts, None
    from tkir.tools.bench import tuned_consts

    return tuned_consts(str(ROOT / "examples" / "attention_fp8.tk"), sizes, consts, TUNED, compile_kw={}, tune_kw={})


def bench_row(b: int, h: int, n: int, d: int, causal: bool, reps: int, tune: bool,
              variants: list[tuple[str, dict, str | None]] = ()) -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import tkir
    from tkir.tools import timing

    comp = companion("attention_fp8")
    sizes = dict(B=b, H=h, N=n)
    consts, note = fp8_consts(sizes, d, causal, tune)
    fp8 = tkir.compile(str(ROOT / "examples" / "attention_fp8.tk"), **consts)
    bf16 = tkir.compile(str(ROOT / "examples" / "attention_fwd.tk"), D=d, CAUSAL=int(causal), **BF16_CONSTS)
    extra = {label: tkir.compile(str(ROOT / "examples" / "attention_fp8.tk"), pass_edits=edits,
                                 **{**consts, **vc}) for label, vc, edits in variants}
    nsets = timing.rotation_sets(comp.bytes_moved(sizes, consts) + 2 * 4 * b * h * n * d)
    sets = []
    for _ in range(nsets):
        ins = comp.torch_inputs(sizes, consts)
        q, k, v = (t.to(torch.bfloat16).contiguous() for t in comp.torch_dequantised(ins, torch.float32))
        o16 = torch.empty(b, h, n, d, device="cuda", dtype=torch.bfloat16)
        l16 = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        sets.append(dict(fp8=ins, bf16=[q, k, v, o16, l16]))

    def sdpa(args: list, backend: Any) -> Any:
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(*args, is_causal=causal)

    ways: dict[str, Any] = {
        "tkir fp8": lambda i: (lambda: fp8(*sets[i]["fp8"])),
        "tkir bf16": lambda i: (lambda: bf16(*sets[i]["bf16"])),
        "SDPA cuDNN bf16": lambda i: (lambda: sdpa(sets[i]["bf16"][:3], SDPBackend.CUDNN_ATTENTION)),
    }
    for label, kv in extra.items():
        ways[label] = lambda i, kv=kv: (lambda: kv(*sets[i]["fp8"]))
    row: dict[str, Any] = dict(B=b, H=h, N=n, D=d, causal=bool(causal), fp8_consts=consts, tune_note=note,
                               bf16_consts=dict(bf16.module.kernel.attrs["consts"]))
    try:  # fp8 SDPA: tried on the e4m3 tensors (V untransposed), reported n/a when torch refuses it
        q8, k8, vt8 = sets[0]["fp8"][:3]
        fp8_args = [q8, k8, vt8.view(torch.uint8)[..., :n].transpose(2, 3).contiguous().view(vt8.dtype)]
        sdpa(fp8_args, SDPBackend.CUDNN_ATTENTION)
        torch.cuda.synchronize()
        ways["SDPA fp8"] = lambda i: (lambda: sdpa(fp8_args, SDPBackend.CUDNN_ATTENTION))
    except Exception as e:  # whatever torch raises for a dtype it does not take
        row["sdpa_fp8_refused"] = str(e).splitlines()[0][:200]
        print(f"SDPA refused fp8 inputs: {row['sdpa_fp8_refused']}", flush=True)
    first = sets[0]
    fp8(*first["fp8"])
    bf16(*first["bf16"])
    cudnn_o = sdpa(first["bf16"][:3], SDPBackend.CUDNN_ATTENTION)
    torch.cuda.synchronize()
    ref = comp.torch_reference(first["fp8"], sizes, consts)["O"]
    row["rel_err"] = timing.rel_err(torch, first["fp8"][-2], ref)
    row["bf16_rel_err"] = timing.rel_err(torch, first["bf16"][3], ref)
    row["cudnn_rel_err"] = timing.rel_err(torch, cudnn_o, ref)
    row["ok"] = bool(row["rel_err"] <= comp.TOLERANCE["O"])
    row["variants"] = {}
    for (label, _, edits), kv in zip(variants, extra.values(), strict=True):
        first["fp8"][-2].view(torch.int16).fill_(-1)  # NaN bf16: a variant that writes nothing fails its check
        kv(*first["fp8"])
        torch.cuda.synchronize()
        err = timing.rel_err(torch, first["fp8"][-2], ref)
        row["variants"][label] = dict(consts=dict(kv.module.kernel.attrs["consts"]), pass_edits=edits, rel_err=err,
                                      ok=bool(err <= comp.TOLERANCE["O"]))
        row["ok"] = row["ok"] and row["variants"][label]["ok"]
    del ref, cudnn_o
    names = list(ways)
    times = timing.time_pair_ms(torch, [ways[w] for w in names], nsets, reps, warmup=5)
    work = flops(b, h, n, d, causal)
    for w in WAYS:
        ms = times[names.index(w)] if w in names else None
        row[w] = dict(ms=ms, tflops=None if ms is None else work / ms / 1e9)
    ms8 = row["tkir fp8"]["ms"]
    for label, v in row["variants"].items():
        ms = times[names.index(label)]
        v.update(ms=ms, tflops=work / ms / 1e9, over_default=ms8 / ms, over_bf16=row["tkir bf16"]["ms"] / ms)
    row["fp8_over_bf16"] = row["tkir bf16"]["ms"] / ms8
    row["fp8_over_cudnn"] = row["SDPA cuDNN bf16"]["ms"] / ms8
    row["meets_bar"] = bool(row["fp8_over_bf16"] >= BAR_VS_BF16)
    print(json.dumps(row), flush=True)
    return row


def format_table(rows: list[dict]) -> str:
    head = (f"{'B,H,N,D':>16} {'causal':>6} " + " ".join(f"{w + ' TF/s':>20}" for w in WAYS)
            + f" {'fp8/bf16':>9} {'fp8/cuDNN':>9}  check")
    lines = [head, "-" * len(head)]

    def num(x: float | None, width: int, digits: int) -> str:
        return f"{'n/a':>{width}}" if x is None else f"{x:>{width}.{digits}f}"
    for r in rows:
        shape = f"{r['B']},{r['H']},{r['N']},{r['D']}"
        verdict = ("ok" if r["ok"] else "FAIL") + f" {r['rel_err']:.1e}"
        verdict += "" if r["meets_bar"] else f" (under the {BAR_VS_BF16}x bar)"
        tf = " ".join(num(r[w]["tflops"], 20, 1) for w in WAYS)
        lines.append(f"{shape:>16} {int(r['causal']):>6} {tf} {r['fp8_over_bf16']:>9.3f} "
                     f"{r['fp8_over_cudnn']:>9.3f}  {verdict}")
        for label, v in r.get("variants", {}).items():
            lines.append(f"{'':>16} {'':>6}   {label}: {v['tflops']:.1f} TF/s, {v['over_default']:.3f}x the default, "
                         f"{v['over_bf16']:.3f}x bf16, {'ok' if v['ok'] else 'FAIL'} {v['rel_err']:.1e} "
                         f"({v['consts']}{', ' + v['pass_edits'] if v['pass_edits'] else ''})")
    return "\n".join(lines)


def dry_run(shapes: list[tuple[int, int, int, int]], causals: list[bool]) -> None:
    import tkir

    for b, h, n, d in shapes:
        for causal in causals:
            k8 = tkir.compile(str(ROOT / "examples" / "attention_fp8.tk"), D=d, CAUSAL=int(causal))
            k16 = tkir.compile(str(ROOT / "examples" / "attention_fwd.tk"), D=d, CAUSAL=int(causal), **BF16_CONSTS)
            c8, c16 = (dict(k.module.kernel.attrs["consts"]) for k in (k8, k16))
            print(f"{b},{h},{n},{d} causal={int(causal)}: {flops(b, h, n, d, causal) / 1e12:.3f} TFLOP; "
                  f"fp8 consts {c8}; bf16 consts {c16}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=parse_shapes, default=DEFAULT_SHAPES, help="B,H,N,D;B,H,N,D;...")
    ap.add_argument("--causal", choices=["0", "1", "both"], default="both")
    ap.add_argument("--tune", action="store_true", help="time the fp8 kernel at the @tune point `tkc tune` chooses")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per way (medians)")
    ap.add_argument("--variant", type=parse_variant, action="append", default=[], metavar="LABEL:CONSTS[:EDITS]",
                    help="one more fp8 way in the same runs: consts over the row's and pass-pipeline edits")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every row as JSON")
    ap.add_argument("--dry-run", action="store_true", help="compile and print each kernel's consts; no GPU")
    args = ap.parse_args(argv)
    causals = [False, True] if args.causal == "both" else [args.causal == "1"]
    if args.dry_run:
        dry_run(args.shapes, causals)
        return 0
    rows = [bench_row(b, h, n, d, c, args.reps, args.tune, args.variant) for b, h, n, d in args.shapes for c in causals]
    print(format_table(rows))
    if args.json:
        import torch

        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, python=platform.python_version(),
                    reps=args.reps, command=" ".join(sys.argv), flops="4 B H N^2 D (half causal)",
                    ways=WAYS, bar=f"tkir fp8 >= {BAR_VS_BF16}x tkir bf16")
        Path(args.json).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
