"""`tkc` as a user meets it: every command's --help, a checked interpreter run, the launch JSON, `--emit ptx`
with `--time-passes`, one-line errors without tracebacks, and atomic `-o` writes.

Most tests call `tkir.cli.main` in-process (fast); the ones about what a shell sees (exit codes, stderr) run
`python -m tkir.cli` in a subprocess. How long a compile takes is scripts/compile_time.py's business (a
benchmark), not a test's: CPU time, like wall time, moves with the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from limits import HANG_S  # tests/ is on sys.path under pytest

from tkir.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GEMM = str(EXAMPLES / "gemm.tk")
COMMANDS = ("compile", "opt", "run", "bench", "report", "cache")


def tkc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m tkir.cli ARGS` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "tkir.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=HANG_S)


@pytest.mark.parametrize("cmd", [None, *COMMANDS])
def test_help(cmd: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--help"] if cmd is None else [cmd, "--help"]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tkc") and (cmd is None or f"tkc {cmd}" in out)


def test_run_interpret_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLES / "softmax.tk"), "--interpret", "--check", "--size", "N=32", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "softmax.tk [N=32] Y: rel_err" in out and out.rstrip().endswith("ok")


def test_emit_launch_is_json(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                             tmp_path: Path) -> None:
    monkeypatch.setenv("TKIR_CACHE_DIR", str(tmp_path))
    assert main(["compile", GEMM, "--emit", "launch"]) == 0
    launch = json.loads(capsys.readouterr().out)
    assert launch["block"][0] == 384 and launch["dynamic_smem"] > 0
    assert [p["kind"] for p in launch["params"]][:2] == ["tensor_map", "tensor_map"]


def test_emit_ptx_with_time_passes(tmp_path: Path) -> None:
    out = tmp_path / "gemm.ptx"
    # the cache off: the passes, LLVM and ptxas really run, and --time-passes reports each
    proc = tkc("compile", GEMM, "--emit", "ptx", "-o", str(out), "--time-passes", env={"TKIR_CACHE": "0"})
    assert proc.returncode == 0, proc.stderr
    assert ".entry gemm" in out.read_text() and "backend (llvm, ptx)" in proc.stderr
    assert "plan-occupancy" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["compile", GEMM, "--bogus"], "tkc: error: unrecognized arguments: --bogus"),
    (["compile", GEMM, "--emit", "exe"], "tkc compile: error: argument --emit: invalid choice: 'exe'"),
    (["compile", GEMM, "--passes=canonicalize,bogus"], "<passes>:1:14: error: unknown pass 'bogus'"),
    (["compile", GEMM, "--stop-after=bogus"], "error: unknown pass 'bogus'"),
    (["opt", "tests/data/gemm_tk.tkir", "--passes=bogus"], "<passes>:1:1: error: unknown pass 'bogus'"),
    (["compile", "missing.tk"], "tkc compile: error: missing.tk: no such file"),
    (["report", "missing.tk"], "tkc report: error: missing.tk: no such file"),
    (["run", "missing.tk", "--interpret"], "tkc run: error: missing.tk: no such file"),
    (["bench", "missing.tk"], "tkc bench: error: missing.tk: no such file"),
    (["opt", "missing.tkir"], "tkc opt: error: missing.tkir: no such file"),
    (["compile", GEMM, "-D", "BM"], "tkc compile: error: -D expects NAME=VALUE, got 'BM'"),
    # issue 14's bad inputs: each a one-line error, not a traceback or a silent default
    (["compile", GEMM, "--passes="], "tkc compile: error: --passes is empty"),
    (["compile", GEMM, "-o", "tests"], "tkc compile: error: -o tests: is a directory"),
    (["compile", GEMM, "--passes=canonicalize,persistent{group_m=-1}"],
     "<passes>:1:25: error: persistent: group_m=-1: the group must be at least one tile-row"),
    (["compile", GEMM, "--passes=create-tma{epilogue_chunk=0}"],
     "<passes>:1:12: error: create-tma: epilogue_chunk=0: a positive multiple of 64 columns"),
    (["run", "examples/softmax.tk", "--interpret", "--size", "N=-16"], "tkc run: error: --size N=-16: a size is a positive integer"),
    (["run", "examples/softmax.tk", "--interpret", "--seed", "-1"], "tkc run: error: --seed -1: a seed is 0 or more"),
    (["run", GEMM, "--interpret", "--num-sms", "-1"], "tkc run: error: --num-sms -1: at least one multiprocessor"),
    (["run", GEMM, "--interpret", "--size", "M=128", "--size", "N=256"],
     "tkc run: error: missing --size for K (the kernel's sizes: M, K, N)"),
    (["run", GEMM, "--interpret", "--size", "M=128", "--size", "N=256", "--size", "K=64", "--size", "Q=1"],
     "tkc run: error: --size Q: not a size of this kernel (its sizes: M, K, N)"),
    # values the compiler cannot honour: errors, never truncated or dropped
    (["compile", GEMM, "--passes=canonicalize,persistent{group_m=4294967296}"],
     "<passes>:1:25: error: parameter 'group_m' of pass 'persistent' is 4294967296: out of the range of i32"),
    (["compile", GEMM, "--passes=canonicalize,stream-k{min_iters=4294967296}"],
     "<passes>:1:23: error: parameter 'min_iters' of pass 'stream-k' is 4294967296: out of the range of i32"),
    (["compile", GEMM, "--passes=canonicalize,stream-k{min_iters=2000000}"],
     "<passes>:1:23: error: stream-k: min_iters=2000000: must be 1..1048576"),
    (["compile", GEMM, "--passes=canonicalize,,persistent"],
     "<passes>:1:14: error: empty pass name: expected a pass name before ','"),
    (["compile", GEMM, "--passes=canonicalize,"], "<passes>:1:13: error: expected a pass name after ','"),
    (["compile", GEMM, "--group-m", "0"], "tkc compile: error: --group-m was removed in tkir 0.2"),
    (["tune", GEMM, "--size", "M=256", "--size", "N=256", "--size", "K=256", "--dry-run",
      "--passes=canonicalize,persistent{group_m=0}"],
     "<passes>:1:25: error: persistent: group_m=0: the group must be at least one tile-row"),
    (["run", "examples/softmax.tk", "--interpret", "--size", "N=2147483648"],
     "tkc run: error: --size N=2147483648: a size is at most 2147483647"),
    (["compile", GEMM, "-D", "BM=64", "-D", "BM=128"], "tkc compile: error: -D BM is given twice (BM=64 and BM=128)"),
    (["run", "examples/softmax.tk", "--interpret", "--size", "N=32", "--size", "N=48"],
     "tkc run: error: --size N is given twice (N=32 and N=48)"),
    (["compile", GEMM, "--stop-after="], "tkc compile: error: --stop-after is empty"),
    (["compile", GEMM, "--load-pass=README.md"], "error: --load-pass: 'README.md' is not a Python file"),
    # outputs that cannot be written: the flag, the path and why, and nothing half-written
    (["compile", GEMM, "--emit", "ptx", "-o", "/dev/full"],
     "tkc compile: error: -o /dev/full: cannot write: No space left on device"),
    (["compile", GEMM, "-o", "README.md/x.ptx"], "tkc compile: error: -o README.md/x.ptx: cannot write: README.md is "
                                                 "not a folder"),
    (["compile", GEMM, "-o", "no/such/folder/x.ptx"], "tkc compile: error: -o no/such/folder/x.ptx: cannot write: no "
                                                      "folder no/such/folder"),
    (["tune", "tests/data/rows/softmax.tk", "--size", "N=64", "-D", "ROWS=16", "-D", "WG=1", "-D", "OCC=0", "-D", "FENCE=0",
      "-D", "DC=1024", "--dry-run", "--json", "/dev/full"],
     "tkc tune: error: --json /dev/full: cannot write: No space left on device"),
])
def test_errors_are_one_line(args: list[str], message: str) -> None:
    proc = tkc(*args)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and (not proc.stdout or args[0] == "tune")  # tune prints its table first
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("tkc tune: compile ")]  # its progress
    assert lines[0].startswith(message), proc.stderr
    if lines[0].startswith("<passes>:"):  # a located error in the pipeline text: the text and a caret under it
        lines = [lines[0], *lines[3:]]
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("note: ")), proc.stderr


def test_output_is_not_touched_when_compilation_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.tk"
    bad.write_text((ROOT / "tests/frontend/bad/unknown_name.tk").read_text())
    out = tmp_path / "out.ptx"
    out.write_text("previous output\n")
    assert main(["compile", str(bad), "--emit", "ptx", "-o", str(out)]) == 1
    assert "error:" in capsys.readouterr().err
    assert out.read_text() == "previous output\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tk", "out.ptx"]


def test_output_is_whole_or_absent_when_writing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import tempfile

    out = tmp_path / "gemm.tkir"
    out.write_text("previous output\n")
    real = tempfile.NamedTemporaryFile

    class HalfWrite:  # writes the first bytes, then the disk is "full"
        def __init__(self, f: object) -> None:
            self.f = f

        def __getattr__(self, name: str) -> object:
            return getattr(self.f, name)

        def __enter__(self) -> HalfWrite:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def write(self, data: bytes) -> int:
            self.f.write(data[:10])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", lambda *a, **kw: HalfWrite(real(*a, **kw)))
    assert main(["compile", GEMM, "-o", str(out)]) == 1  # a one-line error naming the file, no traceback
    assert capsys.readouterr().err == f"tkc compile: error: -o {out}: cannot write: No space left on device\n"
    assert out.read_text() == "previous output\n"
    assert [p.name for p in tmp_path.iterdir()] == ["gemm.tkir"]  # the temporary file is gone too
    monkeypatch.setattr(tempfile, "NamedTemporaryFile", real)
    assert main(["compile", GEMM, "-o", str(out)]) == 0
    assert out.read_text().startswith("tma.desc @A_tma")


def test_output_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    target, link = tmp_path / "real.tkir", tmp_path / "link.tkir"
    target.write_text("old\n")
    target.chmod(0o640)
    link.symlink_to(target)
    assert main(["compile", str(EXAMPLES / "softmax.tk"), "-o", str(link)]) == 0
    assert link.is_symlink() and target.read_text().startswith("tk.kernel @softmax")
    assert target.stat().st_mode & 0o777 == 0o640


def test_output_to_a_pipe_is_written_in_place(tmp_path: Path) -> None:
    # `-o /dev/stdout` must write to the stream, never rename a file over the device node
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    assert main(["compile", str(EXAMPLES / "softmax.tk"), "--stop-after=canonicalize", "-o", str(fifo)]) == 0
    out, _ = reader.communicate(timeout=HANG_S)
    assert out.startswith("tk.kernel @softmax") and fifo.exists() and not fifo.is_file()


def test_stop_after_prints_the_ir_it_stopped_at(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(EXAMPLES / "softmax.tk"), "--stop-after=infer-layouts"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tk.kernel @softmax") and "layout={kind = row" in out and "occupancy" not in out


def test_bench_without_torch_is_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ModuleNotFoundError
    assert main(["bench", GEMM, "--size", "M=256", "--size", "N=256", "--size", "K=256"]) == 1
    assert capsys.readouterr().err == ("tkc bench: error: needs the 'torch' package "
                                       "(tkc bench and tkc run on the GPU compare with torch)\n")


def _default_with(old: str, new: str) -> str:
    from tkir.passes.registry import DEFAULT_PIPELINE

    return ",".join(new if p == old else p for p in DEFAULT_PIPELINE)


def test_run_interpret_with_num_sms_and_stream_k(capsys) -> None:
    """`tkc run --interpret --num-sms 4 --passes=...,persistent,stream-k,...`: stream-K on a small GEMM."""
    from tkir.cli import main

    rc = main(["run", "examples/gemm.tk", "--interpret", "--check", "--size", "M=384", "--size", "N=512",
               "--size", "K=2048", "--passes", _default_with("persistent", "persistent,stream-k"),
               "--num-sms", "4", "--seed", "3"])
    out = capsys.readouterr().out
    assert rc == 0 and "C: rel_err" in out and out.strip().endswith("ok")


def test_pass_parameters_in_the_pipeline(capsys) -> None:
    """`--passes=<default>,persistent{group_m=16}`: the parameter reaches the pass."""
    from tkir.cli import main

    assert main(["compile", "examples/gemm.tk", "--passes", _default_with("persistent", "persistent{group_m=16}")]) == 0
    assert "tile_order = {group = 16}" in capsys.readouterr().out


@pytest.mark.parametrize("entry, message", [
    ("persistent{grp=16}", "error: unknown parameter 'grp' of pass 'persistent'"),
    ("persistent{group_m=x}", "error: parameter 'group_m' of pass 'persistent' is an int, not 'x'"),
    ("persistent{group_m=16", "error: '{' after 'persistent' is never closed"),
    ("persistnt", "error: unknown pass 'persistnt'"),
])
def test_bad_pass_parameter_is_a_located_error(capsys, entry: str, message: str) -> None:
    """A mistake in the pipeline: `<passes>:1:COL: error: ...`, a caret under it, the known names."""
    from tkir.cli import main

    pipeline = _default_with("persistent", entry)
    assert main(["compile", "examples/gemm.tk", "--passes", pipeline]) == 1
    err = capsys.readouterr().err
    first, source, caret = err.splitlines()[:3]
    assert first.startswith("<passes>:1:") and first.endswith(message), err
    assert source == pipeline and caret.index("^") + 1 == int(first.split(":")[2])
    if "unknown parameter" in message:
        assert "group_m (int" in err and "balanced_grid (bool" in err  # the known parameters are listed
    elif "parameter" in message:
        assert "note: group_m (int, default unset)" in err
    else:
        assert "known passes:" in err or "never closed" in err


def test_removed_group_m_and_pass_option_say_what_to_write(capsys) -> None:
    """--group-m G and --pass-option KEY=VALUE were removed in tkir 0.2: a usage error (status 2) that
    spells the --passes of the pipeline they asked for, which compiles to what they did."""
    from tkir.cli import main

    assert main(["compile", "examples/gemm.tk", "--group-m", "4", "--pass-option", "epilogue_chunk=128"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("tkc compile: error: --group-m and --pass-option were removed in "
                                                "tkir 0.2: write --passes='")
    spelled = cap.err.split("--passes='")[1].split("'")[0]
    assert "persistent{group_m=4}" in spelled and "create-tma{epilogue_chunk=128}" in spelled
    assert main(["compile", "examples/gemm.tk", f"--passes={spelled}"]) == 0
    out = capsys.readouterr().out
    assert "tile_order = {group = 4}" in out and "chunk_cols = 128" in out
    assert main(["compile", "examples/gemm.tk", "--pass-option", "stream_k_max_tail=7", "--pass-option", "nope=1"]) == 2
    err = capsys.readouterr().err
    assert "--pass-option was removed in tkir 0.2: write the pass's parameter in --passes" in err
    assert main(["opt", "-", "--group-m", "2"]) == 2  # every command with pass flags, before reading anything
    assert "tkc opt: error: --group-m was removed in tkir 0.2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["compile", "--help"])
    shown = capsys.readouterr().out
    assert "--passes" in shown and "--group-m" not in shown and "--pass-option" not in shown


def test_passes_command_lists_parameters(capsys) -> None:
    from tkir.cli import main

    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    assert "--passes=canonicalize,legalize-mma," in out
    assert "group_m (int, default unset)" in out and "min_iters (int, default 16)" in out


def test_every_user_facing_error_is_a_tkir_error() -> None:
    """One base class: the CLI catches TkirError instead of matching exception class names."""
    from tkir.backend.cuda import CudaError
    from tkir.backend.runtime import LaunchError
    from tkir.backend.toolchain import ToolchainError
    from tkir.cli import UsageError
    from tkir.diagnostics import CompileError, TkirError
    from tkir.interp import InterpError

    for cls in (CompileError, InterpError, LaunchError, ToolchainError, CudaError, UsageError):
        assert issubclass(cls, TkirError), cls
    import inspect

    import tkir.cli

    assert "__name__ !=" not in inspect.getsource(tkir.cli.main)


def test_version() -> None:
    import tkir

    proc = tkc("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"tkc (tkir) {tkir.__version__}"


# --- tkc cache info / clear -------------------------------------------------------------------------

def test_cache_info_and_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("TKIR_CACHE_DIR", str(cache))
    monkeypatch.delenv("TKIR_CACHE", raising=False)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"directory: {cache} (not created yet)" in out
    assert "enabled:   yes" in out and "format:    2" in out and "entries:   0" in out and "size:      0 bytes" in out

    assert main(["compile", str(EXAMPLES / "softmax.tk"), "--emit", "ptx", "-o", str(tmp_path / "s.ptx")]) == 0
    capsys.readouterr()
    (entry,) = cache.glob("*.json")
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "entries:   1" in out and f"size:      {entry.stat().st_size} bytes (" in out and "KiB)" in out

    monkeypatch.setenv("TKIR_CACHE", "0")
    assert main(["cache", "info"]) == 0
    assert "enabled:   no (TKIR_CACHE=0)" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out == f"removed 1 entry from {cache}\n"
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out == f"removed 0 entries from {cache}\n"


def test_cache_without_an_action_is_a_usage_error() -> None:
    proc = tkc("cache")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("tkc cache: error: the following arguments are required: ACTION")


def test_a_corrupt_cache_entry_is_a_one_line_warning(tmp_path: Path) -> None:
    """A damaged entry: `tkc compile` warns in one line, rebuilds, writes the right output and
    rewrites the entry (the next compile is silent)."""
    from tkir.backend.cache import content_hash

    env = {"TKIR_CACHE_DIR": str(tmp_path / "cache"), "TKIR_CACHE": "1"}
    args = ("compile", "tests/data/rows/softmax.tk", "--emit", "ptx")  # no auto const: one compile
    first = tkc(*args, env=env)
    (entry,) = (tmp_path / "cache").glob("*.json")
    data = json.loads(entry.read_text())
    data["artifacts"]["ptx"] = 5  # a parseable entry holding a value of the wrong type, with its hash
    data["sha256"] = content_hash(data["artifacts"])
    entry.write_text(json.dumps(data))
    proc = tkc(*args, env=env)
    assert proc.returncode == 0 and proc.stdout == first.stdout
    assert proc.stderr == f"tkc: warning: tkir cache: ignoring {entry}: 'ptx' has type int, expected str; rebuilding it\n"
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    again = tkc(*args, env=env)
    assert again.returncode == 0 and again.stderr == "" and again.stdout == first.stdout


@pytest.mark.parametrize("args", [("passes",), ("compile", "examples/gemm.tk", "--print-after-all")])
def test_a_reader_that_stops_early_gets_no_traceback(args: tuple[str, ...]) -> None:
    """`tkc passes | head -3` closed the pipe under a print and showed BrokenPipeError's traceback."""
    proc = subprocess.run(f"{sys.executable} -m tkir.cli {' '.join(args)} | head -1", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_S)
    assert len(proc.stdout.splitlines()) == 1
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [("compile", "examples/gemm.tk"), ("passes",), ("compile", "examples/gemm.tk",
                                                                               "--emit", "cubin")])
