"""`tkc`: the command line.

    tkc compile FILE [-D NAME=VALUE ...] [--emit tkir|llvm|ptx|cubin|sass|launch|c] [-o OUT] [pass flags]
    tkc opt FILE.tkir [--passes=a,b] [-o OUT]        IR text in, IR text out (how passes are tested)
    tkc run FILE --interpret [--size NAME=VALUE ...] [--check]
    tkc report FILE [--json] [--swizzle=none] [--measure [--size NAME=VALUE ...]]

    tkc passes [--load-pass=FILE.py]                 the passes, their parameters, the default pipeline
    tkc passes --kernel FILE                         the pipeline FILE's kernel runs (its @passes edits applied)
    tkc cache info | clear                           the disk cache of compiled kernels

Pass flags: --print-after-all, --print-after=NAME[,NAME], --stop-after=NAME,
--passes='a,b{key=value key2=value},c', --time-passes, --load-pass=FILE.py, --swizzle=none, --no-tma,
--target=sm_90a|sm_80. (--group-m G and --pass-option KEY=VALUE were removed in tkir 0.2: they exit
with status 2 and an error that spells the --passes that does the same.)
Every user error prints `file:line:col: error: ...` and exits with status 1, without a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from tkir.diagnostics import CompileError, TkirError, TkirWarning
from tkir.target import TARGETS

EMIT_KINDS = ("tkir", "llvm", "ptx", "cubin", "sass", "launch", "c")
# packages only some commands need -> what for (a missing one is a one-line error, not a traceback)
OPTIONAL_PACKAGES = {"torch": "tkc bench and tkc run on the GPU compare with torch",
                     "matplotlib": "tkc bench --plot draws with matplotlib"}
# One-shot commands that start lean when tkc is the program (`tkc`, `python -m tkir.cli`; not
# tkir.cli.main(argv) called from Python), for a short compile's sake (docs/experiments.md, "Compile
# time"; `tkc compile examples/gemm.tk --emit ptx` takes about 0.4 s):
# - numpy's OpenBLAS loads with one thread (OPENBLAS_NUM_THREADS=1, unless the environment sets it).
#   Their numpy work is small arrays (layouts, bank conflicts, fragments), never linear algebra, and
#   by default OpenBLAS starts a thread per core when numpy is imported, which spin waiting for work:
#   about 0.07 s of CPU, and on a busy 2-core machine about 0.06 s of wall time. This needs `import
#   tkir.cli` not to import numpy (it does not). `run --interpret`, bench and tune keep the default:
#   the interpreter multiplies matrices.
# - Python's cyclic garbage collector is off: it ran about 80 times during a gemm compile (13-16 ms)
#   and found nothing to free that matters in a process that exits right after (the peak memory of a
#   400-loop compile was the same with it off).
ONE_SHOT_COMMANDS = ("compile", "opt", "report", "passes", "cache")
MAX_SIZE = 2**31 - 1  # a size is an i32 kernel argument (tkir/scalar.py I32_MAX; the runtime checks the same)


class UsageError(TkirError):
    pass


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (`tkc compile: error: ...`), like every other tkc error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _kv(items: list[str], flag: str) -> dict[str, int | float | str]:
    out: dict[str, int | float | str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"{flag} expects NAME=VALUE, got '{item}'")
        if name in out:  # the second would silently win
            raise UsageError(f"{flag} {name} is given twice ({name}={out[name]} and {item}): give it once")
        if flag == "-D" and value == "auto":  # the compiler chooses it (tkir/tools/auto_consts.py)
            out[name] = value
            continue
        try:
            out[name] = int(value, 0)
        except ValueError:
            try:
                out[name] = float(value)
            except ValueError:
                raise UsageError(f"{flag} {name}: '{value}' is not a number") from None
    return out


def _names(s: str | None) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()] if s else []


def _add_pass_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pass pipeline")
    g.add_argument("--passes", metavar="PIPELINE",
                   help="the pass pipeline, replacing the default one: comma-separated pass names, each "
                        "with optional parameters in braces, e.g. 'canonicalize,persistent{group_m=16}' "
                        "(tkc passes lists them)")
    g.add_argument("--pass-edits", metavar="EDITS",
                   help="edit the pipeline as @passes(...) does, after the kernel's own edits: '-coarsen-rows' "
                        "removes a pass, '+stream-k' switches one on, 'plan-occupancy{spill_retry=false}' sets "
                        "parameters (an ablation without spelling the whole pipeline)")
    g.add_argument("--print-after-all", action="store_true", help="print the IR after every pass")
    g.add_argument("--print-after", metavar="NAME[,NAME]", help="print the IR after these passes")
    g.add_argument("--stop-after", metavar="NAME", help="stop the pipeline after this pass")
    g.add_argument("--time-passes", action="store_true", help="print each pass's wall time (stderr)")
    g.add_argument("--load-pass", action="append", default=[], metavar="FILE.py",
                   help="register the Pass subclasses defined in FILE.py")
    g.add_argument("--swizzle", choices=("none",), help="force unswizzled shared layouts (research switch)")
    g.add_argument("--no-tma", action="store_true", help="no TMA copies anywhere in the kernel")
    # removed in tkir 0.2 (_removed_flags): still parsed, so that using one says what to write instead
    g.add_argument("--group-m", dest="removed_group_m", metavar="G", help=argparse.SUPPRESS)
    g.add_argument("--pass-option", dest="removed_pass_option", action="append", default=[], metavar="KEY=VALUE",
                   help=argparse.SUPPRESS)
    g.add_argument("--target", choices=TARGETS, default="sm_90a", help="GPU target (default sm_90a)")


def _version() -> str:
    from tkir.version import __version__

    return __version__


def _sizes(items: list[str]) -> dict[str, int | float]:
    """--size NAME=VALUE: problem sizes are positive integers."""
    sizes = _kv(items, "--size")
    for name, v in sizes.items():
        if not isinstance(v, int) or v < 1:
            raise UsageError(f"--size {name}={v}: a size is a positive integer")
        if v > MAX_SIZE:
            raise UsageError(f"--size {name}={v}: a size is at most {MAX_SIZE} (the kernel reads it as an i32)")
    return sizes


def _check_run_flags(args: argparse.Namespace) -> None:
    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed {args.seed}: a seed is 0 or more")
    if getattr(args, "num_sms", None) is not None and args.num_sms < 1:
        raise UsageError(f"--num-sms {args.num_sms}: at least one multiprocessor")


def _parser() -> argparse.ArgumentParser:
    ap = _ArgumentParser(prog="tkc", description="tkir: a tile-kernel compiler for NVIDIA Hopper")
    ap.add_argument("--version", action="version", version=f"tkc (tkir) {_version()}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    c = sub.add_parser("compile", help="compile a .tk kernel", description="Compile a .tk kernel.")
    c.add_argument("file")
    c.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="override a compile-time parameter")
    c.add_argument("--emit", choices=EMIT_KINDS, default="tkir",
                   help="what to write (default tkir); c: a C source and header that launch the kernel "
                        "(-o NAME.c also writes NAME.h)")
    c.add_argument("-o", dest="output", help="output file (default stdout; --emit c needs -o NAME.c)")
    c.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                   help="a problem size: `auto` consts are chosen for these sizes' bucket by the cost model "
                        "(without: the size-free choice; a launch chooses per call)")
    _add_pass_flags(c)

    o = sub.add_parser("opt", help="run passes on IR text", description="Run passes on tile IR text.")
    o.add_argument("file", help="a .tkir file ('-' for stdin)")
    o.add_argument("-o", dest="output", help="output file (default stdout)")
    _add_pass_flags(o)

    r = sub.add_parser("run", help="run a kernel", description="Run a kernel on fresh random inputs.")
    r.add_argument("file")
    r.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE")
    r.add_argument("--interpret", action="store_true", help="run in the numpy interpreter")
    r.add_argument("--size", action="append", default=[], metavar="NAME=VALUE", help="a problem size")
    r.add_argument("--check", action="store_true",
                   help="compare with the example's reference; exit 1 past the dtype's bound")
    r.add_argument("--seed", type=int, default=None, help="random seed (default: fresh)")
    r.add_argument("--num-sms", type=int, default=None, metavar="N",
                   help="--interpret: the NUM_SMS persistent grids see (default 132; small values exercise "
                        "multi-round and stream-K schedules on small sizes)")
    _add_pass_flags(r)

    b = sub.add_parser("bench", help="time a kernel against its peer on the GPU",
                       description="Check, then time the kernel and its peer (torch) with CUDA events.")
    b.add_argument("file")
    b.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE")
    b.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                   help="one problem size (default: the example's BENCH_SIZES)")
    b.add_argument("--reps", type=int, default=30, help="timed runs per size (median; default 30)")
    b.add_argument("--json", metavar="OUT", help="write the rows as JSON")
    b.add_argument("--plot", metavar="OUT.png", help="plot tkir vs peer (matplotlib)")
    b.add_argument("--variant", default="tkir", help="a label for the rows (ablations)")
    b.add_argument("--tune", metavar="NAME[,NAME]",
                   help="consts of the kernel's @tune space chosen per row by tkc tune's search (the cached "
                        "result, or a tuning run first) with the row's other consts pinned, e.g. --tune PERSIST")
    _add_pass_flags(b)

    t = sub.add_parser("tune", help="search a kernel's @tune space and cache the best point",
                       description="Drop the points of the kernel's @tune(...) space that its where= "
                                   "conditions, the compiler (shared memory, registers, tile divisibility, "
                                   "spills) or the cost model rule out, saying why; check the rest against the "
                                   "reference and time them on the GPU, interleaved; keep the best in the disk "
                                   "cache for this size bucket and GPU (a second call times nothing).")
    t.add_argument("file")
    t.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="pin a const (its @tune list collapses to this value)")
    t.add_argument("--size", action="append", default=[], metavar="NAME=VALUE", help="a problem size (all needed)")
    t.add_argument("--reps", type=int, default=20, help="timed runs per point (median; default 20)")
    t.add_argument("--jobs", type=int, default=None, metavar="N", help="compile processes (default: CPU count)")
    t.add_argument("--force", action="store_true", help="time again even if the cache has this bucket")
    t.add_argument("--dry-run", action="store_true", help="drop and predict only: no GPU, nothing timed")
    t.add_argument("--json", metavar="OUT", help="write every point, its reason or its times, as JSON")
    t.add_argument("--target", choices=TARGETS, default="sm_90a")
    t.add_argument("--passes", default=None, metavar="PIPELINE", help="the pass pipeline (default: the default one)")

    ps = sub.add_parser("passes", help="list the passes, their parameters and the default pipeline",
                        description="List every registered pass with its typed parameters, and the default "
                                    "pipeline as --passes spells it.")
    ps.add_argument("--load-pass", action="append", default=[], metavar="FILE.py",
                    help="register the Pass subclasses defined in FILE.py first")
    ps.add_argument("--kernel", metavar="FILE", default=None,
                    help="print the pipeline this kernel (.tk or .tkir) is compiled with: the default one with "
                         "its @passes(...) edits applied")

    ca = sub.add_parser("cache", help="show or clear the disk cache of compiled kernels",
                        description="The disk cache of the backend's output ($TKIR_CACHE_DIR, default "
                                    "~/.cache/tkir; TKIR_CACHE=0 turns it off).")
    ca_sub = ca.add_subparsers(dest="cache_cmd", required=True, metavar="ACTION")
    ca_sub.add_parser("info", help="directory, on or off, entry format, number of entries, total size",
                      description="Print the cache directory, whether the cache is on, the entry format "
                                  "version, the number of entries and their total size.")
    ca_sub.add_parser("clear", help="remove every entry",
                      description="Remove every cache entry (whether or not the cache is on) and print "
                                  "how many; other files in the directory are left alone.")

    rep = sub.add_parser("report", help="print the compiler's decisions",
                         description="Shared tiles, swizzles, bank conflicts, registers, TMA, occupancy.")
    rep.add_argument("file")
    rep.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE")
    rep.add_argument("--json", action="store_true", help="one JSON object")
    rep.add_argument("--measure", action="store_true",
                     help="run the kernel once under Nsight Compute (ncu on PATH, or named by TKIR_NCU) and put "
                          "the hardware's counts beside each prediction (a 'measured' section)")
    rep.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                     help="a problem size: `auto` consts are chosen for it; --measure runs at it (default: the "
                          "companion's first CHECK_SIZES)")
    rep.add_argument("--seed", type=int, default=None, help="--measure: random seed of the inputs (default: fresh)")
    _add_pass_flags(rep)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    removed = _removed_flags(args)
    if removed:  # a usage error, as argparse's: status 2
        print(f"tkc {args.cmd}: error: {removed}", file=sys.stderr)
        return 2
    if argv is None and args.cmd in ONE_SHOT_COMMANDS:
        gc.disable()
        if "numpy" not in sys.modules:
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # read once, when numpy loads OpenBLAS
    if sys.stdout is None:  # the shell closed it (`tkc passes >&-`): writing to it is an error, not nothing
        sys.stdout = _ClosedStdout()
    try:
        with _one_line_warnings():
            rc = _dispatch(args)
        sys.stdout.flush()  # here, where a failure is this command's error, not at the interpreter's exit
        return rc
    except CompileError as e:
        print(e.format(), file=sys.stderr)
        return 1
    except UsageError as e:
        print(f"tkc {args.cmd}: error: {e}", file=sys.stderr)
        return 1
    except FileNotFoundError as e:
        print(f"tkc {args.cmd}: error: {e.filename}: no such file", file=sys.stderr)
        return 1
    except NotImplementedError as e:  # a backend rule that does not exist yet (e.g. sm_80 fragments)
        print(f"tkc {args.cmd}: error: {e}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as e:  # the GPU commands' optional packages
        if e.name not in OPTIONAL_PACKAGES:
            raise
        print(f"tkc {args.cmd}: error: needs the '{e.name}' package ({OPTIONAL_PACKAGES[e.name]})", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `tkc passes | head -3`: the reader left; stop quietly, as cat does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's exit-time flush of stdout must not raise again
        return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by a closed pipe
    except TkirError as e:  # the interpreter, the launch, ptxas/nvdisasm, the driver: their own message
        print(f"tkc {args.cmd}: error: {e}", file=sys.stderr)
        if "no meaning for op 'pipe." in str(e) or "no meaning for op 'tk.role" in str(e):
            print("note: the interpreter runs the IR up to plan-occupancy: add --stop-after=plan-occupancy",
                  file=sys.stderr)
        return 1
    except OSError as e:  # a file the command reads (no permission), or stdout (`> /dev/full`)
        what = f"{e.filename}: " if e.filename else "standard output: cannot write: "
        print(f"tkc {args.cmd}: error: {what}{e.strerror or e}", file=sys.stderr)
        if not e.filename:
            _drop_stdout()
        return 1
    except MemoryError:  # `tkc run --interpret --size N=2**30`: inputs larger than this machine's memory
        print(f"tkc {args.cmd}: error: out of memory (smaller --size values?)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: stop quietly, with the shell's status for SIGINT
        print(f"tkc {args.cmd}: interrupted", file=sys.stderr)
        return 130


class _ClosedStdout:
    """sys.stdout when the shell closed it: a write is a one-line error (`tkc compile x.tk >&-`)."""

    def write(self, text: str | bytes) -> int:
        raise UsageError("standard output is closed: name a file with -o, or leave stdout open")

    def flush(self) -> None:
        pass

    @property
    def buffer(self) -> _ClosedStdout:
        return self


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that Python's exit-time flush of what could not be written does not
    fail a second time (with a traceback and status 120)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[None]:
    """tkir's own warnings (TkirWarning) print as `tkc: warning: ...`; others as Python prints them."""
    show = warnings.showwarning

    def one_line(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 (warnings' signature)
        if issubclass(category, TkirWarning):
            print(f"tkc: warning: {message}", file=file or sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = one_line
    try:
        yield
    finally:
        warnings.showwarning = show


def _dispatch(args: argparse.Namespace) -> int:
    return {"compile": cmd_compile, "opt": cmd_opt, "run": cmd_run, "report": cmd_report,
            "bench": cmd_bench, "passes": cmd_passes, "cache": cmd_cache, "tune": cmd_tune}[args.cmd](args)


def _config(args: argparse.Namespace):
    from tkir.passmanager import PipelineConfig

    return PipelineConfig(
        print_after_all=args.print_after_all,
        print_after=tuple(_names(args.print_after)),
        stop_after=args.stop_after,
        time_passes=args.time_passes,
        keep_snapshots=False,  # no command reads CompiledKernel.ir_after; the dumps above print as they go
    )


def _removed_flags(args: argparse.Namespace) -> str | None:
    """The error for --group-m / --pass-option (removed in tkir 0.2), spelling the --passes that does
    what they did; None when neither is given."""
    group_m, options = getattr(args, "removed_group_m", None), getattr(args, "removed_pass_option", [])
    flags = [f for f, on in (("--group-m", group_m is not None), ("--pass-option", bool(options))) if on]
    if not flags:
        return None
    from tkir.api import REMOVED_IN, pass_option_pipeline, pass_option_problem

    said = f"{' and '.join(flags)} {'were' if len(flags) > 1 else 'was'} removed in tkir {REMOVED_IN}"
    legacy: dict[str, object] = {}
    problem = None
    try:
        legacy.update(_kv(options, "--pass-option"))
        if group_m is not None:
            legacy.update(_kv([f"group_m={group_m}"], "--group-m"))
        text = pass_option_pipeline(legacy, args.passes or None)
        problem = pass_option_problem(legacy, args.passes or None) if text is None else None
    except (UsageError, TkirError) as e:
        text, problem = None, str(e)
    if text is None:
        refused = f"; and the value given is refused: {problem}" if problem else ""
        return (f"{said}: write the pass's parameter in --passes, e.g. --passes='...,persistent{{group_m=4}},...' "
                f"(tkc passes lists every pass and its parameters){refused}")
    return f"{said}: write --passes='{text}' (the same pipeline)"


def _pipeline(args: argparse.Namespace):
    """The pipeline the flags ask for (a list of PassSpec), or None for the default one."""
    from tkir.pass_pipeline import as_specs

    if getattr(args, "stop_after", None) == "":
        raise UsageError("--stop-after is empty: name the pass to stop after (tkc passes lists them)")
    if args.passes is not None and not args.passes.strip() and args.cmd != "opt":
        raise UsageError("--passes is empty: name the passes to run (tkc passes prints the default pipeline), "
                         "or leave --passes out for the default one")
    return as_specs(args.passes) if args.passes else None


def _compile(args: argparse.Namespace, passes: list[str] | None = None):
    from tkir import api

    if not Path(args.file).is_file():
        raise UsageError(f"{args.file}: no such file")
    consts = _kv(getattr(args, "defines", []), "-D")
    sizes = _sizes(args.size) if args.cmd in ("compile", "report") and args.size else None
    k = api.compile(
        args.file,
        target=args.target,
        passes=passes if passes is not None else _pipeline(args),
        pass_edits=getattr(args, "pass_edits", None),
        swizzle=args.swizzle,
        no_tma=args.no_tma,
        load_passes=args.load_pass,
        config=_config(args),
        out=sys.stdout,
        sizes=sizes,
        **consts,
    )
    return k


def _timing(args: argparse.Namespace, k) -> None:
    if args.time_passes:
        from tkir.passmanager import PassManager

        pm = PassManager({}, [])
        pm.timings = k.timings
        print(pm.timing_report(), file=sys.stderr)


def _write(output: str | None, data: str | bytes, flag: str = "-o") -> None:
    """The command's output: to stdout, or whole into the file `output` (tkir/output_file.py)."""
    if output is not None:
        from tkir.output_file import write_outputs

        write_outputs([(output, data)], flag)
        return
    if sys.stdout is None:  # the shell closed it (`tkc compile x.tk >&-`)
        raise UsageError("standard output is closed: name a file with -o")
    try:
        if isinstance(data, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:  # `> /dev/full`
        _drop_stdout()
        raise UsageError(f"standard output: cannot write: {e.strerror or e}") from None


def cmd_compile(args: argparse.Namespace) -> int:
    import time

    t0 = time.perf_counter()
    if args.emit == "c":
        _c_output_paths(args.output)  # a bad -o is an error before any work
    elif args.output is not None:
        _check_output(args.output, "-o")
    k = _compile(args)
    if args.emit != "tkir":
        k.lower()  # adds its timing row: "backend (llvm, ptx)", or "backend (cached)" from the disk cache
    _timing(args, k)
    if args.time_passes:
        print(f"tkc compile: total {time.perf_counter() - t0:.3f} s", file=sys.stderr)
    if (args.print_after_all or args.print_after) and args.output is None and args.emit == "tkir":
        return 0  # the dumps already showed the IR; --stop-after alone prints the IR it stopped at
    if args.emit == "c":
        from tkir.output_file import write_outputs

        c_path, h_path = _c_output_paths(args.output)
        src = k.emit_c(name=c_path.stem, header=h_path.name)
        write_outputs([(str(h_path), src.h), (str(c_path), src.c)], "-o")  # both or neither
        return 0
    data = k.asm[args.emit] if args.emit != "launch" else k.launch.to_text()
    _write(args.output, data)  # type: ignore[arg-type]
    return 0


def _check_output(path: str, flag: str) -> None:
    """An output path that cannot be written is an error before any work (tkir/output_file.py)."""
    from tkir.output_file import check_output_path

    check_output_path(path, flag)


def _c_output_paths(output: str | None) -> tuple[Path, Path]:
    """`-o NAME.c` for --emit c: the .c file and its header NAME.h beside it."""
    if output is None or not output.endswith(".c") or Path(output).is_dir() or Path(output).stem in ("", "."):
        got = f"-o {output}" if output else "no -o"
        raise UsageError(f"--emit c writes a C source and its header: name the source with -o NAME.c "
                         f"(NAME.h is written beside it), got {got}")
    c_path = Path(output)
    _check_output(output, "-o")
    return c_path, c_path.with_suffix(".h")


def cmd_cache(args: argparse.Namespace) -> int:
    """`tkc cache info` and `tkc cache clear`."""
    from tkir.backend import cache

    if args.cache_cmd == "clear":
        removed = cache.clear()
        print(f"removed {removed} {'entry' if removed == 1 else 'entries'} from {cache.cache_dir()}")
        return 0
    info = cache.info()
    state = "yes" if info.enabled else "no (TKIR_CACHE=" + os.environ.get("TKIR_CACHE", "") + ")"
    print(f"directory: {info.directory}{'' if info.directory.is_dir() else ' (not created yet)'}")
    print(f"enabled:   {state}")
    print(f"format:    {info.format}")
    print(f"entries:   {info.entries}")
    print(f"size:      {info.bytes} bytes{_human_bytes(info.bytes)}")
    return 0


def _human_bytes(n: int) -> str:
    """' (45.6 KiB)' for sizes of a KiB or more, else ''."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f" ({n / scale:.1f} {unit})"
    return ""


def cmd_opt(args: argparse.Namespace) -> int:
    from tkir.parser import parse_module
    from tkir.passes.registry import load_registry
    from tkir.passmanager import Options, PassManager, load_pass_file
    from tkir.printer import print_module
    from tkir.source_text import read_source
    from tkir.verifier import verify

    if args.output is not None:
        _check_output(args.output, "-o")
    if args.file == "-":
        text, name = sys.stdin.read(), "<stdin>"
    else:
        if not Path(args.file).is_file():
            raise UsageError(f"{args.file}: no such file")
        text, name = read_source(args.file), args.file
    if args.pass_edits:
        raise UsageError("--pass-edits edits the default pipeline, which tkc opt does not run: name the passes "
                         "with --passes")
    module = parse_module(text, name)
    verify(module)
    registry = load_registry()
    for f in args.load_pass:
        load_pass_file(f, registry)
    pm = PassManager(registry, _pipeline(args) or [])
    pm.run(module, Options(target=args.target, swizzle=args.swizzle, no_tma=args.no_tma), _config(args))
    if args.time_passes:
        print(pm.timing_report(), file=sys.stderr)
    _write(args.output, print_module(module))
    return 0


def _check_sizes(module, sizes: dict) -> None:
    """Every symbolic dim of the kernel's tensors needs a --size; unknown names are errors too."""
    from tkir.types import GlobalType

    needed: list[str] = []
    for a in module.kernel.body.args:
        if isinstance(a.type, GlobalType):
            needed += [d for d in a.type.size_names if d not in needed]
    missing = [n for n in needed if n not in sizes]
    if missing:
        raise UsageError(f"missing --size for {', '.join(missing)} (the kernel's sizes: {', '.join(needed)})")
    unknown = [n for n in sizes if n not in needed]
    if unknown:
        raise UsageError(f"--size {unknown[0]}: not a size of this kernel (its sizes: {', '.join(needed)})")


def cmd_run(args: argparse.Namespace) -> int:
    from tkir.tools.examples import check_interpreted, load_companion

    _check_run_flags(args)
    if not args.interpret:
        return _run_gpu(args)
    given = _sizes(args.size)  # a bad --size is reported before the compile and the companion
    k = _compile(args)
    companion = load_companion(args.file)
    sizes = given or dict(companion.CHECK_SIZES[0])
    consts = _kv(args.defines, "-D")
    _check_sizes(k.module, sizes)
    kw = {"num_sms": args.num_sms} if args.num_sms else {}
    results = check_interpreted(k, companion, sizes, consts, seed=args.seed, **kw)  # unaligned rows: the variant
    size_txt = " ".join(f"{n}={v}" for n, v in sizes.items())
    ok = True
    for r in results:
        if args.check:
            verdict = "ok" if r.ok else "FAIL"
            print(f"{Path(args.file).name} [{size_txt}] {r.output}: rel_err {r.rel_err:.3e} "
                  f"(bound {r.bound:.0e}) {verdict}")
            ok &= r.ok
        else:
            print(f"{Path(args.file).name} [{size_txt}] {r.output}: ran (use --check to compare)")
    return 0 if ok else 1


def _run_gpu(args: argparse.Namespace) -> int:
    from tkir.tools.bench import run_check

    sizes, consts = _sizes(args.size), _kv(args.defines, "-D")
    kw = dict(target=args.target, swizzle=args.swizzle, no_tma=args.no_tma, load_passes=args.load_pass,
              passes=_pipeline(args), pass_edits=args.pass_edits)
    row = run_check(args.file, sizes, consts, compile_kw=kw)
    return 0 if (row.ok or not args.check) else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from tkir.tools.bench import run_bench
    from tkir.tools.examples import load_companion

    if not Path(args.file).is_file():
        raise UsageError(f"{args.file}: no such file")
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        if path:
            _check_output(path, flag)
    companion = load_companion(args.file)
    extra = _kv(args.defines, "-D")
    if args.size:
        sizes_list, consts_list = [_sizes(args.size)], [dict(companion.BENCH_CONSTS[0], **extra)]
    else:
        sizes_list = list(companion.BENCH_SIZES)
        consts_list = [dict(c, **extra) for c in companion.BENCH_CONSTS]
    kw = dict(target=args.target, swizzle=args.swizzle, no_tma=args.no_tma, load_passes=args.load_pass,
              passes=_pipeline(args), pass_edits=args.pass_edits)
    tuned = _names(args.tune)
    if args.tune is not None:
        if args.pass_edits:
            raise UsageError("--tune with --pass-edits: the tuner compiles with --passes only; spell the "
                             "pipeline with --passes")
        _check_bench_tune(args, tuned)
    rows = run_bench(args.file, sizes_list, consts_list, reps=args.reps, json_out=args.json, plot=args.plot,
                     compile_kw=kw, variant=args.variant, tuned=tuned,
                     tune_kw=dict(target=args.target, passes=args.passes))
    return 0 if all(r.ok for r in rows) else 1


def _check_bench_tune(args: argparse.Namespace, names: list[str]) -> None:
    """`tkc bench --tune NAMES`: every name is a const that the kernel's @tune space lists, not pinned by
    -D, and the options are ones the tuner's compiles can reproduce (a pass pipeline, a target)."""
    from tkir.tools import tune

    if not names:
        raise UsageError("--tune is empty: name the consts to choose per row, e.g. --tune PERSIST")
    if args.swizzle or args.no_tma or args.load_pass:
        raise UsageError("--tune with --swizzle, --no-tma or --load-pass: the tuner compiles with --passes "
                         "and --target only")
    space = tune.read_space(args.file)
    for n in names:
        if n not in space.values:
            raise UsageError(f"--tune {n}: not in the @tune space of kernel '{space.kernel}' "
                             f"(it lists: {', '.join(space.values) or 'nothing'})")
        if any(d.split("=", 1)[0].strip() == n for d in args.defines):
            raise UsageError(f"--tune {n} and -D {n}: a const is either pinned or tuned")


def cmd_tune(args: argparse.Namespace) -> int:
    from tkir.tools import tune

    if not Path(args.file).is_file():
        raise UsageError(f"{args.file}: no such file")
    if args.reps < 1:
        raise UsageError(f"--reps {args.reps}: at least one timed run")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: at least one process")
    if args.json:
        _check_output(args.json, "--json")
    if args.passes is not None:
        from tkir.passes.registry import load_registry
        from tkir.passmanager import PassManager

        if not args.passes.strip():
            raise UsageError("--passes is empty: name the passes to run, or leave --passes out")
        PassManager(load_registry(), args.passes)  # names and parameter values: a located error before any work
    fixed = _kv(args.defines, "-D")
    space = tune.read_space(args.file)
    unknown = [n for n in fixed if n not in space.defaults]
    if unknown:
        raise UsageError(f"-D {unknown[0]}: not a const of kernel '{space.kernel}' "
                         f"(consts: {', '.join(space.defaults)})")
    sizes = _sizes(args.size)
    from tkir.api import build_module
    from tkir.diagnostics import CompileError

    for point in space.points(fixed):  # the size names, from the first point the front end accepts
        try:                          # (the header's own consts may not fit, e.g. 16 rows of D = 16384)
            module = build_module(args.file, point.consts)
        except CompileError:
            continue
        _check_sizes(module, sizes)
        break
    kw = dict(fixed=fixed, target=args.target, passes=args.passes, jobs=args.jobs, progress=_progress("compile"))
    if args.dry_run:
        result = tune.dry_run(args.file, sizes, **kw)
    else:
        result = tune.tune(args.file, sizes, reps=args.reps, force=args.force, **kw)
    print(tune.format_result(result, dry_run=args.dry_run), flush=True)  # before --json: a bad path loses no timing
    if args.json:
        _write(args.json, json.dumps(result.as_dict(), indent=1, default=str) + "\n", "--json")
    if args.dry_run and not any(c.status == "kept" for c in result.candidates):  # nothing to time: an error
        print("tkc tune: error: every point of the space is dropped (the reasons above)", file=sys.stderr)
        return 1
    return 0 if (args.dry_run or result.best is not None) else 1


def _progress(what: str):
    """A progress bar (rich, when installed) or one stderr line per step."""
    def show(items, total: int):
        try:
            from rich.progress import track

            yield from track(items, description=what, total=total, transient=True)
        except ImportError:
            for i, x in enumerate(items, 1):
                print(f"tkc tune: {what} {i}/{total}", file=sys.stderr, flush=True)
                yield x
    return show


def cmd_passes(args: argparse.Namespace) -> int:
    from tkir.passes.registry import DEFAULT_PIPELINE, load_registry
    from tkir.passmanager import load_pass_file

    if args.kernel is not None:  # the kernel's own pipeline: its @passes edits applied to the default one
        from tkir.api import kernel_pipeline

        edits, spec = kernel_pipeline(args.kernel, load_passes=args.load_pass)
        print(f"kernel {args.kernel}:")
        print(f"  @passes({edits})" if edits else "  no @passes: the default pipeline")
        print("  --passes=" + spec)
        return 0
    registry = load_registry()
    for f in args.load_pass:
        load_pass_file(f, registry)
    print("default pipeline:")
    print("  --passes=" + ",".join(DEFAULT_PIPELINE))
    print("passes:")
    for name in sorted(registry):
        cls = registry[name]
        doc = (cls.__module__ and sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        summary = doc[0].split(":", 1)[-1].strip() if doc else ""
        print(f"  {name}" + (f"  -- {summary}" if summary else ""))
        for p in cls.params():
            print(f"      {p.describe()}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from tkir.tools.report import (
        build_report,
        format_report,
        highest_register,
        peak_live_registers,
        ptx_min_blocks,
        register_comparison,
        spill_fallback,
    )

    measuring = _measure_request(args) if args.measure else None  # no ncu or no GPU: an error before any work
    k = _compile(args)
    rep = build_report(k.module)
    ptxas_regs = sass_regs = live_peak = None
    try:  # the backend's view: a failure there is a line of the report, never a traceback
        res = k.asm["ptxas"]
        rep["ptxas"] = {"registers": res.registers, "spill_stores": res.spill_stores,
                        "spill_loads": res.spill_loads, "shared_bytes": res.shared_bytes}
        ptxas_regs, sass_regs = res.registers, highest_register(k.asm["sass"])
        asked = ptx_min_blocks(k.asm["ptx"])
        if "occupancy" in rep and asked is not None:
            rep["occupancy"]["minnctapersm"] = asked
        live_peak = peak_live_registers(_life_ranges(k.asm["cubin"]))
    except CompileError as e:
        rep["backend"] = f"not compiled: {e.message}"
    except Exception as e:  # noqa: BLE001 -- NotImplementedError, ToolchainError, a backend bug
        rep["backend"] = f"not compiled: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}"
    if "backend" not in rep:  # what ptxas made of the schedule (tkir/tools/sass_overlap.py, sass_loads.py)
        from tkir.tools.sass_overlap import overlap_report

        overlap = overlap_report(k.module.kernel, k.asm["sass"])
        if overlap is not None:
            rep["overlap_in_sass"] = overlap
        from tkir.tools.sass_loads import early_reads

        early = early_reads(k.asm["sass"])  # global loads a thread waits for before it issues a wgmma
        if early:
            rep["loads_read_before_wgmma"] = early
    fallback = spill_fallback(k.module)  # set by the backend, which ran above
    if fallback is not None:
        rep["spill_fallback"] = fallback
    regs = register_comparison(k.module, ptxas_regs, sass_regs, live_peak)
    if regs is not None:
        rep["registers"] = regs
    if measuring is not None:
        rep["measured"] = _measure(args, k, rep, measuring)
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        print(format_report(rep))
        if measuring is not None:
            from tkir.tools.measure import format_measured

            print(format_measured(rep["measured"]), end="")
    return 0


def _measure_request(args: argparse.Namespace) -> dict:
    """`tkc report --measure`'s sizes (checked), and ncu and a GPU found, before the compile."""
    from tkir.tools.measure import gpu_problem
    from tkir.tools.ncu import MeasureError, find_ncu

    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed {args.seed}: a seed is 0 or more")
    sizes = _sizes(args.size)
    find_ncu()
    problem = gpu_problem()
    if problem:
        raise MeasureError(f"--measure runs the kernel on a CUDA GPU, and there is none here: {problem}")
    return {"sizes": sizes}


def _measure(args: argparse.Namespace, k, rep: dict, request: dict) -> dict:
    """Run the compiled kernel once under ncu (tkir/tools/measure.py) at the requested sizes, or the
    companion's first CHECK_SIZES."""
    from tkir.tools.examples import load_companion
    from tkir.tools.measure import measure
    from tkir.tools.ncu import MeasureError

    if "backend" in rep:  # the report's own line says why: nothing to launch
        raise MeasureError(f"--measure: the kernel did not compile ({rep['backend']})")
    sizes = request["sizes"]
    given = _kv(args.defines, "-D")
    consts = {n: k.consts.get(n, v) for n, v in given.items()}  # `auto` consts: the values the compiler chose
    if not sizes:
        if not Path(args.file).with_suffix(".py").is_file():
            raise UsageError("--measure needs the problem sizes: give --size NAME=VALUE for each "
                             f"(the kernel's sizes: {', '.join(_size_names(k.module))})")
        sizes = dict(load_companion(args.file).CHECK_SIZES[0])
    _check_sizes(k.module, sizes)
    return measure(k, rep, args.file, sizes, consts, seed=args.seed)


def _size_names(module) -> list[str]:
    from tkir.types import GlobalType

    names: list[str] = []
    for a in module.kernel.body.args:
        if isinstance(a.type, GlobalType):
            names += [d for d in a.type.size_names if d not in names]
    return names


def _life_ranges(cubin: bytes) -> str:
    """`nvdisasm --print-life-ranges --life-range-mode count`: SASS with the live register count per line."""
    import subprocess

    from tkir.backend.toolchain import find_tool

    with tempfile.TemporaryDirectory(prefix="tkir-plr-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([find_tool("nvdisasm"), "-c", "-plr", "-lrm", "count", str(path)],
                              capture_output=True, text=True, timeout=120)
    return proc.stdout if proc.returncode == 0 else ""


if __name__ == "__main__":
    sys.exit(main())
