"""Attention forward + backward: tkir (examples/attention_autograd.py) against SDPA's cuDNN and flash backends.

    python3 scripts/bench/attention_bwd.py [--batch 16] [--heads 16] [--n 1536,3072,6144,12288] [--d 128]
        [--causal 0|1|both] [--reps 20] [--gqa G] [--variant fused|fused-deterministic|three-kernel] [--json PATH]
    python3 scripts/bench/attention_bwd.py --dry-run [...]     # no GPU, no torch: each row's kernels and consts

Per (N, causal), three ways to compute o = attention(q, k, v) and then dQ, dK, dV from dO:
- tkir: examples/attention_autograd.py's `attention` (attention_fwd.tk saving L), through torch.autograd.grad,
  with the backward --variant names: `fused` (the default: attention_bwd_prep.tk, attention_bwd.tk adding dQ into
  an f32 workspace by TMA reduce-add, attention_bwd_dq_convert.tk), `fused-deterministic` (the same kernels with
  -D DET=1: each key block's dQ part stored in its own slot of a workspace cdiv(N, BKV) times larger, summed in
  key-block order by the convert; `attention(..., deterministic=True)`) or `three-kernel` (attention_bwd_prep.tk,
  attention_bwd_dkdv.tk, attention_bwd_dq.tk); --d 256 runs the fused kernels only (-D DS=4);
- cudnn, flash: torch.nn.functional.scaled_dot_product_attention under torch.nn.attention.sdpa_kernel with
  SDPBackend.CUDNN_ATTENTION and SDPBackend.FLASH_ATTENTION (FA2), the same way.
Two timings of each: the forward and the backward of one input set (fwd+bwd), and the backward alone
(torch.autograd.grad of o against dO, the forward run before the timed region, untimed).
First tkir's output and gradients are checked on fresh random inputs against SDPA's math backend in f32 on the
same bf16 values (relative L2 error within BOUND). Then the three ways are timed interleaved with
tkir.tools.timing.time_pair_ms (warm-up, an L2 flush and a GPU-side host lead before every run, CUDA events,
medians over --reps runs, the order rotated from rep to rep, input sets rotated past the L2). FLOPs: the
backward's are 2.5x the forward's (the forward's two matmuls, 4 N^2 D per (batch, head); the backward's five,
10 N^2 D; causal half), the convention of FlashAttention's and ThunderKittens' backward numbers; fwd+bwd is
3.5x the forward's. The table gives milliseconds, TFLOP/s and the ratios cudnn / tkir and flash / tkir (above
1: tkir is faster), for fwd+bwd and for the backward alone.

--gqa G: grouped-query attention, k and v with H / G heads (tkir's kernels compiled with -D G, SDPA called with
enable_gqa=True); the forward alone (no autograd) is timed too (row `fwd`: FLOPs the forward's). The check then
compares whole groups (the first max(2, G) query heads and their K/V heads), since a K/V head's gradient sums
its G query heads. A peer backend that refuses enable_gqa at these shapes is reported as n/a.
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

DEFAULT_N = "1536,3072,6144,12288"  # the attention backward bar's lengths at B = H = 16, D = 128
BOUND = 2e-2  # relative L2 error of o, dQ, dK, dV against SDPA's math backend in f32 (bf16 outputs)
FWD_MATMULS = 2  # Q K^T and P V: 2 N^2 D flops each per (batch, head)
BWD_FLOP_FACTOR = 2.5  # the backward's five matmuls are 2.5x the forward's two
CHECK_HEADS = 2  # heads of batch 0 the check compares (check)
PEERS = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION"}
# --variant: (attention_autograd's backward=, deterministic=) for tkir's backward
VARIANTS = {"fused": ("fused", False), "three-kernel": ("three-kernel", False), "fused-deterministic": ("fused", True)}


def parse_lengths(text: str) -> list[int]:
    """'1536,3072' -> [1536, 3072]."""
    out = []
    for part in text.split(","):
        if not part.strip().isdigit() or int(part) < 1:
            raise argparse.ArgumentTypeError(f"sequence length {part!r}: expected a positive integer")
        out.append(int(part))
    return out


def flops(b: int, h: int, n: int, d: int, causal: bool, backward_only: bool = False, what: str | None = None) -> float:
    """Flops of one run (h: query heads): the forward's 2 matmuls of 2 N^2 D, times 2.5 (the backward alone), 3.5
    (forward + backward) or 1 (`what` "fwd"); causal half."""
    fwd = FWD_MATMULS * 2 * b * h * n * n * d
    if what is not None:
        backward_only = what == "bwd"
    factor = 1.0 if what == "fwd" else BWD_FLOP_FACTOR + (0 if backward_only else 1)
    return factor * fwd / (2 if causal else 1)


def _example() -> Any:
    from tkir.tools.examples import load_module

    return load_module(ROOT / "examples/attention_autograd.py")  # once per process (sys.modules)


def plan(d: int, causal: bool, g: int = 1, variant: str = "fused") -> dict[str, Any]:
    """Compile the kernels as attention_autograd compiles them (no GPU needed): their resolved consts. `variant`
    is a --variant name."""
    import tkir

    ex = _example()
    c = int(causal)
    gqa = {"G": g} if g > 1 else {}
    kernels = {"attention_fwd": dict(D=d, CAUSAL=c, BQ="auto", BKV="auto", **gqa), "attention_bwd_prep": dict(D=d)}
    backward, deterministic = VARIANTS[variant]
    if backward == "fused":
        main, convert = ex.fused_consts(d, causal, g, deterministic)
        kernels |= {"attention_bwd": main, "attention_bwd_dq_convert": convert}
    else:
        kernels |= {"attention_bwd_dkdv": dict(D=d, CAUSAL=c, BQ="auto", **gqa),
                    "attention_bwd_dq": dict(D=d, CAUSAL=c, **gqa)}
    out = {}
    for name, consts in kernels.items():
        k = tkir.compile(str(ex.HERE / f"{name}.tk"), **consts)
        out[name] = dict(k.module.kernel.attrs["consts"])
    return out


def make_inputs(torch, b: int, h: int, n: int, d: int, g: int = 1) -> tuple:  # noqa: ANN001
    """q, k, v, dO (bf16, unit normal): k and v with h / g heads."""
    q, k, v, do = (torch.randn(b, hh, n, d, device="cuda").to(torch.bfloat16) for hh in (h, h // g, h // g, h))
    return q, k, v, do


def _sdpa(torch, args: list, causal: bool) -> Any:  # noqa: ANN001
    """SDPA of q, k, v (enable_gqa where k has fewer heads than q)."""
    gqa = {"enable_gqa": True} if args[1].shape[1] != args[0].shape[1] else {}
    return torch.nn.functional.scaled_dot_product_attention(*args, is_causal=causal, **gqa)


def way_for_set(torch, sets: list, causal: bool, backend: str | None, what: str,  # noqa: ANN001, ANN201
                variant: str = "fused"):
    """For input set i, the zero-argument call to time: `what` "fwdbwd", the forward and backward
    (torch.autograd.grad); "bwd", the forward run now (before the timed region) and the backward returned; "fwd",
    the forward alone without autograd. `backend` None is tkir's attention (its backward the --variant
    `variant`), else SDPA under that SDPBackend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    attention = _example().attention
    backward, deterministic = VARIANTS[variant]

    def forward(args: list) -> Any:
        if backend is None:
            return attention(*args, causal=causal, backward=backward, deterministic=deterministic)
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return _sdpa(torch, args, causal)

    def forward_only(args: list) -> Any:
        with torch.no_grad():
            return forward(args)

    def for_set(i: int):
        q, k, v, do = sets[i]
        if what == "fwd":
            return lambda: forward_only([q, k, v])
        args = [t.detach().requires_grad_() for t in (q, k, v)]
        if what == "bwd":
            o = forward(args)
            return lambda: torch.autograd.grad(o, args, do, retain_graph=True)
        return lambda: torch.autograd.grad(forward(args), args, do)
    return for_set


