"""Run one input through tkc's real entry point (`tkir.cli.main`) and classify what happened.

Each input runs in a child forked from a warmed-up worker (the parsers, passes, rules and LLVM's
target machines are already loaded, so a child costs milliseconds, not the 0.4 s of a fresh
interpreter). The child sends fd 1 and 2 to files, caps its address space, runs `main(argv)` as
`python -m tkir.cli` would (an uncaught exception prints a traceback and exits 1) and exits with its
status. The timeout is CPU time (RLIMIT_CPU: the machine may be shared, and a loaded machine must not
turn a slow input into a "hang"); the parent also kills a child after WALL_FACTOR times the timeout of
wall time (a child blocked without using CPU). `run_subprocess` runs the same input in a real
`python -m tkir.cli` process (used on a sample, to check that the forked run behaves the same).

Classes:
  ok          exit status 0
  diagnosed   exit status 1, stderr has `FILE:LINE:COL: error:` with FILE the input (or `<passes>`), LINE
              within the file, COL >= 1, and no traceback
  unlocated   exit status 1 without such a line (`tkc compile: error: ...` about the input)
  traceback   "Traceback (most recent call last)" in the output
  hang        more than the timeout of CPU time (SIGXCPU), or WALL_FACTOR x timeout of wall time
  crash       killed by a signal, or another exit status
  accepted-wrong   exit status 0 on an input the fuzzer knows is wrong (a protocol edit, a value out of range)
  ptxas-rejected   ptxas refused PTX that tkir emitted (tkir must never emit PTX ptxas refuses)
An error about a command-line option the input sets (`option`, e.g. `tkc tune: error: --size M=0: ...`;
argparse's exit status 2 included) counts as located.
Stages (reached = completed): front (the .tk front end, or the IR parser), passes, llvm, ptx, ptxas.
"""

from __future__ import annotations

import math
import os
import re
import resource
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

CLASSES = ("ok", "diagnosed", "unlocated", "traceback", "hang", "crash", "accepted-wrong", "ptxas-rejected")
FAILURES = ("traceback", "hang", "crash", "accepted-wrong", "ptxas-rejected")
PTXAS_FAILED = "ptxas failed for "  # tkir.backend.toolchain.assemble's ToolchainError
STAGES = ("front", "passes", "llvm", "ptx", "ptxas")
TIMEOUT_S = 10.0
WALL_FACTOR = 6  # wall-clock limit per input, in timeouts (CPU time is the real limit)
MEMORY_LIMIT = 4 << 30  # bytes of address space per input: a runaway allocation is a crash, not a dead host
TRACEBACK = "Traceback (most recent call last)"
LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error: ", re.MULTILINE)
OUTPUT_TAIL = 4000  # characters of stderr kept in a result


@dataclass
class Result:
    cls: str
    rc: int | None
    seconds: float
    stages: list[str] = field(default_factory=list)
    stderr: str = ""
    signal: int | None = None

    @property
    def first_error(self) -> str:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        if self.cls == "traceback" and lines:
            return lines[-1]
        return lines[0] if lines else ""


def classify(rc: int | None, sig: int | None, timed_out: bool, stdout: str, stderr: str, path: str,
             text: str, wrong: bool = False, option: str | None = None) -> str:
    """The class of one run; `wrong`: the input is known to be wrong; `option`: the command-line option
    it sets, whose error message is located at the option."""
    if timed_out:
        return "hang"
    if TRACEBACK in stderr or TRACEBACK in stdout:
        return "traceback"
    if option is not None and rc == 2 and sig is None and _names_option(stderr, option):
        return "diagnosed"  # argparse's usage error (exit status 2) about the option
    if sig is not None or rc not in (0, 1):
        return "crash"
    if rc == 0:
        return "accepted-wrong" if wrong else "ok"
    if PTXAS_FAILED in stderr:
        return "ptxas-rejected"
    if option is not None and _names_option(stderr, option):
        return "diagnosed"
    return "diagnosed" if _located(stderr, path, text) else "unlocated"


def _names_option(stderr: str, option: str) -> bool:
    return any(re.match(rf"^tkc \w+: error: .*{re.escape(option)}\b", ln) for ln in stderr.splitlines())


def _located(stderr: str, path: str, text: str) -> bool:
    nlines = text.count("\n") + 1
    for m in LOCATED.finditer(stderr):
        line, col = int(m["line"]), int(m["col"])
        if m["file"] == path and 1 <= line <= nlines and col >= 1:
            return True
        if m["file"] == "<passes>" and line == 1 and col >= 1:
            return True
    return False


# --- stage marks: wrappers around the stage entry points, installed once per worker ----------------