@pytest.mark.parametrize("stdout", ["closed", "full"])
def test_an_unwritable_stdout_is_a_one_line_error(args: tuple[str, ...], stdout: str) -> None:
    """`tkc ... >&-` wrote nothing and exited 0 (or raised AttributeError); `> /dev/full` printed Python's
    "Exception ignored" and exited 120. Now: status 1 and one line that says what happened."""
    redirect = ">&-" if stdout == "closed" else "> /dev/full"
    proc = subprocess.run(f"{sys.executable} -m tkir.cli {' '.join(args)} {redirect}", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_S)
    want = ("standard output is closed: name a file with -o" if stdout == "closed" else
            "standard output: cannot write: No space left on device")
    assert proc.returncode == 1 and proc.stderr.startswith(f"tkc {args[0]}: error: {want}"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr and "Exception" not in proc.stderr


def test_emit_c_writes_both_files_or_neither(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The C source and its header go to temporary files first: a failure on the second leaves neither."""
    from tkir import output_file

    real = output_file._write_temporary
    calls: list[str] = []

    def fail_second(out: Path, raw: bytes, flag: str, path: str) -> str:
        calls.append(path)
        if len(calls) == 2:
            raise output_file.OutputError(f"{flag} {path}: cannot write: No space left on device")
        return real(out, raw, flag, path)

    monkeypatch.setattr(output_file, "_write_temporary", fail_second)
    c = tmp_path / "k.c"
    assert main(["compile", str(EXAMPLES / "softmax.tk"), "--emit", "c", "-o", str(c)]) == 1
    assert capsys.readouterr().err == f"tkc compile: error: -o {c}: cannot write: No space left on device\n"
    assert list(tmp_path.iterdir()) == []


def test_removed_group_m_with_a_value_its_pass_refuses_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """`--group-m 0` was answered with the generic advice, the 0 silently dropped."""
    assert main(["compile", GEMM, "--group-m", "0"]) == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith("and the value given is refused: persistent: group_m=0: the group must be at "
                                 "least one tile-row")
    import tkir

    with pytest.raises(TypeError, match="and the value given is refused: persistent: group_m=0"):
        tkir.compile(GEMM, group_m=0)


@pytest.mark.parametrize("kw, message", [
    ({"swizzle": "bogus"}, "swizzle='bogus': the only switch is swizzle='none'"),
    ({"swizzle": "128"}, "swizzle='128': the only switch is swizzle='none'"),
    ({"target": "sm_99"}, "target='sm_99': the targets are 'sm_90a', 'sm_80'"),
    ({"no_tma": "yes"}, "no_tma='yes': True or False"),
])
def test_compile_options_no_pass_honours_are_errors(kw: dict, message: str) -> None:
    """`tkir.compile(swizzle="bogus")` compiled as the default; an unknown target compiled for sm_90a."""
    import tkir
    from tkir.passmanager import OptionError

    with pytest.raises(OptionError, match=message):
        tkir.compile(GEMM, **kw)
    assert issubclass(OptionError, ValueError)


@pytest.mark.parametrize("kw, error, message", [
    ({"BM": True}, "CompileError", "const 'BM' = True: a const is an integer or a number"),
    ({"BM": "128"}, "CompileError", "const 'BM' = '128': a const is an integer or a number"),
    ({"BM": None}, "CompileError", "const 'BM' = None: a const is an integer or a number"),
    ({"passes": 5}, "TypeError", "a pipeline is a string or a list of entries, not int"),
    ({"passes": ["canonicalize", 5]}, "TypeError", "a pipeline entry is a string such as"),
    ({"load_passes": "p.py"}, "TypeError", "load_passes= is a list of files, e.g. load_passes=['p.py']"),
])
def test_compile_arguments_of_the_wrong_type_say_so(kw: dict, error: str, message: str) -> None:
    """`tkir.compile(BM=True)` said "unsupported size expression 'cdiv(M, True)'", BM=None "'BM' is a const",
    load_passes="p.py" looked for the files 'p', '.', 'p', 'y'."""
    import tkir

    with pytest.raises(Exception) as info:
        tkir.compile(GEMM, **kw)
    assert type(info.value).__name__ == error and message in str(info.value), info.value


def test_a_dry_run_that_keeps_no_point_fails(capsys: pytest.CaptureFixture[str]) -> None:
    """`tkc tune --dry-run` with every point dropped (here -D BK=40: no tile is a multiple of 16) exited 0."""
    rc = main(["tune", GEMM, "--size", "M=256", "--size", "N=256", "--size", "K=256", "-D", "BK=40", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 1 and err.rstrip().endswith("tkc tune: error: every point of the space is dropped (the reasons above)")


def test_a_byte_order_mark_is_not_part_of_the_program(tmp_path: Path) -> None:
    src = tmp_path / "bom.tk"
    src.write_bytes(b"\xef\xbb\xbf" + (EXAMPLES / "softmax.tk").read_bytes())
    assert main(["compile", str(src), "--stop-after=canonicalize", "-o", str(tmp_path / "out.tkir")]) == 0
