"""Where compile time goes, and how it grows with program size (docs/experiments.md, "Compile time").

    python3 scripts/compile_time.py                      # the scaling table and gemm's wall time
    python3 scripts/compile_time.py --loops 40,100,400 --matmuls 100,1000 --repeats 5
    python3 scripts/compile_time.py --gemm-only --repeats 9
    python3 scripts/compile_time.py --loops "" --matmuls "" --straight 10000,20000 --repeats 1

Generated program families (`loops_source`, `matmuls_source`, `straight_source`):

* N sequential short loops: each loads a register tile, adds it into an accumulator (4 iterations);
* M `acc += a @ b` statements in one loop: the gemm kernel with its product repeated M times;
* (`--straight`, `--mixed`) N chained statements on one register tile (`straight_source`).

Each program is compiled to PTX in a fresh Python process (`stages`, the child mode of this script)
that times every stage: importing what a compile imports (the pass and rule modules included),
parsing (the LALR tables read back from the cache folder, tkir/lark_tables.py), lowering to tile IR,
each pass of the default pipeline (the verifier after each pass counted with it; no IR snapshot
after each pass, as in `tkc`, in checkouts that have PipelineConfig.keep_snapshots), building the
LLVM IR text, llvmlite's parse, verify and code generation (the IR passes of the NVPTX code
generator and PTX emission, at the level tkir.backend.ptx.codegen_level picks).
`wall --emit ptx` is the whole `tkc compile --emit ptx` command run as a subprocess, Python start-up
included, and `wall --emit tkir` the same command stopping at the tile IR. The disk cache is off
(TKIR_CACHE=0); every cell is the median of `--repeats` runs (fewer for large programs,
`--large-repeats`). Timings on a shared machine are noisy: the load average is printed before and
after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GEMM = ROOT / "examples" / "gemm.tk"


def loops_source(n: int) -> str:
    """A kernel of `n` sequential loops, each adding a loaded register tile into one accumulator."""
    loop = ("    for k in 0 .. 4 {\n"
            "        reg t: rt<f32, BM, BN> = X[block.x, k]\n"
            "        acc += t\n"
            "    }\n")
    return ("kernel seq<BM=64, BN=64>(X: gl<f32>[M, N], Y: gl<f32>[M, N])\n"
            "    grid(cdiv(M, BM))\n"
            "{\n"
            "    reg acc: rt<f32, BM, BN> = 0\n"
            f"{loop * n}"
            "    Y[block.x, 0] = acc\n"
            "}\n")


def matmuls_source(m: int) -> str:
    """gemm.tk's kernel (without @stages) with `acc += a @ b` written `m` times in its loop."""
    return ("kernel mm<BM=128, BN=256, BK=64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N])\n"
            "    grid(cdiv(M, BM), cdiv(N, BN))\n"
            "{\n"
            "    shared a: st<bf16, BM, BK>\n"
            "    shared b: st<bf16, BK, BN>\n"
            "    reg acc: rt<f32, BM, BN> = 0\n"
            "    for k in 0 .. cdiv(K, BK) {\n"
            "        a = A[block.x, k]\n"
            "        b = B[k, block.y]\n"
            + "        acc += a @ b\n" * m +
            "    }\n"
            "    C[block.x, block.y] = bf16(acc)\n"
            "}\n")


STRAIGHT_KINDS = ("v{p} * 1.5 + xf",)
MIXED_KINDS = ("exp(v{p} - row(row_max(v{p})))", "max(v{p}, xf) * 0.5", "where(v{p} > xf, v{p}, xf * 0.25)",
               "v{p} / row(row_sum(v{p}) + 1.0)")


def straight_source(n: int, kinds: tuple[str, ...] = STRAIGHT_KINDS) -> str:
    """A kernel of `n` chained statements `let v{i} = ...` on one loaded register tile, statement i of the
    form kinds[i % len(kinds)] (every one live: each reads the one before). The default: a multiply-add;
    MIXED_KINDS: exponentials of row-max differences, max, where, division by a row sum, in turn."""
    body = "".join(f"    let v{i} = {kinds[i % len(kinds)].format(p=i - 1)}\n" for i in range(1, n))
    return ("kernel k(X: gl<f32>[M, 64], Y: gl<f32>[M, 64]) grid(M / 16) {\n"
            "    reg xf: rt<f32, 16, 64> = X[block.x, 0]\n"
            "    let v0 = xf\n"
            f"{body}"
            f"    Y[block.x, 0] = v{n - 1}\n"
            "}\n")