_MARK_FD: int | None = None
STAGE_HOOKS = (  # (module, attribute path, stage): the stage is reached when the call returns
    ("tkir.frontend", "compile_file", "front"),
    ("tkir.parser", "parse_module", "front"),
    ("tkir.passmanager", "PassManager.run", "passes"),
    ("tkir.backend.lower", "lower_kernel", "llvm"),
    ("tkir.backend.lower", "llvm_to_ptx", "ptx"),
    ("tkir.backend.lower", "assemble_artifacts", "ptxas"),
)


def _marking(fn, stage: str):
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        if _MARK_FD is not None:
            os.write(_MARK_FD, (stage + "\n").encode())
        return out
    wrapper.__wrapped__ = fn
    wrapper.stage_mark = stage  # not __wrapped__ alone: functools.lru_cache's wrappers (llvm_to_ptx) have one too
    return wrapper


def install_stage_hooks() -> None:
    """Wrap each stage's entry point so that a child records the stages it completed."""
    import importlib

    for mod_name, attr, stage in STAGE_HOOKS:
        owner = importlib.import_module(mod_name)
        *path, last = attr.split(".")
        for p in path:
            owner = getattr(owner, p)
        fn = getattr(owner, last)
        if not hasattr(fn, "stage_mark"):
            setattr(owner, last, _marking(fn, stage))


def warm_up() -> None:
    """Load and build everything a compile touches, once, before any child is forked."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from tkir.cli import main

    os.environ["TKIR_CACHE"] = "0"  # every input runs the backend: no disk cache reads or writes
    gemm = str(Path(__file__).resolve().parents[3] / "examples" / "gemm.tk")  # tkir/tools/fuzz/ -> the repository
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        for target in ("sm_90a", "sm_80"):
            main(["compile", gemm, "--emit", "ptx", f"--target={target}"])
    from tkir.parser import ir_parser

    ir_parser()
    install_stage_hooks()


# --- running one input ------------------------------------------------------------------------------

def _child(argv: list[str], out_path: str, err_path: str, marks_path: str, timeout: float) -> None:
    """In the forked child: never returns."""
    global _MARK_FD
    rc = 70
    try:
        os.setpgid(0, 0)
        for fd, p in ((1, out_path), (2, err_path)):
            f = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        _MARK_FD = os.open(marks_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        cpu = max(int(math.ceil(timeout)), 1)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU at the soft limit
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        from tkir.cli import main

        try:
            code = main(argv)
            rc = 0 if code is None else int(code)
        except SystemExit as e:  # argparse; what `sys.exit(main())` would do
            if e.code is None or isinstance(e.code, int):
                rc = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                rc = 1
        except BaseException:  # what the interpreter does with an uncaught exception
            traceback.print_exc()
            rc = 1
        try:
            sys.stdout.flush()
        except BaseException:  # a write error at exit: the interpreter reports it and exits 120
            rc = 120
        sys.stderr.flush()
    finally:
        os._exit(rc)


def run_forked(argv: list[str], path: str, text: str, workdir: str, timeout: float = TIMEOUT_S,
               wrong: bool = False, option: str | None = None) -> Result:
    """Run `tkc argv` in a forked child of this (warmed-up) process and classify the outcome."""
    out_path, err_path, marks_path = (os.path.join(workdir, n) for n in ("stdout", "stderr", "marks"))
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        _child(argv, out_path, err_path, marks_path, timeout)
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], WALL_FACTOR * timeout)
        timed_out = not ready
        if timed_out:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(pidfd)
    seconds = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    sig = -rc if rc < 0 else None
    timed_out = timed_out or sig == signal.SIGXCPU
    stdout, stderr = _read(out_path), _read(err_path)
    stages = [s for s in _read(marks_path).split() if s in STAGES]
    cls = classify(None if sig else rc, sig, timed_out, stdout[-OUTPUT_TAIL:], stderr, path, text, wrong, option)
    return Result(cls, None if sig else rc, seconds, sorted(set(stages), key=STAGES.index),
                  stderr[-OUTPUT_TAIL:], sig)


def run_subprocess(argv: list[str], path: str, text: str, timeout: float = TIMEOUT_S, wrong: bool = False,
                   option: str | None = None) -> Result:
    """The same input through a fresh `python -m tkir.cli` (no stage marks)."""
    env = dict(os.environ, TKIR_CACHE="0")
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "tkir.cli", *argv], capture_output=True,
                           timeout=WALL_FACTOR * timeout,
                           env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Result("hang", None, time.perf_counter() - t0)
    stdout = p.stdout.decode("utf-8", "replace")
    stderr = p.stderr.decode("utf-8", "replace")
    sig = -p.returncode if p.returncode < 0 else None
    cls = classify(None if sig else p.returncode, sig, False, stdout, stderr, path, text, wrong, option)
    return Result(cls, None if sig else p.returncode, time.perf_counter() - t0, [], stderr[-OUTPUT_TAIL:], sig)


def _read(path: str) -> str:
    try:
        return Path(path).read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
