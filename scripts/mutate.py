"""Mutation testing of tkir's passes and backend: does the test suite notice a one-line change?

    python3 scripts/mutate.py --named                        # the whole table (scripts/mutants.py), CPU tests
    python3 scripts/mutate.py --named --topic core           # one topic of it (--list shows them)
    python3 scripts/mutate.py --named --only trans-b-const-1,smem-reserve-512
    python3 scripts/mutate.py --named --gpu --json named_gpu.json   # on the H200: CPU, then GPU tests
    python3 scripts/mutate.py --auto passes backend --max 40 --seed 1 --md5 --json auto.json
    python3 scripts/mutate.py --auto passes backend --max 40 --seed 1 --only 'ID,ID' --tests "..."
    python3 scripts/mutate.py --list                         # the table, one mutation a line

Each mutant is one single-line change to a copy of the repository (the worktree itself is never
written): the tracked and untracked-but-not-ignored files, plus the tkir/frontend, tkir/passes and
tkir/backend links, are copied to a temporary directory once; a mutant rewrites one file there, runs
the tests with that copy first on PYTHONPATH (fresh tkir disk cache, no bytecode, a reset hypothesis
database), and the file is restored in a `finally`. The unmutated copy must pass the same tests first
(the baseline), or nothing is reported.

Outcomes: `killed` (a test failed or errored; the first failing test is recorded), `survived` (all
passed), `timeout` (stopped after the run's time limit; counted as detected, listed apart), `error`
(the mutation no longer applies to the code).

--named runs the table of scripts/mutants.py (NAMED here): file, a snippet that occurs once (or its n-th
occurrence), its replacement, what it breaks, the class of mistake it stands for, its topic, and for the
targeted entries the tests that should kill it (those run instead of the CPU run's tests; --tests overrides
them too); --topic picks topics. --auto FILES/DIRS generates operator mutations of the Python
code of those files (+ <-> -, < <-> <=, > <-> >=, == <-> !=, and <-> or, << <-> >>, & -> |, ^ -> |,
True <-> False, an integer n -> n + 1), skips the ones that do not compile, and samples --max of them
with --seed (the same seed and files give the same mutants); --only reruns some of them by id.
--md5: for each survivor, whether the PTX of every example configuration (scripts/ptx_md5.py) is
unchanged -- evidence for an equivalent mutant, or of a change only the GPU can judge.

The default tests (DEFAULT_TESTS) are the CPU tests that give the backend and the passes their meaning,
about 50 s of one core when nothing fails (`-x`: a killed mutant stops at its first failure, most
within 5-20 s); --jobs 2 spreads them over two pytest-xdist workers. --tests "ARGS" replaces them with
any pytest arguments. --gpu then runs the GPU-marked tests (GPU_RUNS, each with `-m gpu`, in order,
until one fails) on every mutant the CPU tests did not kill, and --gpu-always on the killed ones too
(to see whether the hardware agrees with the CPU models); --gpu refuses to start without a CUDA device,
so a GPU run cannot pass by skipping. Every run has a timeout of 3 x its unmutated time (+ 60 s CPU,
+ 120 s GPU). docs/mutation.md has the results and the survivors.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutants import MUTANTS, Mutation  # noqa: E402 - the table, beside this script

PACKAGE_LINKS = ("tkir/frontend", "tkir/passes", "tkir/backend")  # setuptools package-dir, as symlinks

# The CPU tests a mutant runs by default, fastest killers first (with -x a killed mutant stops early):
# the semantic checks of tests/backend/test_mutation_kills.py, the layout/descriptor/fragment formulas, the
# passes' decisions, the interpreter through the pipeline, then the FileCheck goldens of every pass and
# backend family (which also assemble three kernels with ptxas). About 50 s of one core when no mutant
# is caught; the full CPU suite is `--tests "tests -m 'not gpu'"`.
DEFAULT_TESTS = [
    "tests/backend/test_mutation_kills.py",
    "tests/backend/test_stream_k_partials.py",
    "tests/passes/test_split_masks_bounds.py",
    "tests/runtime/test_mutation_runtime.py",
    "tests/backend/test_wgmma_desc.py",
    "tests/backend/test_backend_fragments.py",
    "tests/ir/test_layout_props.py",
    "tests/passes/test_occupancy.py",
    "tests/runtime/test_launch.py",
    "tests/backend/test_toolchain.py",
    "tests/backend/test_sm80_mma_simulated.py",
    "tests/backend/test_block_eval_rows.py",
    "tests/ir/test_pipeline_interp.py",
    "tests/filecheck/test_filecheck.py",
]
# The GPU runs of --gpu (on the H200, for the mutants the CPU tests did not kill), in order: the kernels
# the CPU model covers, the attention-pass kernels, every example at several sizes, the runtime; then
# the conformance cases of the constructs whose meaning only the GPU shows (reductions, masks).
GPU_RUNS = [
    ["tests/gpu/test_mutation_gpu.py", "tests/gpu/test_gpu_pass_kernels.py", "tests/gpu/test_gpu_examples.py",
     "tests/gpu/test_runtime_gpu.py"],
    ["tests/conformance/test_conformance_gpu.py", "-k", "row_ or mask"],
]
# -x: stop at the first failure; fixed hypothesis seed: the same mutant gets the same verdict; the
# runner's own tests read the named snippets from the (mutated) copy, so they never judge a mutant
PYTEST = ["-q", "-x", "-p", "no:cacheprovider", "--hypothesis-seed=0", "-o", "addopts=-rfE",
          "--ignore=tests/tools/test_mutation.py"]

# the mutation table (id, file, snippet, mutation, what it breaks, the tests that should kill it)
NAMED: list[Mutation] = MUTANTS


# ---------------------------------------------------------------------------------------------
# Automatic operator mutations


SWAPS = {"+": "-", "-": "+", "<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==",
         "and": "or", "or": "and", "<<": ">>", ">>": "<<", "&": "|", "^": "|", "True": "False", "False": "True"}


def auto_candidates(paths: list[Path]) -> list[Mutation]:
    """Every operator mutation of the code (not strings or comments) of `paths` that still compiles."""
    out: list[Mutation] = []
    for path in paths:
        rel = path.resolve().relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
        for i, tok in enumerate(toks):
            s = tok.string
            prev = toks[i - 1] if i else None
            if tok.type == tokenize.NUMBER and re.fullmatch(r"\d+", s.replace("_", "")):
                new = str(int(s.replace("_", "")) + 1)
            elif (tok.type == tokenize.OP or s in ("and", "or", "True", "False")) and s in SWAPS:
                if s in ("+", "-") and prev is not None and prev.string in ("(", "[", ",", "=", "return", ":"):
                    continue  # unary sign: the n -> n + 1 mutation covers the number
                new = SWAPS[s]
            else:
                continue
            (line, col) = tok.start
            m = Mutation(f"{rel}:{line}:{col}:{s}->{new}", rel, s, new, f"`{s}` -> `{new}`",
                         line=line, col=col)
            try:
                compile(m.apply(text), rel, "exec")
            except (SyntaxError, ValueError):
                continue
            out.append(m)
    return out


def expand(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        q = (ROOT / p) if not Path(p).is_absolute() else Path(p)
        out += sorted(q.glob("*.py")) if q.is_dir() else [q]
    return out


# ---------------------------------------------------------------------------------------------
# Running


@dataclass
class Result:
    id: str
    path: str
    what: str
    klass: str
    status: str               # killed | survived | timeout | error (the mutation did not apply)
    stage: str = ""           # cpu | gpu: the test run that decided
    seconds: float = 0.0
    killed_by: str = ""       # the first failing test
    summary: str = ""         # pytest's last line
    diff: list[str] = field(default_factory=list)
    ptx_unchanged: bool | None = None  # --md5, survivors: every example's PTX is what the unmutated code emits
    gpu_verdict: str = ""     # --gpu-always, CPU-killed mutants: what the GPU runs say on their own


def copy_tree(dest: Path) -> Path:
    """The repository's files (tracked + untracked, not ignored) and the package links, under dest."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if not src.is_file():
            continue
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / f)
    for link in PACKAGE_LINKS:  # pyproject's package-dir (tkir.frontend = frontend/, ...) as relative links, so
        if not (dest / link).exists():  # PYTHONPATH=copy imports the copy's sources (a fresh clone has none)
            os.symlink(Path("..") / Path(link).name, dest / link)
    return dest