def front_consts(path: str, auto: list[str]) -> dict[str, object]:
    """The consts the front end is given: none, or for a kernel with `auto` consts (which tkir.compile chooses
    and the front end alone cannot), its companion's DEFAULT_CONSTS (examples/gemm.py: the values gemm.tk's
    header gave before they were auto, the PTX tkir.compile makes)."""
    if not auto:
        return {}
    import runpy

    return dict(runpy.run_path(str(Path(path).with_suffix(".py")))["DEFAULT_CONSTS"])


def stages(path: str) -> dict[str, float]:
    """Seconds per stage for one compile to PTX, in this (fresh) process; the child mode's body."""
    t0 = time.perf_counter()
    import llvmlite.binding as llvm

    from tkir.backend.launch import build_launch, kernel_params
    from tkir.backend.lower_llvm import lower_kernel as to_llvm
    from tkir.backend.ptx import _machine
    from tkir.backend.rules import load_rules
    from tkir.frontend.lower import lower_kernel as to_ir
    from tkir.frontend.parse import parse_source
    from tkir.passes.registry import DEFAULT_PIPELINE, load_registry
    from tkir.passmanager import Options, PassManager, PipelineConfig
    from tkir.source_text import check_nesting, read_source

    registry = load_registry()  # imports every pass module
    load_rules()  # imports every backend rule module
    out = {"import": time.perf_counter() - t0}

    def lap(name: str, start: float) -> float:
        now = time.perf_counter()
        out[name] = out.get(name, 0.0) + now - start
        return now

    t = time.perf_counter()
    text = read_source(path)
    check_nesting(text, path)
    kernel = parse_source(text, path)
    t = lap("parse", t)
    consts = front_consts(path, [c.name for c in kernel.consts if c.value == "auto"])
    t = time.perf_counter()  # the companion's import is not the compiler's time
    module = to_ir(kernel, text, consts)
    t = lap("lower to IR", t)
    options = Options()
    pm = PassManager(registry, list(DEFAULT_PIPELINE))
    try:
        config = PipelineConfig(keep_snapshots=False)  # as tkc runs it
    except TypeError:  # a checkout from before keep_snapshots: it printed the IR after every pass
        config = PipelineConfig()
    pm.run(module, options, config)
    t = lap("passes (all)", t)
    for name, secs in pm.timings:
        out[f"  {name}"] = out.get(f"  {name}", 0.0) + secs
    params = kernel_params(module)
    ir, smem = to_llvm(module, params, options.target)
    build_launch(module, options.target, dynamic_smem=smem, params=params)  # as tkir.backend.lower does
    t = lap("LLVM IR build", t)
    mod = llvm.parse_assembly(ir)
    t = lap("llvm parse", t)
    mod.verify()
    t = lap("llvm verify", t)
    level = _codegen_level(ir)
    machine = _machine(options.target, level) if level != 3 else _machine(options.target)
    t = lap("llvm init", t)
    machine.emit_assembly(mod)
    lap("llvm codegen+PTX", t)
    out["total in-process"] = time.perf_counter() - t0
    out["llvm IR bytes"] = float(len(ir))
    out["llvm IR lines"] = float(ir.count("\n"))
    out["codegen level"] = float(level)
    return out


def _codegen_level(ir: str) -> int:
    """The level tkir.backend.ptx picks; 3 in checkouts from before it chose one (to measure those too)."""
    try:
        from tkir.backend.ptx import codegen_level
    except ImportError:
        return 3
    return codegen_level(ir)


def _run_child(path: str) -> dict[str, float]:
    res = subprocess.run([sys.executable, __file__, "--child", path], capture_output=True, text=True,
                         env=dict(os.environ, TKIR_CACHE="0"), check=True)
    return json.loads(res.stdout)


