"""The sm_80 (mma.sync) GEMM beside the mature mma.sync GEMMs of other compilers and libraries on this GPU.

Triton compiles `tl.dot` to mma.sync (its "MMA v2", the Ampere path) instead of wgmma when the environment
has DISABLE_MMA_V3=1; its loads become a cp.async ring of `num_stages` buffers. This script times such a
Triton GEMM (the kernel below) in the configurations given, tkir's gemm compiled for sm_80 in the
configurations given (consts and pass parameters per row), tkir's wgmma gemm (sm_90a), CUTLASS 2.x's Ampere
GEMMs (optional, scripts/bench/cutlass_sm80/) and cuBLAS (torch.matmul), all at one size (4096^3 bf16 by
default), interleaved in one process with tkir.tools.timing.time_pair_ms (L2 flushed before every run, inputs
rotated past the L2, order rotated, medians). Every kernel is checked against torch.matmul on fresh random
inputs first; each Triton kernel's PTX is checked for mma.sync and for the absence of wgmma.

    DISABLE_MMA_V3=1 python3 scripts/bench/sm80_gemm.py --out DIR [--reps 20] [--size M,N,K]
        [--tkir SPEC ...] [--triton BMxBNxBK:STAGES:WARPS ... | --triton all] [--rows triton,tkir]
        [--cutlass-lib .cutlass/libcutlass_sm80.so [--cutlass-names a,b]]
    python3 scripts/bench/sm80_gemm.py --dump-ptx DIR [--tkir SPEC ...]    # no GPU: each row's PTX

A tkir row SPEC is whitespace-separated tokens (the row's label is the text itself):
  sm_80 | sm_90a            the target (default sm_80)
  NAME=VALUE                a const of the kernel (BM=256 BN=128 BK=64 STAGES=4 ...)
  file=PATH                 another .tk file (default examples/gemm.tk); scripts/bench/gemm_wg.tk takes WG
                            (consumer warpgroups: WG=1 is a four-warp block) and OCC (blocks per SM)
  PASS{k=v,...}             the default pipeline's PASS with these parameters
                            (pipeline-cp-async{step_ahead=false}, plan-occupancy{producer_warps=0}, ...)
  -PASS                     the default pipeline without PASS (-stage-epilogue: the ablation)
  ptx=PATH                  load the PTX in PATH in place of the compiled kernel's (same launch): with
                            --dump-ptx run at a parent commit, a change and its parent timed in one table
  l2_128b                   a PTX rewrite as a screen (not a product path): cp.async with the L2 prefetch-size
                            hint CUTLASS's Ampere copies carry (`.L2::128B`, PTX 7.4; SASS LTC128B)
With no --tkir the rows are DEFAULT_ROWS. --dump-ptx DIR writes each row's PTX as DIR/<label with every run of
other characters than letters, digits and ._- as _>.ptx.

Writes DIR/sm80_gemm.json (every row), the best Triton kernel's PTX and cubin (DIR/triton_best.*), and prints a
table last (x_wgmma: the row's TFLOP/s over the first sm_90a row's).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

GEMM = "examples/gemm.tk"
# (BM, BN, BK, num_stages, num_warps): the Ampere configurations of Triton's own matmul tutorial and
# of torch.compile's mm templates, plus the 8-warp 64 x 64-per-warp tiles tkir uses (`--triton all`)
TRITON_CONFIGS = [
    (128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 256, 32, 3, 8), (256, 128, 32, 3, 8),
    (128, 256, 32, 4, 8), (256, 128, 32, 4, 8), (128, 128, 64, 4, 4), (128, 128, 32, 4, 4),
    (128, 128, 64, 3, 8), (128, 256, 64, 4, 8),
]
# Triton's fastest mma.sync configuration at 4096^3 on the H200 (422-428 TFLOP/s; docs/experiments.md,
# "sm_80 GEMM: Triton's mma.sync GEMM as the peer")
DEFAULT_TRITON = ["128x128x32:4:4"]
DEFAULT_ROWS = [
    "sm_90a",
    "sm_80",
    "sm_80 BM=256 BN=128 BK=64 STAGES=4",
    "sm_80 BM=128 BN=256 BK=32 STAGES=4",
    "sm_80 BM=128 BN=256 BK=64 STAGES=3",
    "sm_80 file=scripts/bench/gemm_wg.tk BM=128 BN=128 BK=32 STAGES=4 WG=1 plan-occupancy{producer_warps=0}",
]


def _l2_128b(ptx: str) -> str:
    """cp.async with the L2 prefetch-size hint CUTLASS's Ampere copies carry (`.L2::128B`, PTX 7.4; SASS LTC128B)."""
    return ptx.replace("cp.async.cg.shared.global [", "cp.async.cg.shared.global.L2::128B [")