def _pythonpath(tree: Path) -> str:
    """The copy first, then whatever PYTHONPATH already held (the device machines put the carried wheels
    there: replacing it left the copy without lark, and every GPU test of the baseline failed)."""
    return os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH", "")]))


def run_tests(tree: Path, args: list[str], timeout: float, gpu: bool = False) -> tuple[str, float, str, str]:
    """(passed | failed | timeout, seconds, first failing test, last line) of pytest in `tree`."""
    env = dict(os.environ, PYTHONPATH=_pythonpath(tree), PYTHONDONTWRITEBYTECODE="1",
               TKIR_CACHE_DIR=str(tree / ".tkir-cache"))
    if gpu:  # a GPU test that cannot reach the device fails instead of skipping (tests/conftest.py)
        env["TKIR_REQUIRE_GPU"] = "1"
    shutil.rmtree(tree / ".tkir-cache", ignore_errors=True)  # a mutant never reads an unmutated compile
    shutil.rmtree(tree / ".hypothesis", ignore_errors=True)  # nor replays another mutant's examples
    cmd = [sys.executable, "-m", "pytest", *PYTEST, *(["-m", "gpu"] if gpu else []), *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # pytest and the tkc/ptxas subprocesses it started
        proc.communicate()
        return "timeout", time.monotonic() - t0, "", f"no result after {timeout:.0f} s"
    secs = time.monotonic() - t0
    lines = out.strip().splitlines()
    first = next((ln.split(" ", 1)[1].split(" - ")[0] for ln in lines if ln.startswith(("FAILED ", "ERROR "))), "")
    if not first and "Fatal Python error" in out:  # the process died (an LLVM abort, say): name the test it was in
        at = re.findall(r'File "[^"]*/(tests/[^"]+\.py)", line \d+ in (test_\w+)', out)
        first = f"crashed in {at[0][0]}::{at[0][1]}" if at else "crashed"
    last = lines[-1] if lines else ""
    if proc.returncode == 5 or (proc.returncode == 0 and " passed" not in last):
        raise SystemExit(f"no tests ran: {shlex.join(cmd)}\n{out[-2000:]}")
    return ("passed" if proc.returncode == 0 else "failed"), secs, first, last


def gpu_count(tree: Path) -> int:
    """CUDA devices the driver reports (0 when it cannot initialise), as tests/conftest.py counts them."""
    code = ("from cuda.bindings import driver as cu\n(e,) = cu.cuInit(0)\n"
            "print(cu.cuDeviceGetCount()[1] if e == cu.CUresult.CUDA_SUCCESS else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True)
    return int(r.stdout.strip() or 0) if r.returncode == 0 else 0


@dataclass
class Plan:
    """The test runs of one mutant: the CPU run, then (--gpu) each GPU run while it still survives;
    `md5`: for a survivor, whether the PTX of every example configuration is unchanged. A mutant with its
    own `tests` runs those as its CPU run (`cpu_args`) unless `own_tests` is off (--tests)."""

    cpu: list[str]
    gpu: list[list[str]]
    cpu_timeout: float = 3600.0
    own_tests: bool = True
    cpu_prefix: list[str] = field(default_factory=list)  # before a mutant's own tests (-n N of --jobs)
    cpu_timeouts: dict[tuple[str, ...], float] = field(default_factory=dict)  # per CPU run, from its baseline
    gpu_timeouts: dict[tuple[str, ...], float] = field(default_factory=dict)  # per GPU run, from its baseline
    own_gpu_tests: bool = True  # a mutant's own gpu_tests replace `gpu` (not with --gpu-tests)
    md5: str | None = None  # the unmutated copy's scripts/ptx_md5.py listing
    gpu_always: bool = False  # also run the GPU runs on mutants the CPU run killed (gpu_verdict)
    cpu_verdicts: dict[str, str] | None = None  # --gpu-after: id -> the earlier CPU run's summary (not rerun)

    def cpu_args(self, m: Mutation) -> list[str]:
        """The pytest arguments of `m`'s CPU run."""
        return [*self.cpu_prefix, *m.tests] if self.own_tests and m.tests else self.cpu

    def gpu_args(self, m: Mutation) -> list[list[str]]:
        """The GPU runs of `m` (none without --gpu): its own `gpu_tests` where it names them, else `gpu`."""
        if not self.gpu:
            return []
        return [list(r) for r in m.gpu_tests] if self.own_gpu_tests and m.gpu_tests else self.gpu


def ptx_md5(tree: Path) -> str:
    """scripts/ptx_md5.py in the copy: one md5 (or ERROR line) per example configuration."""
    env = dict(os.environ, PYTHONPATH=_pythonpath(tree), PYTHONDONTWRITEBYTECODE="1", TKIR_CACHE="0")
    r = subprocess.run([sys.executable, "scripts/ptx_md5.py", "-j", "1"], cwd=tree, env=env, capture_output=True,
                       text=True, timeout=900)
    return r.stdout if r.returncode == 0 else f"exit {r.returncode}\n{r.stdout}"


def run_mutant(tree: Path, m: Mutation, plan: Plan) -> Result:
    """Apply `m` to the copy in `tree`, run the plan's tests, restore the file (also on errors)."""
    target = tree / m.path
    original = target.read_text(encoding="utf-8")
    res = Result(m.id, m.path, m.what, m.klass, "error")
    try:
        mutated = m.apply(original)
    except ValueError as e:
        res.summary = str(e)
        return res
    res.diff = _diff(original, mutated)
    try:
        target.write_text(mutated, encoding="utf-8")
        if plan.cpu_verdicts is not None:  # survived the CPU tests in an earlier run (--gpu-after)
            status, secs, first, last = "passed", 0.0, "", f"earlier CPU run: {plan.cpu_verdicts[m.id]}"
        else:
            args = plan.cpu_args(m)
            status, secs, first, last = run_tests(tree, args, plan.cpu_timeouts.get(tuple(args), plan.cpu_timeout))
        res.stage, res.seconds, res.killed_by, res.summary = "cpu", secs, first, last
        for i, args in enumerate(plan.gpu_args(m)):
            if status != "passed":
                break
            status, secs, first, last = run_tests(tree, args, plan.gpu_timeouts.get(tuple(args), 3600.0), gpu=True)
            res.stage, res.killed_by, res.summary = f"gpu{i + 1}", first, last
            res.seconds += secs
        res.status = {"passed": "survived", "failed": "killed", "timeout": "timeout"}[status]
        if plan.gpu_always and res.stage == "cpu" and res.status != "survived":
            verdict = "survived"
            for i, args in enumerate(plan.gpu_args(m)):
                gstatus, secs, first, last = run_tests(tree, args, plan.gpu_timeouts.get(tuple(args), 3600.0),
                                                       gpu=True)
                res.seconds += secs
                if gstatus != "passed":
                    verdict = f"{gstatus} in gpu{i + 1}: {first or last}"
                    break
            res.gpu_verdict = verdict
        if res.status == "survived" and plan.md5 is not None:
            res.ptx_unchanged = ptx_md5(tree) == plan.md5
    finally:
        target.write_text(original, encoding="utf-8")
    return res


def _diff(a: str, b: str) -> list[str]:
    la, lb = a.splitlines(), b.splitlines()
    i = next(i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y)
    return [f"-{la[i].strip()}", f"+{lb[i].strip()}", f"line {i + 1}"]


def table(results: list[Result]) -> str:
    rows = [("mutant", "status", "stage", "s", "killed by / last line")]
    for r in results:
        ptx = "" if r.ptx_unchanged is None else ("; PTX unchanged" if r.ptx_unchanged else "; PTX changed")
        gpu = f"; GPU alone: {r.gpu_verdict}" if r.gpu_verdict else ""
        rows.append((r.id, r.status, r.stage, f"{r.seconds:.0f}", (r.killed_by or r.summary) + ptx + gpu))
    widths = [min(max(len(x[i]) for x in rows), 60) for i in range(4)]
    out = ["  ".join(x[i][:60].ljust(widths[i]) for i in range(4)) + "  " + x[4][:110] for x in rows]
    counts = {s: sum(r.status == s for r in results) for s in ("killed", "survived", "timeout", "error")}
    out.append(f"\n{len(results)} mutants: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mutate.py", description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--named", action="store_true", help="run the mutation table (scripts/mutants.py)")
    mode.add_argument("--auto", nargs="+", metavar="PATH", help="operator mutations of these files or directories")
    mode.add_argument("--list", action="store_true", help="print the mutation table and exit")
    ap.add_argument("--topic", default="", help="--named, --list: comma-separated topics of the table")
    ap.add_argument("--only", default="", help="comma-separated ids of the mutants to run (named, or --auto's)")
    ap.add_argument("--max", type=int, default=40, help="--auto: how many mutants to sample (default 40)")
    ap.add_argument("--seed", type=int, default=1, help="--auto: sampling seed (default 1)")
    ap.add_argument("--tests", default=None,
                    help="pytest arguments of every mutant's CPU run (default: its own tests, else DEFAULT_TESTS)")
    ap.add_argument("--jobs", type=int, default=1, help="CPU run on N pytest-xdist workers (default 1)")
    ap.add_argument("--gpu", action="store_true", help="then the GPU runs (-m gpu) on what the CPU run let through")
    ap.add_argument("--gpu-always", action="store_true",
                    help="with --gpu: run the GPU runs on CPU-killed mutants too (does the hardware agree?)")
    ap.add_argument("--gpu-tests", action="append", default=None, metavar="ARGS",
                    help="pytest arguments of one GPU run (repeatable; default: GPU_RUNS)")
    ap.add_argument("--md5", action="store_true",
                    help="for each survivor, compare the PTX of every example configuration (scripts/ptx_md5.py)")
    ap.add_argument("--timeout", type=float, default=0, help="seconds per CPU run (default: 3 x baseline + 60)")
    ap.add_argument("--json", default=None, help="write the results as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy (its path is printed)")
    ap.add_argument("--gpu-after", default=None, metavar="JSON",
                    help="with --gpu: only the mutants that survived the CPU run recorded in JSON (an earlier "
                         "--json of the same mode, seed and sample; --only narrows them further), without "
                         "rerunning their CPU tests")
    args = ap.parse_args(argv)
    if args.gpu_after and not args.gpu:
        ap.error("--gpu-after goes with --gpu")

    topics = set(filter(None, args.topic.split(",")))
    if topics - {m.topic for m in NAMED}:
        ap.error(f"unknown topics: {', '.join(sorted(topics - {m.topic for m in NAMED}))} "
                 f"(the table has {', '.join(sorted({m.topic for m in NAMED}))})")
    if args.list:
        for m in NAMED:
            if not topics or m.topic in topics:
                print(f"{m.id:32} {m.topic:15} {m.path:28} {m.what}  [{shlex.join(m.tests) or 'DEFAULT_TESTS'}]")
        return 0
    if args.named:
        wanted = set(filter(None, args.only.split(",")))
        unknown = wanted - {m.id for m in NAMED}
        if unknown:
            ap.error(f"unknown named mutations: {', '.join(sorted(unknown))}")
        mutants = [m for m in NAMED if (not wanted or m.id in wanted) and (not topics or m.topic in topics)]
    else:
        cands = auto_candidates(expand(args.auto))
        mutants = sorted(random.Random(args.seed).sample(cands, min(args.max, len(cands))),
                         key=lambda m: (m.path, m.line, m.col))
        print(f"{len(cands)} candidate mutants in {', '.join(args.auto)}; sampled {len(mutants)} with seed "
              f"{args.seed}", file=sys.stderr)
        wanted = set(filter(None, args.only.split(",")))
        if wanted:  # rerun some of a sample (ids as the table prints them)
            mutants = [m for m in cands if m.id in wanted]
            if len(mutants) != len(wanted):
                ap.error(f"unknown mutants: {', '.join(sorted(wanted - {m.id for m in mutants}))}")
    cpu = shlex.split(args.tests) if args.tests is not None else list(DEFAULT_TESTS)
    prefix = ["-n", str(args.jobs)] if args.jobs > 1 else []
    gpu = [shlex.split(g) for g in args.gpu_tests] if args.gpu_tests else [list(r) for r in GPU_RUNS]
    plan = Plan([*prefix, *cpu], gpu if args.gpu else [], gpu_always=args.gpu and args.gpu_always,
                own_tests=args.tests is None, cpu_prefix=prefix, own_gpu_tests=not args.gpu_tests)
    if args.gpu_after:
        earlier = {r["id"]: r for r in json.loads(Path(args.gpu_after).read_text())["results"]}
        plan.cpu_verdicts = {i: r["summary"] for i, r in earlier.items()
                             if r["status"] == "survived" and r["stage"] == "cpu"}
        if not plan.cpu_verdicts:
            ap.error(f"{args.gpu_after} records no mutant that survived its CPU run")
        by_id = {m.id: m for m in (NAMED if args.named else auto_candidates(expand(args.auto)))}
        only = set(filter(None, args.only.split(",")))
        if only - set(plan.cpu_verdicts):
            ap.error(f"--only names mutants that did not survive the CPU run of {args.gpu_after}: "
                     f"{', '.join(sorted(only - set(plan.cpu_verdicts)))}")
        chosen = [i for i in plan.cpu_verdicts if not only or i in only]
        missing = sorted(set(chosen) - set(by_id))
        if missing:  # the id holds path:line:col: code edited since the earlier run moves it
            ap.error(f"mutants of {args.gpu_after} that do not apply to this code: {', '.join(missing)}")
        mutants = [by_id[i] for i in chosen]

    tmp = Path(tempfile.mkdtemp(prefix="tkir-mutate-"))
    results: list[Result] = []
    baseline: dict[str, float] = {}
    try:
        tree = copy_tree(tmp / "tree")
        if plan.gpu and gpu_count(tree) == 0:
            raise SystemExit("--gpu needs a CUDA device (the GPU tests would only skip)")
        if plan.cpu_verdicts is None:  # each distinct CPU run of the chosen mutants, on the unmutated copy
            for run in dict.fromkeys(tuple(plan.cpu_args(m)) for m in mutants):
                status, secs, first, last = run_tests(tree, list(run), 3600)
                print(f"baseline CPU (unmutated copy) {shlex.join(run)}: {status} in {secs:.0f} s: {last}",
                      file=sys.stderr)
                if status != "passed":
                    raise SystemExit(f"the unmutated copy fails the CPU tests {shlex.join(run)} ({first}); "
                                     "fix that first")
                baseline["cpu" if list(run) == plan.cpu else f"cpu {shlex.join(run)}"] = secs
                plan.cpu_timeouts[run] = args.timeout or 3 * secs + 60
        if args.md5:
            plan.md5 = ptx_md5(tree)
        # each distinct GPU run of the chosen mutants (GPU_RUNS, or a mutant's own gpu_tests), on the unmutated copy
        for i, g in enumerate(dict.fromkeys(tuple(r) for m in mutants for r in plan.gpu_args(m)), 1):
            status, secs, first, last = run_tests(tree, list(g), 3600, gpu=True)
            print(f"baseline GPU run {i} {shlex.join(g)}: {status} in {secs:.0f} s: {last}", file=sys.stderr)
            if status != "passed":
                raise SystemExit(f"the unmutated copy fails GPU run {i} {shlex.join(g)} ({first})")
            baseline[f"gpu{i}" if list(g) in plan.gpu else f"gpu {shlex.join(g)}"] = secs
            plan.gpu_timeouts[g] = 3 * secs + 120
        for i, m in enumerate(mutants, 1):
            r = run_mutant(tree, m, plan)
            results.append(r)
            print(f"[{i}/{len(mutants)}] {r.status:8} {r.seconds:5.0f} s  {m.id}  {r.killed_by or r.summary}",
                  file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"kept {tmp / 'tree'}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(table(results))
    if args.json:
        meta = {"mode": "named" if args.named else "auto", "files": args.auto, "max": args.max, "seed": args.seed,
                "cpu_tests": plan.cpu if plan.cpu_verdicts is None else f"not rerun: {args.gpu_after}",
                "gpu_runs": plan.gpu,
                "baseline_s": {k: round(v, 1) for k, v in baseline.items()}}
        Path(args.json).write_text(json.dumps({"run": meta, "results": [asdict(r) for r in results]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