def wall(path: str, repeats: int, emit: str = "ptx") -> list[float]:
    """Wall seconds of `tkc compile PATH --emit EMIT` (a fresh interpreter each run, cache off)."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "tkir.cli", "compile", path, "--emit", emit, "-o",
                            str(Path(tmp) / "out")], check=True, env=dict(os.environ, TKIR_CACHE="0"))
            times.append(time.perf_counter() - t)
    return times


def startup(repeats: int) -> float:
    """Median wall seconds of `python3 -c pass`: the interpreter's own start-up on this machine."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(path: str, repeats: int) -> dict[str, float]:
    """The median of `repeats` runs of every stage (`stages`) and of both wall times."""
    runs = [_run_child(path) for _ in range(repeats)]
    col = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    col["wall --emit ptx"] = statistics.median(wall(path, repeats))
    col["wall --emit tkir"] = statistics.median(wall(path, repeats, "tkir"))
    col["runs"] = repeats
    return col


def _table(columns: dict[str, dict[str, float]]) -> str:
    rows = list(next(iter(columns.values())))
    width = max(len(r) for r in rows) + 2
    lines = [" " * width + "".join(f"{c:>12}" for c in columns)]
    for r in rows:
        if r == "llvm IR bytes":
            cells = "".join(f"{v[r] / 1e6:>10.2f}MB" for v in columns.values())
        elif r in ("runs", "llvm IR lines", "codegen level"):
            cells = "".join(f"{int(v[r]):>12d}" for v in columns.values())
        else:
            cells = "".join(f"{v[r]:>12.3f}" for v in columns.values())
        lines.append(f"{r:<{width}}{cells}")
    return "\n".join(lines)


def _int_list(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--loops", default="40,100,400", help="sizes of the sequential-loops family")
    ap.add_argument("--matmuls", default="10,100", help="sizes of the `acc += a @ b` family")
    ap.add_argument("--straight", default="", help="sizes of the straight-line family (`straight_source`), "
                                                   "e.g. 10000,20000")
    ap.add_argument("--mixed", default="", help="sizes of the straight-line family of MIXED_KINDS statements")
    ap.add_argument("--repeats", type=int, default=5, help="runs per measurement (the median is shown)")
    ap.add_argument("--large-repeats", type=int, default=3,
                    help="runs per measurement for programs of more than 20 KB of source")
    ap.add_argument("--gemm-only", action="store_true", help="only gemm.tk's wall time")
    ap.add_argument("--child", metavar="FILE", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(stages(args.child)))
        return 0
    print(f"# load {os.getloadavg()}, {os.cpu_count()} CPUs, python {sys.version.split()[0]}, "
          f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}; "
          f"python3 -c pass: {startup(args.repeats):.3f} s")
    g = wall(str(GEMM), args.repeats)
    print(f"gemm.tk wall (tkc compile --emit ptx, cache off): median {statistics.median(g):.3f} s, "
          f"min {min(g):.3f} s over {len(g)} runs")
    if args.gemm_only:
        return 0
    columns: dict[str, dict[str, float]] = {"gemm.tk": measure(str(GEMM), args.repeats)}
    with tempfile.TemporaryDirectory() as tmp:
        programs = [(f"loops{n}", loops_source(n)) for n in _int_list(args.loops)]
        programs += [(f"mm{m}", matmuls_source(m)) for m in _int_list(args.matmuls)]
        programs += [(f"line{n}", straight_source(n)) for n in _int_list(args.straight)]
        programs += [(f"mixed{n}", straight_source(n, MIXED_KINDS)) for n in _int_list(args.mixed)]
        for label, src in programs:
            path = Path(tmp) / f"{label}.tk"
            path.write_text(src, encoding="utf-8")
            columns[label] = measure(str(path), args.repeats if len(src) <= 20000 else args.large_repeats)
            print(f"# {label}: {columns[label]['wall --emit ptx']:.2f} s wall", file=sys.stderr, flush=True)
    print(_table(columns))
    loops = [f"loops{n}" for n in _int_list(args.loops)]
    if len(loops) > 1:
        lo, hi = columns[loops[0]], columns[loops[-1]]
        print(f"# {loops[-1]} / {loops[0]}: --emit ptx {hi['wall --emit ptx'] / lo['wall --emit ptx']:.1f}x, "
              f"--emit tkir {hi['wall --emit tkir'] / lo['wall --emit tkir']:.1f}x")
    print(f"# load after {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