PTX_REWRITES = {"l2_128b": _l2_128b}


def parse_row(spec: str) -> dict:
    """A --tkir SPEC as {label, file, target, consts, replace (pass name -> entry, "" drops it), ptx, rewrite}."""
    row: dict = dict(label=" ".join(spec.split()), file=GEMM, target="sm_80", consts={}, replace={}, ptx=None,
                     rewrite=None)
    for tok in spec.split():
        if tok in ("sm_80", "sm_90a"):
            row["target"] = tok
        elif tok in PTX_REWRITES:
            row["rewrite"] = tok
        elif tok.startswith("-"):
            row["replace"][tok[1:]] = ""
        elif "{" in tok:
            row["replace"][tok[:tok.index("{")]] = tok
        elif tok.startswith("file="):
            row["file"] = tok[5:]
        elif tok.startswith("ptx="):
            row["ptx"] = tok[4:]
        elif "=" in tok:
            name, value = tok.split("=", 1)
            row["consts"][name] = int(value)
        else:
            raise ValueError(f"--tkir {spec!r}: cannot read {tok!r}")
    return row


def row_slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_")


def compile_row(tkir, row: dict):
    """The row's kernel: compiled with its consts and pipeline, its PTX replaced or rewritten if it says so."""
    repl = row["replace"]
    passes = ",".join(x for x in (repl.get(p, p) for p in tkir.api.default_pipeline()) if x) if repl else None
    k = tkir.compile(str(ROOT / row["file"]), target=row["target"], **({"passes": passes} if passes else {}),
                     **row["consts"])
    if row["ptx"] or row["rewrite"]:
        k.lower()
        new = (Path(row["ptx"]).read_text() if row["ptx"] else PTX_REWRITES[row["rewrite"]](k.asm["ptx"]))
        if new == k.asm["ptx"]:
            raise ValueError(f"{row['label']}: the PTX replacement changed nothing")
        k.asm["ptx"] = new
    return k


def dump_ptx(specs: list[str], out: Path) -> int:
    import tkir

    out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        row = parse_row(spec)
        k = compile_row(tkir, row)
        path = out / f"{row_slug(row['label'])}.ptx"
        path.write_text(k.asm["ptx"])
        print(f"{row['label']}: {path}")
    return 0


def parse_triton(text: str) -> tuple[int, int, int, int, int]:
    """BMxBNxBK:STAGES:WARPS -> (BM, BN, BK, STAGES, WARPS)."""
    tile, stages, warps = text.split(":")
    bm, bn, bk = (int(v) for v in tile.split("x"))
    return bm, bn, bk, int(stages), int(warps)


def triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(N, BN)
        in_group = GROUP_M * num_n
        first_m = (pid // in_group) * GROUP_M
        size_m = min(num_m - first_m, GROUP_M)
        pid_m = first_m + (pid % in_group) % size_m
        pid_n = (pid % in_group) // size_m
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a_ptrs = a_ptr + (rm % M)[:, None] * sam + rk[None, :] * sak
        b_ptrs = b_ptr + rk[:, None] * sbk + (rn % N)[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, tl.cdiv(K, BK)):   # K % BK == 0 at the sizes timed here
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        c_ptrs = c_ptr + rm[:, None] * scm + rn[None, :] * scn
        tl.store(c_ptrs, acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))

    return mm, triton


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for sm80_gemm.json and triton_best.*")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rows", default="triton,tkir", help="which compilers' rows: triton, tkir (cuBLAS always)")
    ap.add_argument("--tkir", action="append", default=None, metavar="SPEC", help="a tkir row (see the docstring)")
    ap.add_argument("--triton", action="append", default=None, metavar="BMxBNxBK:STAGES:WARPS",
                    help=f"a Triton configuration, or `all` (default {DEFAULT_TRITON[0]})")
    ap.add_argument("--cutlass-lib", default=None, help="libcutlass_sm80.so from scripts/bench/cutlass_sm80/build.sh")
    ap.add_argument("--cutlass-names", default=None, help="comma-separated configurations (default: all of names.txt)")
    ap.add_argument("--size", default="4096,4096,4096", help="M,N,K")
    ap.add_argument("--dump-ptx", default=None, metavar="DIR", help="write each tkir row's PTX to DIR and stop")
    args = ap.parse_args()
    specs = args.tkir or DEFAULT_ROWS
    if args.dump_ptx:
        return dump_ptx(specs, Path(args.dump_ptx))
    if not args.out:
        ap.error("--out is required")
    if os.environ.get("DISABLE_MMA_V3") != "1" and "triton" in args.rows:
        ap.error("set DISABLE_MMA_V3=1 (Triton then compiles tl.dot to mma.sync)")
    triton_configs = [c for t in (args.triton or DEFAULT_TRITON)
                      for c in (TRITON_CONFIGS if t == "all" else [parse_triton(t)])]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    import tkir
    from tkir.tools.timing import L2_BYTES, MAX_ROTATE_SETS, ROTATE_FACTOR, time_pair_ms
    from tkir.tools.timing import rel_err as _rel_err

    M, N, K = (int(v) for v in args.size.split(","))
    size = dict(M=M, N=N, K=K)
    flops = 2 * M * N * K
    nbytes = 2 * (M * K + K * N + M * N)
    nsets = max(2, min(MAX_ROTATE_SETS, math.ceil(ROTATE_FACTOR * L2_BYTES / nbytes)))
    sets = [(torch.randn(M, K, device="cuda").bfloat16(), torch.randn(K, N, device="cuda").bfloat16(),
             torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)) for _ in range(nsets)]
    ref = (sets[0][0].float() @ sets[0][1].float())
    rows: list[dict] = []
    fns: list = []

    def add(label: str, run_for_set, info: dict) -> None:
        a, b, c = sets[0]
        c.fill_(float("nan"))
        run_for_set(0)()
        torch.cuda.synchronize()
        err = _rel_err(torch, c.float(), ref)
        info = dict(label=label, err=err, ok=err <= 2e-2, **info)
        rows.append(info)
        fns.append(run_for_set)
        print(info, flush=True)

    add("cuBLAS (torch.matmul)", lambda i: (lambda: torch.matmul(sets[i][0], sets[i][1], out=sets[i][2])), {})
    if "tkir" in args.rows:
        for spec in specs:
            row = parse_row(spec)
            label = "tkir " + row["label"]
            try:
                k = compile_row(tkir, row)
            except Exception as e:  # noqa: BLE001 - a configuration that does not compile is a row
                rows.append(dict(label=label, error=f"{type(e).__name__}: {e}"))
                print(rows[-1], flush=True)
                continue
            add(label, lambda i, k=k: (lambda: k(*sets[i])), dict(target=row["target"]))
    if "triton" in args.rows:
        mm, triton = triton_kernel()
        best_ptx = {}
        for bm, bn, bk, st, nw in triton_configs:
            label = f"triton mma.sync {bm}x{bn}x{bk} S{st} W{nw}"
            grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)

            def launch(i, bm=bm, bn=bn, bk=bk, st=st, nw=nw, grid=grid):
                a, b, c = sets[i]
                return lambda: mm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                        c.stride(0), c.stride(1), BM=bm, BN=bn, BK=bk, GROUP_M=8,
                                        num_stages=st, num_warps=nw)
            try:
                compiled = launch(0)()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - e.g. out of shared memory
                rows.append(dict(label=label, error=f"{type(e).__name__}: {str(e)[:200]}"))
                print(rows[-1], flush=True)
                continue
            ptx = getattr(compiled, "asm", {}).get("ptx", "")
            info = dict(mma_sync="mma.sync" in ptx, wgmma="wgmma" in ptx, regs=getattr(compiled, "n_regs", None),
                        spills=getattr(compiled, "n_spills", None), cp_async="cp.async" in ptx,
                        ldmatrix="ldmatrix" in ptx)
            best_ptx[label] = compiled
            add(label, launch, info)
    if args.cutlass_lib:
        import ctypes
        lib = ctypes.CDLL(str(Path(args.cutlass_lib).resolve()))
        names = (args.cutlass_names.split(",") if args.cutlass_names
                 else (Path(args.cutlass_lib).parent / "names.txt").read_text().split())
        for name in names:
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 4

            def launch(i, fn=fn):
                a, b, c = sets[i]
                ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr(), torch.cuda.current_stream().cuda_stream)

                def go():
                    rc = fn(M, N, K, *ptrs)
                    if rc:
                        raise RuntimeError(f"{fn.__name__}: status {rc}")
                return go
            try:
                add(name.replace("cutlass_", "cutlass mma.sync "), launch, dict(cutlass=name))
            except Exception as e:  # noqa: BLE001 - a configuration that cannot run is a row
                rows.append(dict(label=name, error=f"{type(e).__name__}: {str(e)[:200]}"))
                print(rows[-1], flush=True)
    print(f"timing {len(fns)} kernels interleaved, {args.reps} reps, {nsets} input sets", flush=True)
    ms = time_pair_ms(torch, fns, nsets, args.reps, 5)
    for r, t in zip([r for r in rows if "error" not in r], ms, strict=True):
        r["ms"] = t
        r["tflops"] = flops / t / 1e9
    wg = next((r["tflops"] for r in rows if r.get("target") == "sm_90a" and "tflops" in r), None)
    for r in rows:
        if wg and "tflops" in r:
            r["x_wgmma"] = r["tflops"] / wg
    if "triton" in args.rows:
        tri = [r for r in rows if r["label"].startswith("triton") and "tflops" in r and r.get("ok")]
        if tri:
            best = max(tri, key=lambda r: r["tflops"])
            compiled = best_ptx[best["label"]]
            (out / "triton_best.ptx").write_text(compiled.asm["ptx"])
            (out / "triton_best.cubin").write_bytes(compiled.asm["cubin"])
            (out / "triton_best.txt").write_text(best["label"] + "\n")
    (out / "sm80_gemm.json").write_text(json.dumps(dict(size=size, reps=args.reps, rows=rows), indent=1))
    print(f"\n== {M}x{N}x{K} bf16, TFLOP/s (median of {args.reps}, interleaved; x_wgmma: x tkir's wgmma gemm)")
    for r in rows:
        if "error" in r:
            print(f"{r['label']:70s} ERROR {r['error'][:90]}")
            continue
        flags = "" if not r["label"].startswith("triton") else (
            f" regs={r['regs']} spills={r['spills']} mma.sync={r['mma_sync']} wgmma={r['wgmma']}")
        print(f"{r['label']:70s} {r['tflops']:7.1f}  x_wgmma={r.get('x_wgmma', 0):.3f}  err={r['err']:.1e} "
              f"{'ok' if r['ok'] else 'FAIL'}{flags}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
