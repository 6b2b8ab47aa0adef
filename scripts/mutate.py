"""Mutation testing of tkir's passes and backend: does the test suite notice a one-line change?

    python3 scripts/mutate.py --named                        # the curated mutations, CPU tests
    python3 scripts/mutate.py --named --only trans-b-const-1,smem-reserve-512
    python3 scripts/mutate.py --named --gpu --json named_gpu.json   # on the H200: CPU, then GPU tests
    python3 scripts/mutate.py --auto passes backend --max 40 --seed 1 --md5 --json auto.json
    python3 scripts/mutate.py --auto passes backend --max 40 --seed 1 --only 'ID,ID' --tests "..."
    python3 scripts/mutate.py --list                         # the named mutations, one a line

Each mutant is one single-line change to a copy of the repository (the worktree itself is never
written): the tracked and untracked-but-not-ignored files, plus the tkir/frontend, tkir/passes and
tkir/backend links, are copied to a temporary directory once; a mutant rewrites one file there, runs
the tests with that copy first on PYTHONPATH (fresh tkir disk cache, no bytecode, a reset hypothesis
database), and the file is restored in a `finally`. The unmutated copy must pass the same tests first
(the baseline), or nothing is reported.

Outcomes: `killed` (a test failed or errored; the first failing test is recorded), `survived` (all
passed), `timeout` (stopped after the run's time limit; counted as detected, listed apart), `error`
(the mutation no longer applies to the code).

--named runs NAMED below: file, a snippet that occurs once, its replacement, what it breaks, and the
class of issue 14's list it belongs to. --auto FILES/DIRS generates operator mutations of the Python
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
PACKAGE_LINKS = ("tkir/frontend", "tkir/passes", "tkir/backend")  # setuptools package-dir, as symlinks

# The CPU tests a mutant runs by default, fastest killers first (with -x a killed mutant stops early):
# the semantic checks of tests/test_mutation_kills.py, the layout/descriptor/fragment formulas, the
# passes' decisions, the interpreter through the pipeline, then the FileCheck goldens of every pass and
# backend family (which also assemble three kernels with ptxas). About 50 s of one core when no mutant
# is caught; the full CPU suite is `--tests "tests -m 'not gpu'"`.
DEFAULT_TESTS = [
    "tests/test_mutation_kills.py",
    "tests/test_mutation_runtime.py",
    "tests/test_wgmma_desc.py",
    "tests/test_backend_fragments.py",
    "tests/test_layout_props.py",
    "tests/test_occupancy.py",
    "tests/test_launch.py",
    "tests/test_toolchain.py",
    "tests/test_sm80_mma_simulated.py",
    "tests/test_pipeline_interp.py",
    "tests/test_filecheck.py",
]
# The GPU runs of --gpu (on the H200, for the mutants the CPU tests did not kill), in order: the kernels
# the CPU model covers, the attention-pass kernels, every example at several sizes, the runtime; then
# the conformance cases of the constructs whose meaning only the GPU shows (reductions, masks).
GPU_RUNS = [
    ["tests/test_mutation_gpu.py", "tests/test_gpu_pass_kernels.py", "tests/test_gpu_examples.py",
     "tests/test_runtime_gpu.py"],
    ["tests/conformance/test_conformance_gpu.py", "-k", "row_ or mask"],
]
# -x: stop at the first failure; fixed hypothesis seed: the same mutant gets the same verdict; the
# runner's own tests read the named snippets from the (mutated) copy, so they never judge a mutant
PYTEST = ["-q", "-x", "-p", "no:cacheprovider", "--hypothesis-seed=0", "-o", "addopts=-rfE",
          "--ignore=tests/test_mutation.py"]


@dataclass(frozen=True)
class Mutation:
    """One single-line change: `old` (unique in `path`, or its `occurrence`-th match) becomes `new`."""

    id: str
    path: str
    old: str
    new: str
    what: str
    klass: str = ""           # issue 14's class, or "" for the extra ones
    occurrence: int = 0       # 0: `old` must occur exactly once; n: the n-th of several
    line: int = 0             # --auto: the 1-based line (old/new are then the token and its mutant)
    col: int = 0              # --auto: the token's column

    def apply(self, text: str) -> str:
        """The mutated text; ValueError when the snippet is not where it should be."""
        if self.line:
            lines = text.splitlines(keepends=True)
            ln = lines[self.line - 1]
            if ln[self.col:self.col + len(self.old)] != self.old:
                raise ValueError(f"{self.path}:{self.line}:{self.col}: expected {self.old!r}")
            lines[self.line - 1] = ln[:self.col] + self.new + ln[self.col + len(self.old):]
            return "".join(lines)
        n = text.count(self.old)
        if self.occurrence == 0 and n != 1:
            raise ValueError(f"{self.path}: {self.old!r} occurs {n} times, not once")
        if self.occurrence > n:
            raise ValueError(f"{self.path}: {self.old!r} occurs {n} times, not {self.occurrence}")
        at = -1
        for _ in range(max(self.occurrence, 1)):
            at = text.index(self.old, at + 1)
        if "\n" in self.old or "\n" in self.new:
            raise ValueError(f"{self.id}: a mutation changes one line")
        return text[:at] + self.new + text[at + len(self.old):]


M = Mutation
# The eight classes issue 14 lists first (each must be killed), then the ones added here.
NAMED: list[Mutation] = [
    # wgmma descriptor: layout-type code (bits 63-62: 0 none, 1 128B, 2 64B, 3 32B; PTX ISA §9.7.15.5.1.2.2)
    M("desc-code-64-32-swapped", "backend/wgmma_desc.py", "128: 1, 64: 2, 32: 3", "128: 1, 64: 3, 32: 2",
      "64B and 32B descriptors carry each other's layout-type code", "wgmma descriptor swizzle code"),
    M("desc-code-128-as-64", "backend/wgmma_desc.py", "128: 1, 64: 2, 32: 3", "128: 2, 64: 2, 32: 3",
      "128B descriptors say 64B", "wgmma descriptor swizzle code"),
    M("desc-code-bit-61", "backend/rules_wgmma.py", "wgmma_desc.LAYOUT_CODE[swizzle] << 62",
      "wgmma_desc.LAYOUT_CODE[swizzle] << 61", "the layout type lands in bits 62-61", "wgmma descriptor swizzle code"),
    # trans-b immediate: 0 = K-major, 1 = N-major (B stored K x N)
    M("trans-b-const-1", "backend/rules_wgmma.py", "int(trans_b is False)", "1",
      "imm-trans-b always 1: a K-major B (q @ k.T, x @ w.T) is read as N-major", "B-transpose flag"),
    M("trans-b-inverted", "backend/rules_wgmma.py", "int(trans_b is False)", "int(trans_b is True)",
      "imm-trans-b inverted", "B-transpose flag"),
    M("trans-b-rs-const-1", "backend/rules_wgmma.py", "${k + 4}, 1, 1, 1, {trans_b};", "${k + 4}, 1, 1, 1, 1;",
      "register-A wgmma: imm-trans-b always 1", "B-transpose flag"),
    # row reduction: lanes that share a row
    M("reduce-quad-8-lanes", "backend/fragments.py", "return QUAD, QUAD", "return 2 * QUAD, QUAD",
      "accumulator rows reduced over 8 lanes instead of the quad (mixes rows g and g+1)", "row-reduction lane count"),
    M("reduce-row-16-lanes", "backend/fragments.py", "n = min(cpr, WARP)", "n = min(cpr, WARP // 2)",
      "a row of 32+ chunks reduced over 16 lanes only", "row-reduction lane count"),
    # the butterfly loop
    M("shuffle-loop-le", "backend/rules_registers.py", "while step < lanes:", "while step <= lanes:",
      "one butterfly step too many (combines the next row group)", "shuffle loop"),
    M("shuffle-loop-step-4", "backend/rules_registers.py", "            step *= 2", "            step *= 4",
      "butterfly offsets 1, 4, 16: half the lanes skipped", "shuffle loop"),
    M("shuffle-loop-start-2", "backend/rules_registers.py", "        step = 1", "        step = 2",
      "butterfly starts at offset 2: adjacent lanes never combined", "shuffle loop"),
    M("shuffle-clamp-15", "backend/exchange.py", '("i32", str(step)), ("i32", "31")',
      '("i32", str(step)), ("i32", "15")', "shfl.bfly c = 15: lanes 16-31 read their own value", "shuffle loop"),
    # swizzle masks (tkir/layout.py is the one owner; backend/fragments.py and the passes import it)
    M("swizzle-mask-32", "tkir/layout.py", "32: 0x10", "32: 0x20",
      "32B swizzle XORs address bit 5 with bit 8 instead of bit 4 with bit 7", "32B swizzle mask"),
    M("swizzle-mask-64", "tkir/layout.py", "64: 0x30", "64: 0x10",
      "64B swizzle XORs one bit instead of two", "32B swizzle mask"),
    M("swizzle-shift-4", "backend/fragments.py", "SWIZZLE_SHIFT = 3", "SWIZZLE_SHIFT = 4",
      "backend swizzle formula shifts by 4", "32B swizzle mask"),
    # TMA box limit: boxDim[i] in [1, 256] (cuTensorMapEncodeTiled)
    M("tma-box-rows-ge", "passes/create_tma.py", "if rows > TMA_MAX_BOX:", "if rows >= TMA_MAX_BOX:",
      "a 256-row tile is refused TMA", "TMA box-size boundary"),
    M("tma-box-rows-plus-16", "passes/create_tma.py", "if rows > TMA_MAX_BOX:", "if rows > TMA_MAX_BOX + 16:",
      "a 257..272-row box is given to TMA", "TMA box-size boundary"),
    M("tma-box-inner-plus-8", "passes/create_tma.py", "if inner > TMA_MAX_BOX:", "if inner > TMA_MAX_BOX + 8:",
      "an inner box of 257..264 elements is given to TMA", "TMA box-size boundary"),
    M("tma-box-limit-512", "tkir/target.py", "TMA_MAX_BOX = 256 ", "TMA_MAX_BOX = 512 ",
      "the box limit itself doubled (create-tma and the verifier)", "TMA box-size boundary"),
    # bank conflicts: fix every access above degree 1
    M("bank-threshold-2", "passes/bank_conflicts.py", "max(degrees, default=1) > 1", "max(degrees, default=1) > 2",
      "2-way conflicts are left unfixed", "bank-conflict threshold"),
    # shared memory reserved per block (1 KB, CUDA occupancy calculator / HOPPER.md §7.3)
    M("smem-reserve-512", "passes/plan_occupancy.py", "SMEM_RESERVED_PER_BLOCK = 1024",
      "SMEM_RESERVED_PER_BLOCK = 512", "512 B reserved per block: one block too many at the boundary",
      "shared-memory reserve"),
    M("smem-reserve-2k", "passes/plan_occupancy.py", "SMEM_RESERVED_PER_BLOCK = 1024",
      "SMEM_RESERVED_PER_BLOCK = 2048", "2 KB reserved per block: one block too few at the boundary",
      "shared-memory reserve"),
    # --- beyond the list -------------------------------------------------------------------
    M("mbarrier-producer-parity", "passes/pipeline.py", '"arith.sub", [ring.one, phase]',
      '"arith.rem", [phase, ring.two]', "the producer waits on `empty` with the consumer's parity (deadlock)"),
    M("mbarrier-phase-per-iteration", "passes/pipeline.py", '"arith.rem", [rnd, ring.two]',
      '"arith.rem", [it, ring.two]', "the barrier phase flips every iteration instead of every round of the ring"),
    M("empty-count-per-warpgroup", "passes/pipeline.py", "cp_async else WARPS_PER_WARPGROUP * n_consumers",
      "cp_async else n_consumers", "`empty` completes after one warp per warpgroup arrives (stage reused early)"),
    M("expect-tx-max", "passes/pipeline.py", "return sum(int(ld.attrs.get(", "return max(int(ld.attrs.get(",
      "expect_tx counts only the largest load of a stage"),
    M("wait-group-plus-1", "backend/idioms.py", 'f"wgmma.wait_group.sync.aligned {n};"',
      'f"wgmma.wait_group.sync.aligned {n + 1};"', "wgmma.wait_group leaves one group too many in flight",
      occurrence=2),
    M("async-groups-2", "passes/pipeline.py", 'op.attrs["async_groups"] = 1', 'op.attrs["async_groups"] = 2',
      "two wgmma groups in flight while the stage of the older one is released"),
    M("setmaxnreg-direction", "backend/rules_pipe.py", 'which = "dec" if regs < cx.init_cap else "inc"',
      'which = "inc" if regs < cx.init_cap else "dec"', "producer increases, consumers decrease registers"),
    M("tma-panel-bytes", "backend/rules_pipe.py", "panel_bytes = t.rows * panel_cols * dtype_bytes(t.dtype)",
      "panel_bytes = t.rows * panel_cols", "TMA load boxes of a wide tile land half a panel apart", occurrence=1),
    M("fence-proxy-async-dropped", "backend/context.py",
      "            fence_async_proxy(self.w)", "            pass",
      "no generic-to-async proxy fence before wgmma/TMA reads of thread-written shared memory"),
    M("fence-staged-epilogue-dropped", "backend/rules_wgmma.py",
      "fence_async_proxy(w)", "pass",
      "the staged epilogue's TMA store reads the stage without a proxy fence"),
    M("fence-cp-async-dropped", "backend/rules_sm80.py",
      "fence_async_proxy(w)  # wgmma", "pass  # wgmma",
      "--no-tma: wgmma reads cp.async-filled tiles without a proxy fence", occurrence=1),
    M("ldmatrix-b-trans", "backend/rules_sm80.py", "trans=not trans_b)", "trans=trans_b)",
      "sm_80: B fragments loaded with the wrong ldmatrix .trans"),
    M("cp-async-8-bytes", "backend/rules_sm80.py", 'asm = ["cp.async.cg.shared.global [$0], [$1], 16, $2;"]',
      'asm = ["cp.async.cg.shared.global [$0], [$1], 8, $2;"]', "cp.async copies 8 of each 16-byte chunk"),
    M("acc-fragment-row", "backend/fragments.py", "r = b.add(base, mb * WGMMA_M + 8 * ((i >> 1) & 1))",
      "r = b.add(base, mb * WGMMA_M + 8 * (i & 1))", "wgmma accumulator slots 1, 2 swap rows g + 8 and g"),
    M("wgmma-a-warpgroup-rows", "backend/rules_wgmma.py", 'f"mul i32 {wg}, {rows_per_wg * sw_a}"',
      'f"mul i32 {wg}, {rows_per_wg * sw_a // 2}"', "the second consumer warpgroup reads A half a block too high"),
    M("causal-mask-diagonal", "backend/rules_registers.py", 'f"icmp sgt i32 {t}, {dr - dc}"',
      'f"icmp sge i32 {t}, {dr - dc}"',
      "the causal mask also hides the diagonal (a query's own key)"),
    M("row-reduce-max-min", "backend/rules_registers.py",
      'fop = {"max": "max", "min": "min", "sum": "add", "mean": "add"}[kind]',
      'fop = {"max": "min", "min": "max", "sum": "add", "mean": "add"}[kind]', "row_max computes the row minimum"),
]


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
    `md5`: for a survivor, whether the PTX of every example configuration is unchanged."""

    cpu: list[str]
    gpu: list[list[str]]
    cpu_timeout: float = 3600.0
    gpu_timeouts: list[float] = field(default_factory=list)
    md5: str | None = None  # the unmutated copy's scripts/ptx_md5.py listing
    gpu_always: bool = False  # also run the GPU runs on mutants the CPU run killed (gpu_verdict)
    cpu_verdicts: dict[str, str] | None = None  # --gpu-after: id -> the earlier CPU run's summary (not rerun)


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
            status, secs, first, last = run_tests(tree, plan.cpu, plan.cpu_timeout)
        res.stage, res.seconds, res.killed_by, res.summary = "cpu", secs, first, last
        for i, (args, limit) in enumerate(zip(plan.gpu, plan.gpu_timeouts, strict=True)):
            if status != "passed":
                break
            status, secs, first, last = run_tests(tree, args, limit, gpu=True)
            res.stage, res.killed_by, res.summary = f"gpu{i + 1}", first, last
            res.seconds += secs
        res.status = {"passed": "survived", "failed": "killed", "timeout": "timeout"}[status]
        if plan.gpu_always and res.stage == "cpu" and res.status != "survived":
            verdict = "survived"
            for i, (args, limit) in enumerate(zip(plan.gpu, plan.gpu_timeouts, strict=True)):
                gstatus, secs, first, last = run_tests(tree, args, limit, gpu=True)
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
    mode.add_argument("--named", action="store_true", help="run the curated mutations (NAMED)")
    mode.add_argument("--auto", nargs="+", metavar="PATH", help="operator mutations of these files or directories")
    mode.add_argument("--list", action="store_true", help="print the named mutations and exit")
    ap.add_argument("--only", default="", help="comma-separated ids of the mutants to run (named, or --auto's)")
    ap.add_argument("--max", type=int, default=40, help="--auto: how many mutants to sample (default 40)")
    ap.add_argument("--seed", type=int, default=1, help="--auto: sampling seed (default 1)")
    ap.add_argument("--tests", default=None, help="pytest arguments of the CPU run (default: DEFAULT_TESTS)")
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

    if args.list:
        for m in NAMED:
            print(f"{m.id:32} {m.path:28} {m.klass or '-':28} {m.what}")
        return 0
    if args.named:
        wanted = set(filter(None, args.only.split(",")))
        unknown = wanted - {m.id for m in NAMED}
        if unknown:
            ap.error(f"unknown named mutations: {', '.join(sorted(unknown))}")
        mutants = [m for m in NAMED if not wanted or m.id in wanted]
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
    if args.jobs > 1:
        cpu = ["-n", str(args.jobs), *cpu]
    gpu = [shlex.split(g) for g in args.gpu_tests] if args.gpu_tests else [list(r) for r in GPU_RUNS]
    plan = Plan(cpu, gpu if args.gpu else [], gpu_always=args.gpu and args.gpu_always)
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
        if plan.cpu_verdicts is None:
            status, secs, first, last = run_tests(tree, plan.cpu, 3600)
            print(f"baseline CPU (unmutated copy): {status} in {secs:.0f} s: {last}", file=sys.stderr)
            if status != "passed":
                raise SystemExit(f"the unmutated copy fails the CPU tests ({first}); fix that first")
            baseline["cpu"] = secs
            plan.cpu_timeout = args.timeout or 3 * secs + 60
        if args.md5:
            plan.md5 = ptx_md5(tree)
        for i, g in enumerate(plan.gpu, 1):
            status, secs, first, last = run_tests(tree, g, 3600, gpu=True)
            print(f"baseline GPU run {i}: {status} in {secs:.0f} s: {last}", file=sys.stderr)
            if status != "passed":
                raise SystemExit(f"the unmutated copy fails GPU run {i} ({first})")
            baseline[f"gpu{i}"] = secs
            plan.gpu_timeouts.append(3 * secs + 120)
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