def check(torch, q, k, v, do, causal: bool, variant: str = "fused") -> dict[str, float]:  # noqa: ANN001
    """Relative L2 error of tkir's o, dQ, dK, dV against SDPA's math backend in f32 on the same bf16 values. tkir
    runs on the whole tensors; the reference on the first CHECK_HEADS heads of batch 0 only (each (batch, head) is
    independent, and the math backend's f32 scores of the whole bench shape would not fit: 154 GB at 16 x 16 x
    12288), which are compared. With GQA (k with H / G heads) whole groups: max(CHECK_HEADS, G) query heads,
    rounded up to groups, and their K/V heads."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tkir.tools.timing import rel_err

    g = q.shape[1] // k.shape[1]
    kv_heads = -(-max(CHECK_HEADS, g) // g)
    heads = (kv_heads * g, kv_heads, kv_heads)
    args = [t.detach().requires_grad_() for t in (q, k, v)]
    backward, deterministic = VARIANTS[variant]
    o = _example().attention(*args, causal=causal, backward=backward, deterministic=deterministic)
    got = (o.detach(), *torch.autograd.grad(o, args, do))
    got = tuple(t[:1, :hh] for t, hh in zip(got, (heads[0], *heads), strict=True))
    ref_args = [t[:1, :hh].detach().float().requires_grad_() for t, hh in zip((q, k, v), heads, strict=True)]
    with sdpa_kernel(SDPBackend.MATH):
        ref_o = _sdpa(torch, ref_args, causal)
    want = (ref_o.detach(), *torch.autograd.grad(ref_o, ref_args, do[:1, :heads[0]].float()))
    torch.cuda.synchronize()
    return {name: rel_err(torch, g.float(), r) for name, g, r in zip(("O", "DQ", "DK", "DV"), got, want, strict=True)}


def bench_row(b: int, h: int, n: int, d: int, causal: bool, reps: int, g: int | None = None,
              variant: str = "fused") -> dict:
    """One (N, causal) row; `g` (--gqa) adds grouped-query inputs and the forward-alone timing; `variant` is
    tkir's backward, a --variant name (VARIANTS: attention_autograd's `backward=` and `deterministic=`)."""
    import torch

    from tkir.tools import timing

    groups = g or 1
    nbytes = 2 * 4 * b * n * d * (h + h // groups)  # q, dO, o, dQ and k, v, dK, dV (bf16)
    nsets = timing.rotation_sets(nbytes)
    sets = [make_inputs(torch, b, h, n, d, groups) for _ in range(nsets)]
    errs = check(torch, *sets[0], causal, variant)
    row: dict[str, Any] = dict(B=b, H=h, N=n, D=d, causal=causal, variant=variant, rel_err=errs,
                               ok=all(e <= BOUND for e in errs.values()))
    if g is not None:
        row["G"] = groups
    for what in (("fwd",) if g is not None else ()) + ("fwdbwd", "bwd"):
        ways: dict[str, Any] = {}
        for name, be in (("tkir", None), *PEERS.items()):
            f = way_for_set(torch, sets, causal, be, what, variant)
            try:  # each once outside the timing; a backend that refuses these inputs (enable_gqa) is left out
                f(0)()
            except RuntimeError as e:
                if be is None:
                    raise
                print(f"{name} refused {what} at {b}x{h}x{n}x{d} G={groups}: {str(e).splitlines()[0]}", flush=True)
                continue
            ways[name] = f
        torch.cuda.synchronize()
        times = dict(zip(ways, timing.time_pair_ms(torch, list(ways.values()), nsets, reps, warmup=5), strict=True))
        work = flops(b, h, n, d, causal, what=what)
        ms = times["tkir"]
        t: dict[str, Any] = dict(tkir_ms=ms, tkir_tflops=work / ms / 1e9)
        for name in PEERS:
            peer_ms = times.get(name)
            t |= {f"{name}_ms": peer_ms, f"{name}_tflops": None if peer_ms is None else work / peer_ms / 1e9,
                  f"{name}_ratio": None if peer_ms is None else peer_ms / ms}
        row[what] = t
    print(json.dumps(row), flush=True)
    return row


def format_table(rows: list[dict]) -> str:
    head = (f"{'B x H x N x D':>24} {'causal':>6} {'timed':>6} {'tkir ms':>9} {'cudnn ms':>9} {'flash ms':>9} "
            f"{'tkir TF/s':>9} {'cudnn/tkir':>10} {'flash/tkir':>10}  check")
    lines = [head, "-" * len(head)]

    def num(x: float | None, width: int, digits: int) -> str:
        return f"{'n/a':>{width}}" if x is None else f"{x:>{width}.{digits}f}"
    for r in rows:
        verdict = "ok" if r["ok"] else "FAIL " + ", ".join(f"{k} {v:.1e}" for k, v in r["rel_err"].items())
        shape = f"{r['B']}x{r['H']}x{r['N']}x{r['D']}" + (f" G={r['G']}" if "G" in r else "")
        for what in ("fwd", "fwdbwd", "bwd"):
            if what not in r:
                continue
            t = r[what]
            lines.append(f"{shape:>24} {int(r['causal']):>6} {what:>6} {t['tkir_ms']:>9.3f} {num(t['cudnn_ms'], 9, 3)} "
                         f"{num(t['flash_ms'], 9, 3)} {t['tkir_tflops']:>9.1f} {num(t['cudnn_ratio'], 10, 3)} "
                         f"{num(t['flash_ratio'], 10, 3)}  {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--n", type=parse_lengths, default=parse_lengths(DEFAULT_N), help="sequence lengths, N1,N2,...")
    ap.add_argument("--d", type=int, choices=[64, 128, 256], default=128, help="head dim (256: fused variants only)")
    ap.add_argument("--causal", choices=["0", "1", "both"], default="both")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per way (medians)")
    ap.add_argument("--gqa", type=int, default=None, metavar="G",
                    help="grouped-query attention: k, v with heads / G heads (SDPA enable_gqa); also times the forward")
    ap.add_argument("--variant", choices=list(VARIANTS), default="fused",
                    help="tkir's backward: the one-kernel path (default), it with dQ summed in a fixed order, "
                         "or the three kernels before it")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every row as JSON")
    ap.add_argument("--dry-run", action="store_true", help="compile and print each row's kernels' consts; no GPU")
    args = ap.parse_args(argv)
    causals = [False, True] if args.causal == "both" else [args.causal == "1"]
    if args.gqa is not None and (args.gqa < 1 or args.heads % args.gqa):
        ap.error(f"--gqa {args.gqa}: the query heads ({args.heads}) must be a positive multiple of G")
    if args.d == 256 and VARIANTS[args.variant][0] != "fused":
        ap.error(f"--d 256 --variant {args.variant}: only the fused backward takes D = 256 (the three-kernel one holds "
                 "dK and dV of 256 columns in registers)")
    variant = args.variant
    if args.dry_run:
        for causal in causals:
            print(f"D = {args.d}, causal = {int(causal)}: " + json.dumps(plan(args.d, causal, args.gqa or 1, variant)))
            for n in args.n:
                work = flops(args.batch, args.heads, n, args.d, causal)
                print(f"  {args.batch}x{args.heads}x{n}x{args.d}: {work / 1e12:.2f} TFLOP forward + backward")
        return 0
    rows = [bench_row(args.batch, args.heads, n, args.d, causal, args.reps, args.gqa, variant)
            for causal in causals for n in args.n]
    print(format_table(rows))
    if args.json:
        import torch

        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, python=platform.python_version(),
                    reps=args.reps, command=" ".join(sys.argv), variant=args.variant,
                    flops="backward 2.5x the forward's; fwdbwd 3.5x; fwd (--gqa) the forward's")
        Path(args.json).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
